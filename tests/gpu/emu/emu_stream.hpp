// Deferred work on emulated CUDA streams (test only; emu_stream.cpp). Kernels, copies, memsets
// and GEMMs still run synchronously when called, but only after everything queued before them
// on their stream has completed. Work queued here (the fake NCCL's operations, emu_nccl.cpp)
// does NOT run when it is enqueued: it runs when something orders on it, as a GPU may run it
// late:
//  - synchronous work later issued on the same stream (order_before);
//  - cudaStreamSynchronize of that stream, cudaDeviceSynchronize, and the legacy default
//    stream's synchronous copies (which wait for every blocking stream);
//  - cudaEventSynchronize, or cudaStreamWaitEvent followed by work on the waiting stream, of an
//    event recorded on that stream after it;
//  - cudaEventQuery of such an event: the first query after the record returns
//    cudaErrorNotReady without running anything (late completion); later queries make
//    progress without blocking.
// Whenever a wait cannot finish because an item waits for something outside this process (a
// peer's matching NCCL operation), every other stream's startable work is started in a shuffled
// order (seed: SATURN_EMU_SEED), as a GPU runs independent streams concurrently and in no fixed
// order. A wait that makes no progress for SATURN_EMU_HANG_S seconds (default 300) is reported
// as the deadlock it would be on a GPU, naming the item, and the process aborts.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>

namespace emu {

struct StreamWork {
  std::string name;             // for deadlock reports
  std::function<void()> start;  // runs once, when the stream reaches the item
  // After start: true once complete; never blocks. Null: complete when started.
  std::function<bool()> poll;
};

// Queues `work` on `stream` (nullptr: the legacy default stream).
void enqueue(cudaStream_t stream, StreamWork work);
// Before synchronous work on `stream`: completes what is queued on it (and, for the legacy
// default stream, on every blocking stream), blocking.
void order_before(cudaStream_t stream);
// Completes everything queued on `stream` (blocking).
void synchronize_stream(cudaStream_t stream);
// Completes everything queued on every stream, streams in shuffled order.
void synchronize_all();
// Starts and polls whatever can advance on any stream without blocking; true if anything did.
bool progress();

// Streams and events as the emulated runtime API creates them (emu_runtime.cpp calls these).
cudaStream_t create_stream(bool blocking);
void destroy_stream(cudaStream_t stream);  // completes its queued work first
struct EventPosition {
  void* stream = nullptr;      // stream state it was recorded on; null: never recorded
  std::uint64_t position = 0;  // items queued on that stream when it was recorded
  bool queried_pending = false;
};
void record(EventPosition& event, cudaStream_t stream);
bool reached(const EventPosition& event);
void wait_event(const EventPosition& event);  // blocking
// cudaEventQuery: false while the work before the event is not complete (always false on the
// first query of a pending event).
bool query(EventPosition& event);
// cudaStreamWaitEvent: work on `stream` after this waits for `event`.
void stream_wait(cudaStream_t stream, const EventPosition& event);

}  // namespace emu
