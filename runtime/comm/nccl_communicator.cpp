#include "runtime/comm/nccl_communicator.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/comm/agree.hpp"

namespace saturn::comm {

struct NcclCommunicator::P2pBatch {
  struct Op {
    bool is_send = false;
    void* data = nullptr;
    std::size_t count = 0;
    DType type = DType::kFloat32;
    int peer = 0;
  };
  std::vector<Op> ops;
  cudaEvent_t done = nullptr;  // set when issued
  std::string what;            // "ncclSend/ncclRecv group of N"
  ~P2pBatch() {
    if (done != nullptr) cudaEventDestroy(done);
  }
};

namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
    case DType::kBFloat16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op, DType type) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      if (type != DType::kFloat32 && type != DType::kFloat64 && type != DType::kBFloat16)
        throw Error(
            fmt::format("ReduceOp::kAvg needs a floating-point type, not {}", dtype_name(type)));
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// A collective's request: complete when its event has fired.
class NcclRequest final : public RequestImpl {
 public:
  NcclRequest(NcclCommunicator* comm, std::string what, cudaEvent_t done)
      : comm_(comm), what_(std::move(what)), done_(done) {}
  ~NcclRequest() override {
    // Request's destructor waited (or the communicator was aborted): the event is idle.
    cudaEventDestroy(done_);
  }
  bool test() override {
    if (!comm_->poll_event(done_, what_)) return false;
    comm_->order_compute_after(done_, what_);
    return true;
  }
  void wait() override {
    comm_->await_event(done_, what_);
    comm_->order_compute_after(done_, what_);
  }

 private:
  NcclCommunicator* comm_;
  std::string what_;
  cudaEvent_t done_;
};

// One isend/irecv: complete when its group has been issued and its event has fired.
class P2pRequest final : public RequestImpl {
 public:
  P2pRequest(NcclCommunicator* comm, std::shared_ptr<NcclCommunicator::P2pBatch> batch)
      : comm_(comm), batch_(std::move(batch)) {}
  bool test() override {
    comm_->flush_p2p();
    if (!comm_->poll_event(batch_->done, batch_->what)) return false;
    comm_->order_compute_after(batch_->done, batch_->what);
    return true;
  }
  void wait() override {
    comm_->flush_p2p();
    comm_->await_event(batch_->done, batch_->what);
    comm_->order_compute_after(batch_->done, batch_->what);
  }

 private:
  NcclCommunicator* comm_;
  std::shared_ptr<NcclCommunicator::P2pBatch> batch_;
};

}  // namespace

double nccl_timeout_from_env() {
  const char* v = std::getenv("SATURN_NCCL_TIMEOUT_S");
  if (v == nullptr || *v == '\0') return 600;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(s > 0))
    throw InputError(
        fmt::format("SATURN_NCCL_TIMEOUT_S='{}': expected a positive number of "
                    "seconds",
                    v));
  return s;
}

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute_stream)
    : bootstrap_(&bootstrap), compute_(compute_stream) {
  init(device);
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> bootstrap, int device,
                                   cudaStream_t compute_stream)
    : owned_bootstrap_(std::move(bootstrap)),
      bootstrap_(owned_bootstrap_.get()),
      compute_(compute_stream) {
  if (bootstrap_ == nullptr) throw Error("NcclCommunicator without a bootstrap communicator");
  init(device);
}

void NcclCommunicator::init(int device) {
  device_ = device;
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();
  timeout_s_ = nccl_timeout_from_env();
  // Each local step is agreed before the next collective one, so a rank that fails here (no
  // id, no device, no stream) makes every rank throw instead of leaving its peers waiting in
  // the broadcast or in ncclCommInitRank.
  ncclUniqueId id{};
  agree_on(*bootstrap_, [&] {
    if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  });
  // The id is 128 opaque bytes: broadcast as 32-bit words over the bootstrap communicator.
  static_assert(sizeof(id.internal) % sizeof(std::int32_t) == 0);
  std::int32_t words[sizeof(id.internal) / sizeof(std::int32_t)];
  std::memcpy(words, id.internal, sizeof(words));
  bootstrap_->broadcast(words, sizeof(words) / sizeof(std::int32_t), 0);
  std::memcpy(id.internal, words, sizeof(words));
  agree_on(*bootstrap_, [&] {
    SATURN_CUDA_CHECK(cudaSetDevice(device));
    SATURN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&blocking_, cudaEventDisableTiming));
  });
  // Non-blocking: NCCL's calls return ncclInProgress instead of blocking inside NCCL (set-up,
  // connecting to a peer), and settle() polls them under the timeout.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  settle(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config), "ncclCommInitRankConfig");
}

