#include "runtime/comm/nccl_communicator.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/core/error.hpp"

namespace saturn::comm {
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
      if (type != DType::kFloat32 && type != DType::kFloat64)
        throw Error("ReduceOp::kAvg needs a floating-point type");
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

// Completes when the event recorded after the operation on the NCCL stream fires.
class NcclRequest final : public RequestImpl {
 public:
  NcclRequest(std::string what, cudaEvent_t done, cudaStream_t compute)
      : what_(std::move(what)), done_(done), compute_(compute) {}
  ~NcclRequest() override {
    if (done_ != nullptr) {
      cudaEventSynchronize(done_);
      cudaEventDestroy(done_);
    }
  }
  bool test() override {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaErrorNotReady) {
      cudaGetLastError();  // not an error: clear it
      return false;
    }
    cuda::check_cuda(e, what_.c_str(), __FILE__, __LINE__);
    complete();
    return true;
  }
  void wait() override {
    cuda::check_cuda(cudaEventSynchronize(done_), what_.c_str(), __FILE__, __LINE__);
    complete();
  }

 private:
  void complete() {
    if (!completed_) {
      // Kernels queued on the compute stream from now on run after the transfer.
      cuda::check_cuda(cudaStreamWaitEvent(compute_, done_, 0), what_.c_str(), __FILE__, __LINE__);
      completed_ = true;
    }
  }
  std::string what_;
  cudaEvent_t done_;
  cudaStream_t compute_;
  bool completed_ = false;
};

}  // namespace

NcclCommunicator::NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute_stream)
    : bootstrap_(&bootstrap), compute_(compute_stream) {
  init(device);
}

NcclCommunicator::NcclCommunicator(std::unique_ptr<Communicator> owned_bootstrap, int device,
                                   cudaStream_t compute_stream)
    : owned_bootstrap_(std::move(owned_bootstrap)),
      bootstrap_(owned_bootstrap_.get()),
      compute_(compute_stream) {
  init(device);
}

void NcclCommunicator::init(int device) {
  device_ = device;
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();
  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  // The id is 128 opaque bytes: broadcast as 32-bit words over the bootstrap communicator.
  static_assert(sizeof(id.internal) % sizeof(std::int32_t) == 0);
  std::int32_t words[sizeof(id.internal) / sizeof(std::int32_t)];
  std::memcpy(words, id.internal, sizeof(words));
  bootstrap_->broadcast(words, sizeof(words) / sizeof(std::int32_t), 0);
  std::memcpy(id.internal, words, sizeof(words));
  SATURN_CUDA_CHECK(cudaSetDevice(device));
  SATURN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
}

NcclCommunicator::~NcclCommunicator() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (comm_ != nullptr) ncclCommDestroy(comm_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string NcclCommunicator::describe() const {
  return fmt::format("nccl rank {}/{} (cuda device {})", rank_, size_, device_);
}

void NcclCommunicator::check(ncclResult_t r, const char* what) const {
  if (r == ncclSuccess) return;
  const char* last = comm_ != nullptr ? ncclGetLastError(comm_) : nullptr;
  throw cuda::CudaError(fmt::format("NCCL error in {} on {}: {}{}{}", what, describe(),
                                    ncclGetErrorString(r), last != nullptr && *last ? ": " : "",
                                    last != nullptr ? last : ""));
}

std::unique_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  auto sub = bootstrap_->split(color, key);
  if (!sub) return nullptr;
  return std::unique_ptr<Communicator>(new NcclCommunicator(std::move(sub), device_, compute_));
}

void NcclCommunicator::follow_compute() {
  SATURN_CUDA_CHECK(cudaEventRecord(ready_, compute_));
  SATURN_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0));
}

void NcclCommunicator::finish_blocking(const char* what) {
  cuda::check_cuda(cudaStreamSynchronize(stream_), what, __FILE__, __LINE__);
}

std::unique_ptr<RequestImpl> NcclCommunicator::finish_async(const char* what) {
  cudaEvent_t done = nullptr;
  SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t e = cudaEventRecord(done, stream_);
  if (e != cudaSuccess) {
    cudaEventDestroy(done);
    cuda::check_cuda(e, what, __FILE__, __LINE__);
  }
  return std::make_unique<NcclRequest>(fmt::format("{} on {}", what, describe()), done, compute_);
}

// ---- blocking ----------------------------------------------------------------------------------
void NcclCommunicator::do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  follow_compute();
  check(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op, type), comm_, stream_),
        "ncclAllReduce");
  finish_blocking("ncclAllReduce");
}

void NcclCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                         DType type, ReduceOp op) {
  follow_compute();
  check(
      ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op, type), comm_, stream_),
      "ncclReduceScatter");
  finish_blocking("ncclReduceScatter");
}

void NcclCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count,
                                     DType type) {
  follow_compute();
  check(ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_), "ncclAllGather");
  finish_blocking("ncclAllGather");
}

void NcclCommunicator::do_broadcast(void* data, std::size_t count, DType type, int root) {
  follow_compute();
  check(ncclBroadcast(data, data, count, nccl_type(type), root, comm_, stream_), "ncclBroadcast");
  finish_blocking("ncclBroadcast");
}

void NcclCommunicator::do_send(const void* data, std::size_t count, DType type, int dest, int) {
  follow_compute();
  check(ncclSend(data, count, nccl_type(type), dest, comm_, stream_), "ncclSend");
  finish_blocking("ncclSend");
}

void NcclCommunicator::do_recv(void* data, std::size_t count, DType type, int source, int) {
  follow_compute();
  check(ncclRecv(data, count, nccl_type(type), source, comm_, stream_), "ncclRecv");
  finish_blocking("ncclRecv");
}

void NcclCommunicator::do_barrier() {
  // Host-level rendezvous once this rank's transfers are done.
  finish_blocking("barrier");
  bootstrap_->barrier();
}

// ---- non-blocking ------------------------------------------------------------------------------
std::unique_ptr<RequestImpl> NcclCommunicator::do_iallreduce(void* data, std::size_t count,
                                                             DType type, ReduceOp op) {
  follow_compute();
  check(ncclAllReduce(data, data, count, nccl_type(type), nccl_op(op, type), comm_, stream_),
        "ncclAllReduce");
  return finish_async("ncclAllReduce");
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_ireduce_scatter(const void* send, void* recv,
                                                                  std::size_t recv_count,
                                                                  DType type, ReduceOp op) {
  follow_compute();
  check(
      ncclReduceScatter(send, recv, recv_count, nccl_type(type), nccl_op(op, type), comm_, stream_),
      "ncclReduceScatter");
  return finish_async("ncclReduceScatter");
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_iall_gather(const void* send, void* recv,
                                                              std::size_t send_count, DType type) {
  follow_compute();
  check(ncclAllGather(send, recv, send_count, nccl_type(type), comm_, stream_), "ncclAllGather");
  return finish_async("ncclAllGather");
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_isend(const void* data, std::size_t count,
                                                        DType type, int dest, int) {
  follow_compute();
  check(ncclSend(data, count, nccl_type(type), dest, comm_, stream_), "ncclSend");
  return finish_async("ncclSend");
}

std::unique_ptr<RequestImpl> NcclCommunicator::do_irecv(void* data, std::size_t count, DType type,
                                                        int source, int) {
  follow_compute();
  check(ncclRecv(data, count, nccl_type(type), source, comm_, stream_), "ncclRecv");
  return finish_async("ncclRecv");
}

}  // namespace saturn::comm
