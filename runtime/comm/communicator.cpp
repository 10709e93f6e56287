#include "runtime/comm/communicator.hpp"

#include <fmt/format.h>

#include <cstring>

#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace saturn::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

// ---- Request ---------------------------------------------------------------------------------

Request& Request::operator=(Request&& o) noexcept {
  if (this != &o) {
    if (impl_) {
      try {
        wait();
      } catch (...) {
        // A failed transfer being replaced: nothing left to report it to.
      }
    }
    impl_ = std::move(o.impl_);
    stats_ = o.stats_;
  }
  return *this;
}

Request::~Request() {
  if (!impl_) return;
  try {
    wait();
  } catch (...) {
    // Destructors must not throw; the error surfaced (or will) on the communicator's next call.
  }
}

void Request::wait() {
  if (!impl_) return;
  const auto t0 = std::chrono::steady_clock::now();
  impl_->wait();
  impl_.reset();
  if (stats_)
    stats_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

bool Request::test() {
  if (!impl_) return true;
  const auto t0 = std::chrono::steady_clock::now();
  const bool done = impl_->test();
  if (done) impl_.reset();
  if (stats_)
    stats_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return done;
}

// ---- Communicator: timing and byte accounting around the backend hooks -----------------------

void Communicator::allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  timed(count * dtype_size(type), [&] { do_allreduce(data, count, type, op); });
}
void Communicator::reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                                  ReduceOp op) {
  timed(recv_count * static_cast<std::size_t>(size()) * dtype_size(type),
        [&] { do_reduce_scatter(send, recv, recv_count, type, op); });
}
void Communicator::all_gather(const void* send, void* recv, std::size_t send_count, DType type) {
  timed(send_count * dtype_size(type), [&] { do_all_gather(send, recv, send_count, type); });
}
void Communicator::broadcast(void* data, std::size_t count, DType type, int root) {
  timed(rank() == root ? count * dtype_size(type) : 0,
        [&] { do_broadcast(data, count, type, root); });
}
void Communicator::send(const void* data, std::size_t count, DType type, int dest, int tag) {
  timed(count * dtype_size(type), [&] { do_send(data, count, type, dest, tag); });
}
void Communicator::recv(void* data, std::size_t count, DType type, int source, int tag) {
  timed(count * dtype_size(type), [&] { do_recv(data, count, type, source, tag); });
}
void Communicator::barrier() {
  timed(0, [&] { do_barrier(); });
}
Request Communicator::iallreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  return timed(count * dtype_size(type),
               [&] { return Request(do_iallreduce(data, count, type, op), &stats_); });
}
Request Communicator::ireduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                      DType type, ReduceOp op) {
  return timed(recv_count * static_cast<std::size_t>(size()) * dtype_size(type), [&] {
    return Request(do_ireduce_scatter(send, recv, recv_count, type, op), &stats_);
  });
}
Request Communicator::iall_gather(const void* send, void* recv, std::size_t send_count,
                                  DType type) {
  return timed(send_count * dtype_size(type),
               [&] { return Request(do_iall_gather(send, recv, send_count, type), &stats_); });
}
Request Communicator::isend(const void* data, std::size_t count, DType type, int dest, int tag) {
  return timed(count * dtype_size(type),
               [&] { return Request(do_isend(data, count, type, dest, tag), &stats_); });
}
Request Communicator::irecv(void* data, std::size_t count, DType type, int source, int tag) {
  return timed(count * dtype_size(type),
               [&] { return Request(do_irecv(data, count, type, source, tag), &stats_); });
}

// ---- SelfCommunicator ------------------------------------------------------------------------

std::unique_ptr<Communicator> SelfCommunicator::split(int color, int /*key*/) {
  if (color < 0) return nullptr;
  return std::make_unique<SelfCommunicator>(device_);
}

void SelfCommunicator::move(void* dst, const void* src, std::size_t bytes) {
  if (dst == src || bytes == 0) return;
  if (device_ != nullptr)
    device_->copy(dst, src, bytes);
  else
    std::memmove(dst, src, bytes);
}

void SelfCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                         DType type, ReduceOp /*op*/) {
  move(recv, send, recv_count * dtype_size(type));
}

void SelfCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count,
                                     DType type) {
  move(recv, send, send_count * dtype_size(type));
}

void SelfCommunicator::do_broadcast(void*, std::size_t, DType, int root) {
  if (root != 0)
    throw Error(fmt::format("broadcast from root {} on a one-rank communicator", root));
}

void SelfCommunicator::do_send(const void*, std::size_t, DType, int dest, int tag) {
  throw Error(fmt::format("send to rank {} (tag {}) on a one-rank communicator", dest, tag));
}

void SelfCommunicator::do_recv(void*, std::size_t, DType, int source, int tag) {
  throw Error(fmt::format("recv from rank {} (tag {}) on a one-rank communicator", source, tag));
}

std::unique_ptr<RequestImpl> SelfCommunicator::do_iallreduce(void*, std::size_t, DType, ReduceOp) {
  return nullptr;
}

std::unique_ptr<RequestImpl> SelfCommunicator::do_ireduce_scatter(const void* send, void* recv,
                                                                  std::size_t recv_count,
                                                                  DType type, ReduceOp op) {
  do_reduce_scatter(send, recv, recv_count, type, op);
  return nullptr;
}

std::unique_ptr<RequestImpl> SelfCommunicator::do_iall_gather(const void* send, void* recv,
                                                              std::size_t send_count, DType type) {
  do_all_gather(send, recv, send_count, type);
  return nullptr;
}

std::unique_ptr<RequestImpl> SelfCommunicator::do_isend(const void* data, std::size_t count,
                                                        DType type, int dest, int tag) {
  do_send(data, count, type, dest, tag);
  return nullptr;
}

std::unique_ptr<RequestImpl> SelfCommunicator::do_irecv(void* data, std::size_t count, DType type,
                                                        int source, int tag) {
  do_recv(data, count, type, source, tag);
  return nullptr;
}

}  // namespace saturn::comm