NcclCommunicator::~NcclCommunicator() {
  if (!aborted_) {
    try {
      flush_p2p();
      SATURN_CUDA_CHECK(cudaEventRecord(blocking_, stream_));
      await_event(blocking_, "the communicator's destruction (its last operations)");
      settle(ncclCommFinalize(comm_), "ncclCommFinalize");
    } catch (...) {
      // Reported by fail() (which aborted the communicator); destructors must not throw.
    }
  }
  if (comm_ != nullptr) {
    if (aborted_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
  pending_p2p_.reset();
  if (blocking_ != nullptr) cudaEventDestroy(blocking_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::describe() const {
  return fmt::format("nccl rank {}/{} (cuda device {})", rank_, size_, device_);
}

void NcclCommunicator::require_usable(const std::string& what) const {
  if (aborted_)
    throw NcclError(fmt::format("NCCL {} on {}: the communicator was aborted earlier ({})", what,
                                describe(), failure_),
                    describe(), what, rank_);
}

void NcclCommunicator::fail(const std::string& what, const std::string& reason) {
  if (!aborted_) {
    aborted_ = true;
    failure_ = fmt::format("{}: {}", what, reason);
    // Aborting completes (without results) whatever this communicator has queued, so neither
    // this rank's later waits nor its streams can hang on a peer that is gone.
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
  }
  throw NcclError(fmt::format("NCCL {} on {} failed: {}; the communicator was aborted", what,
                              describe(), reason),
                  describe(), what, rank_);
}

void NcclCommunicator::check(ncclResult_t r, const std::string& what) {
  if (r == ncclSuccess) return;
  const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : ncclGetLastError(nullptr);
  fail(what, fmt::format("{}{}{}", ncclGetErrorString(r), last != nullptr && *last ? ": " : "",
                         last != nullptr ? last : ""));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  require_usable("split");
  flush_p2p();
  auto sub = bootstrap_->split(color, key);
  if (!sub) return nullptr;
  auto child = std::make_unique<NcclCommunicator>(std::move(sub), device_, compute_);
  child->timeout_s_ = timeout_s_;
  child->record_use_ = record_use_;
  return child;
}

void NcclCommunicator::settle(ncclResult_t issued, const std::string& what) {
  if (issued != ncclInProgress) return check(issued, what);
  const auto t0 = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) check(r, what + " (ncclCommGetAsyncError)");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) check(state, what);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s_)
      fail(what, fmt::format("still in progress after {:.0f} s (SATURN_NCCL_TIMEOUT_S): a peer "
                             "rank failed, died or has not made the same call",
                             waited));
    back_off(polls);
  }
}

void NcclCommunicator::back_off(int polls) {
  // Spin briefly (most calls finish in microseconds), then sleep a little longer each time.
  if (polls < 64) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(polls < 1024 ? 50 : 1000));
  }
}

bool NcclCommunicator::poll_event(cudaEvent_t event, const std::string& what) {
  require_usable(what);
  const cudaError_t e = cudaEventQuery(event);
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) fail(what, fmt::format("cudaEventQuery: {}", cudaGetErrorString(e)));
  cudaGetLastError();  // not ready is not an error: clear it
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
  if (r != ncclSuccess) check(r, what + " (ncclCommGetAsyncError)");
  if (async != ncclSuccess && async != ncclInProgress) {
    const char* last = ncclGetLastError(comm_);
    fail(what, fmt::format("asynchronous NCCL error: {}{}{}", ncclGetErrorString(async),
                           last != nullptr && *last ? ": " : "", last != nullptr ? last : ""));
  }
  return false;
}

void NcclCommunicator::await_event(cudaEvent_t event, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int polls = 0;; ++polls) {
    if (poll_event(event, what)) return;
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (waited > timeout_s_)
      fail(what, fmt::format("not complete after {:.0f} s (SATURN_NCCL_TIMEOUT_S): a peer rank "
                             "failed, died or issued a different operation",
                             waited));
    back_off(polls);
  }
}

void NcclCommunicator::order_compute_after(cudaEvent_t event, const std::string& what) {
  const cudaError_t e = cudaStreamWaitEvent(compute_, event, 0);
  if (e != cudaSuccess) fail(what, fmt::format("cudaStreamWaitEvent: {}", cudaGetErrorString(e)));
}

void NcclCommunicator::follow_compute() {
  SATURN_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  SATURN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
}

cudaEvent_t NcclCommunicator::record_on_stream(const std::string& what) {
  cudaEvent_t done = nullptr;
  SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t e = cudaEventRecord(done, stream_);
  if (e != cudaSuccess) {
    cudaEventDestroy(done);
    fail(what, fmt::format("cudaEventRecord: {}", cudaGetErrorString(e)));
  }
  return done;
}

void NcclCommunicator::note_use(const void* buffer) {
  if (record_use_ && buffer != nullptr) record_use_(buffer, stream_);
}

void NcclCommunicator::flush_p2p() {
  if (!pending_p2p_) return;
  std::shared_ptr<P2pBatch> batch = std::move(pending_p2p_);
  pending_p2p_.reset();
  require_usable(batch->what);
  follow_compute();
  check(ncclGroupStart(), "ncclGroupStart");
  ncclResult_t first_error = ncclSuccess;
  std::string failed_call;
  for (const P2pBatch::Op& op : batch->ops) {
    const ncclResult_t r =
        op.is_send ? ncclSend(op.data, op.count, nccl_type(op.type), op.peer, comm_, stream_)
                   : ncclRecv(op.data, op.count, nccl_type(op.type), op.peer, comm_, stream_);
    if (r != ncclSuccess && first_error == ncclSuccess) {
      first_error = r;
      failed_call =
          fmt::format("{} rank {}", op.is_send ? "ncclSend to" : "ncclRecv from", op.peer);
    }
  }
  // The group is closed even when a call failed, so NCCL's group state stays balanced.
  const ncclResult_t end = ncclGroupEnd();
  if (first_error != ncclSuccess) check(first_error, failed_call);
  settle(end, "ncclGroupEnd of " + batch->what);
  for (const P2pBatch::Op& op : batch->ops) note_use(op.data);
  batch->done = record_on_stream(batch->what);
}

