// Controls the CUDA emulator offers tests beyond the CUDA API (test only, emu_runtime.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace emu {

// Holds `stream` back (hold) or lets it go: operations on a held stream still complete at once
// (the emulator is synchronous), but events recorded on it stay pending (cudaEventQuery returns
// cudaErrorNotReady) until it is let go, as if its work were still running on a GPU. Waiting on
// the host for such an event or stream (cudaEventSynchronize, cudaStreamSynchronize) is an error,
// since it could never return.
void hold_stream(cudaStream_t stream, bool hold);

// How often the host has waited for the device since the process started: the calls that block
// the calling thread until device work completes (cudaStreamSynchronize, cudaDeviceSynchronize,
// cudaEventSynchronize, cudaMemcpy/cudaMemset without a stream) and asynchronous copies between
// the device and pageable host memory (the driver stages those, so they block too). Tests count
// what one training step costs in host waits (issue 18: none per micro-batch).
struct HostWaits {
  long stream_syncs = 0;
  long device_syncs = 0;
  long event_syncs = 0;
  long blocking_copies = 0;  // cudaMemcpy, cudaMemset, pageable cudaMemcpy(2D)Async
  long total() const { return stream_syncs + device_syncs + event_syncs + blocking_copies; }
};
HostWaits host_waits();

// cudaMemsetAsync calls so far in this process: the memsets the backend enqueues (tests count
// those of a model pass; the allocator's poisoning of released blocks, emulator-only, goes
// through emu_poison_released_block and is not counted).
std::uint64_t memset_async_calls();

}  // namespace emu
