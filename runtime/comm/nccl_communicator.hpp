// The NCCL backend of Communicator: the same calls as MpiCommunicator, on device buffers, the
// data communicator of CUDA jobs whose ranks each have their own GPU (comm_pair.cpp chooses).
// Built with real NCCL when CMake finds it next to CUDA (SATURN_HAVE_NCCL), and in saturn_emu's
// backend against the emulator's fake NCCL (tests/gpu/emu/emu_nccl.cpp); see docs/cuda.md.
//
// Set-up: rank 0 of the bootstrap communicator (any Communicator, e.g. an MPI duplicate of the
// job's) creates a NCCL unique id and broadcasts it; every member joins one NCCL communicator of
// the same size and rank order. Each communicator has its own stream:
//  - every operation first makes the NCCL stream wait (event) for the work already queued on
//    the compute stream, so it reads finished data; nothing synchronises the host there;
//  - blocking calls then wait for the operation's completion event; a non-blocking call's
//    Request completes when its event has fired, and then makes the compute stream wait for it,
//    so kernels queued afterwards see the result;
//  - isend/irecv are collected and issued together inside one ncclGroupStart/End when any of
//    their requests is tested or waited, or any other operation is issued (a blocking send/recv
//    joins the group), so send/recv pairs two ranks post to each other cannot deadlock. NCCL
//    matches point-to-point messages per peer in issue order; tags are accepted for interface
//    compatibility but not used for matching.
// Non-blocking mode (ncclConfig_t::blocking = 0): NCCL may block inside a call in blocking mode
// (ncclCommInitRank waits for every member, ncclGroupEnd and the first operations with a peer
// set up connections), where no timeout could see a dead peer. Here every call that returns
// ncclInProgress is polled (ncclCommGetAsyncError) until complete, under the same timeout as
// the waits, before anything else is issued on the communicator.
// Order across communicators: operations of different communicators may run one at a time on a
// GPU, in host issue order, so every rank must issue its operations over all its communicators
// in one order fixed by the program (a strategy's code), never by timing or by which request
// completed first; then whatever runs first on one rank runs first on its peers. The fake NCCL
// of the emulator runs a process's operations one group at a time in issue order, so a strategy
// that breaks this order deadlocks (times out) in the emulated tests.
// Failure: every wait polls its event and ncclCommGetAsyncError, with a timeout
// (SATURN_NCCL_TIMEOUT_S, default 600 s). On an asynchronous error or the timeout the
// communicator calls ncclCommAbort (so no operation of it can hang the process afterwards) and
// throws NcclError naming the communicator, the operation and the rank; every later call
// throws too. The training loop turns that into the job's agreed failure on its control
// communicator, so the job fails alone.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/core/error.hpp"

namespace saturn::comm {

// A NCCL operation failed (asynchronous error, timeout, or a failed call); the communicator is
// aborted. Names the communicator (describe()), the operation and the rank.
class NcclError : public Error {
 public:
  NcclError(const std::string& message, std::string communicator, std::string operation, int rank)
      : Error(message),
        communicator_(std::move(communicator)),
        operation_(std::move(operation)),
        rank_(rank) {}
  const std::string& communicator() const { return communicator_; }
  const std::string& operation() const { return operation_; }
  int rank() const { return rank_; }