std::unique_ptr<RequestImpl> NcclCommunicator::point_to_point(bool is_send, void* data,
                                                              std::size_t count, DType type,
                                                              int peer) {
  const std::string what =
      fmt::format("{} rank {}", is_send ? "ncclSend to" : "ncclRecv from", peer);
  require_usable(what);
  if (peer < 0 || peer >= size_ || peer == rank_)
    throw Error(fmt::format("{} on {}: no such peer", what, describe()));
  if (!pending_p2p_) pending_p2p_ = std::make_shared<P2pBatch>();
  pending_p2p_->ops.push_back(P2pBatch::Op{is_send, data, count, type, peer});
  pending_p2p_->what = fmt::format("point-to-point group ({} operations, the last: {})",
                                   pending_p2p_->ops.size(), what);
  return std::make_unique<P2pRequest>(this, pending_p2p_);
}

template <typename Enqueue>
std::unique_ptr<RequestImpl> NcclCommunicator::collective(const std::string& what, bool blocking,
                                                          Enqueue&& enqueue) {
  require_usable(what);
  flush_p2p();  // issue order is NCCL's matching order
  follow_compute();
  settle(enqueue(), what);
  if (blocking) {
    SATURN_CUDA_CHECK(cudaEventRecord(blocking_, stream_));
    await_event(blocking_, what);
    return nullptr;
  }
  return std::make_unique<NcclRequest>(this, what, record_on_stream(what));
}

// ---- blocking ----------------------------------------------------------------------------------
void NcclCommunicator::do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  const ncclRedOp_t red = nccl_op(op, type);
  collective("ncclAllReduce", true, [&] {
    return ncclAllReduce(data, data, count, nccl_type(type), red, comm_, stream_);
  });
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                         DType type, ReduceOp op) {
  const ncclRedOp_t red = nccl_op(op, type);
  collective("ncclReduceScatter", true, [&] {
    return ncclReduceScatter(send, recv, recv_count, nccl_type(type), red, comm_, stream_);
  });
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count,
                                     DType type) {
  collective("ncclAllGather", true, [&] {
    return ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_);
  });
}

void NcclCommunicator::do_broadcast(void* data, std::size_t count, DType type, int root) {
  collective(fmt::format("ncclBroadcast from rank {}", root), true, [&] {
    return ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_);
  });
}

void NcclCommunicator::do_send(const void* data, std::size_t count, DType type, int dest, int) {
  // Joins the collected isend/irecv, so it is issued in one group with them.
  auto r = point_to_point(true, const_cast<void*>(data), count, type, dest);
  r->wait();
}

void NcclCommunicator::do_recv(void* data, std::size_t count, DType type, int source, int) {
  auto r = point_to_point(false, data, count, type, source);
  r->wait();
}

void NcclCommunicator::do_barrier() {
  // Host-level rendezvous once this rank's transfers are done.
  require_usable("barrier");
  flush_p2p();
  SATURN_CUDA_CHECK(cudaEventRecord(blocking_, stream_));
  await_event(blocking_, "barrier (this rank's queued operations)");
  bootstrap_->barrier();
}

// ---- non-blocking ------------------------------------------------------------------------------
std::unique_ptr<RequestImpl> NcclCommunicator::do_iallreduce(void* data, std::size_t count,
                                                             DType type, ReduceOp op) {
  const ncclRedOp_t red = nccl_op(op, type);
  auto request = collective("ncclAllReduce", false, [&] {
    return ncclAllReduce(data, data, count, nccl_type(type), red, comm_, stream_);
  });
  note_use(data);
  return request;
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_ireduce_scatter(const void* send, void* recv,
                                                                  std::size_t recv_count,
                                                                  DType type, ReduceOp op) {
  const ncclRedOp_t red = nccl_op(op, type);
  auto request = collective("ncclReduceScatter", false, [&] {
    return ncclReduceScatter(send, recv, recv_count, nccl_type(type), red, comm_, stream_);
  });
  note_use(send);
  note_use(recv);
  return request;
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_iall_gather(const void* send, void* recv,
                                                              std::size_t send_count, DType type) {
  auto request = collective("ncclAllGather", false, [&] {
    return ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_);
  });
  note_use(send);
  note_use(recv);
  return request;
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_isend(const void* data, std::size_t count,
                                                        DType type, int dest, int) {
  return point_to_point(true, const_cast<void*>(data), count, type, dest);
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_irecv(void* data, std::size_t count, DType type,
                                                        int source, int) {
  return point_to_point(false, data, count, type, source);
}

}  // namespace saturn::comm