 private:
  std::string communicator_, operation_;
  int rank_;
};

// Seconds a wait for one NCCL operation may take: SATURN_NCCL_TIMEOUT_S (default 600).
// InputError when it is set and not a positive number.
double nccl_timeout_from_env();

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap` (borrowed, or owned). `device`: this rank's CUDA device;
  // `compute_stream`: the stream whose work operations must follow (nullptr: the legacy
  // default stream).
  NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute_stream);
  NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device,
                   cudaStream_t compute_stream);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;
  // Splits the bootstrap communicator and builds a NCCL communicator per color over it.
  std::unique_ptr<Communicator> split(int color, int key) override;
  cudaStream_t stream() const { return stream_; }
  ncclComm_t handle() const { return comm_; }
  bool aborted() const { return aborted_; }
  double timeout_seconds() const { return timeout_s_; }
  // For tests: the wait limit of this communicator (and of those split from it afterwards).
  void set_timeout_seconds(double seconds) { timeout_s_ = seconds; }
  // Told of every device buffer a non-blocking operation uses on this communicator's stream,
  // once the operation is enqueued: the device's allocator then keeps a buffer released before
  // its request is waited from being handed out while NCCL may still read or write it
  // (CachingDeviceAllocator::record_stream). Inherited by split() results.
  using StreamUseRecorder = std::function<void(const void* buffer, cudaStream_t stream)>;
  void set_stream_use_recorder(StreamUseRecorder recorder) { record_use_ = std::move(recorder); }

  // Used by this communicator's requests.
  bool poll_event(cudaEvent_t event, const std::string& what);   // true once fired
  void await_event(cudaEvent_t event, const std::string& what);  // polls, with the timeout
  void order_compute_after(cudaEvent_t event, const std::string& what);
  void flush_p2p();  // issues the collected isend/irecv as one group

 protected:
  void do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                         ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType type) override;
  void do_broadcast(void* data, std::size_t count, DType type, int root) override;
  void do_send(const void* data, std::size_t count, DType type, int dest, int tag) override;
  void do_recv(void* data, std::size_t count, DType type, int source, int tag) override;
  void do_barrier() override;
  std::unique_ptr<RequestImpl> do_iallreduce(void* data, std::size_t count, DType type,
                                             ReduceOp op) override;
  std::unique_ptr<RequestImpl> do_ireduce_scatter(const void* send, void* recv,
                                                  std::size_t recv_count, DType type,
                                                  ReduceOp op) override;
  std::unique_ptr<RequestImpl> do_iall_gather(const void* send, void* recv, std::size_t send_count,
                                              DType type) override;
  std::unique_ptr<RequestImpl> do_isend(const void* data, std::size_t count, DType type, int dest,
                                        int tag) override;
  std::unique_ptr<RequestImpl> do_irecv(void* data, std::size_t count, DType type, int source,
                                        int tag) override;

 public:
  // isend/irecv not yet issued (and, once issued, their shared completion event).
  struct P2pBatch;

 private:
  void init(int device);
  void require_usable(const std::string& what) const;
  // Aborts the communicator and throws NcclError for `what`.
  [[noreturn]] void fail(const std::string& what, const std::string& reason);
  void check(ncclResult_t r, const std::string& what);
  // The communicator is non-blocking: a call that returned ncclInProgress is complete once
  // ncclCommGetAsyncError stops saying so; polled under the timeout, as operations are.
  void settle(ncclResult_t issued, const std::string& what);
  static void back_off(int polls);
  void follow_compute();  // NCCL stream waits for the compute stream's queued work
  // Issues one collective: `enqueue` calls NCCL on the NCCL stream. Blocking: waits for it and
  // returns null; else returns its request.
  template <typename Enqueue>
  std::unique_ptr<RequestImpl> collective(const std::string& what, bool blocking,
                                          Enqueue&& enqueue);
  std::unique_ptr<RequestImpl> point_to_point(bool is_send, void* data, std::size_t count,
                                              DType type, int peer);
  cudaEvent_t record_on_stream(const std::string& what);
  void note_use(const void* buffer);  // record_use_ of a non-blocking operation's buffer

  std::unique_ptr<Communicator> owned_bootstrap_;  // split() results own theirs
  Communicator* bootstrap_;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;     // compute stream position an operation follows
  cudaEvent_t blocking_ = nullptr;  // completion of the current blocking operation
  ncclComm_t comm_ = nullptr;
  double timeout_s_ = 600;
  bool aborted_ = false;
  std::string failure_;  // why it was aborted
  std::shared_ptr<P2pBatch> pending_p2p_;
  StreamUseRecorder record_use_;
};

}  // namespace saturn::comm
