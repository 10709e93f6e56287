#include "runtime/comm/staged_communicator.hpp"

#include <fmt/format.h>

#include <functional>
#include <vector>

#include "runtime/core/error.hpp"

namespace saturn::comm {
namespace {

using Staging = std::vector<std::byte>;

// An inner request plus the host staging it works on; `finish` copies the result to the device
// once, when the inner operation has completed.
class StagedRequest final : public RequestImpl {
 public:
  StagedRequest(std::unique_ptr<Staging> staging, std::function<void(const Staging&)> finish)
      : staging_(std::move(staging)), finish_(std::move(finish)) {}
  ~StagedRequest() override {
    try {
      inner_.wait();
    } catch (...) {
      // Destructors must not throw; the failure was (or will be) reported by the inner call.
    }
  }
  Staging& staging() { return *staging_; }
  void set_inner(Request r) { inner_ = std::move(r); }
  bool test() override {
    if (!inner_.test()) return false;
    complete();
    return true;
  }
  void wait() override {
    inner_.wait();
    complete();
  }

 private:
  void complete() {
    if (finish_) {
      auto f = std::move(finish_);
      finish_ = nullptr;
      f(*staging_);
    }
  }
  std::unique_ptr<Staging> staging_;
  std::function<void(const Staging&)> finish_;
  Request inner_;
};

std::size_t bytes_of(std::size_t count, DType type) {
  return count * dtype_size(type);
}

}  // namespace

StagedCommunicator::StagedCommunicator(Device& device, std::unique_ptr<Communicator> inner)
    : device_(&device), inner_(std::move(inner)) {
  if (!inner_) throw Error("StagedCommunicator without an inner communicator");
}

std::string StagedCommunicator::describe() const {
  return fmt::format("{} (staged through host memory from {})", inner_->describe(),
                     device_->describe());
}

std::unique_ptr<Communicator> StagedCommunicator::split(int color, int key) {
  auto child = inner_->split(color, key);
  if (!child) return nullptr;
  return std::make_unique<StagedCommunicator>(*device_, std::move(child));
}

void StagedCommunicator::do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  Staging h(bytes_of(count, type));
  device_->download(h.data(), data, h.size());
  inner_->allreduce(h.data(), count, type, op);
  device_->upload(data, h.data(), h.size());
}

void StagedCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                           DType type, ReduceOp op) {
  Staging s(bytes_of(recv_count * static_cast<std::size_t>(size()), type));
  Staging r(bytes_of(recv_count, type));
  device_->download(s.data(), send, s.size());
  inner_->reduce_scatter(s.data(), r.data(), recv_count, type, op);
  device_->upload(recv, r.data(), r.size());
}

void StagedCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count,
                                       DType type) {
  Staging s(bytes_of(send_count, type));
  Staging r(bytes_of(send_count * static_cast<std::size_t>(size()), type));
  device_->download(s.data(), send, s.size());
  inner_->all_gather(s.data(), r.data(), send_count, type);
  device_->upload(recv, r.data(), r.size());
}

void StagedCommunicator::do_broadcast(void* data, std::size_t count, DType type, int root) {
  Staging h(bytes_of(count, type));
  if (rank() == root) device_->download(h.data(), data, h.size());
  inner_->broadcast(h.data(), count, type, root);
  if (rank() != root) device_->upload(data, h.data(), h.size());
}

void StagedCommunicator::do_send(const void* data, std::size_t count, DType type, int dest,
                                 int tag) {
  Staging h(bytes_of(count, type));
  device_->download(h.data(), data, h.size());
  inner_->send(h.data(), count, type, dest, tag);
}

void StagedCommunicator::do_recv(void* data, std::size_t count, DType type, int source, int tag) {
  Staging h(bytes_of(count, type));
  inner_->recv(h.data(), count, type, source, tag);
  device_->upload(data, h.data(), h.size());
}

void StagedCommunicator::do_barrier() {
  inner_->barrier();
}

std::unique_ptr<RequestImpl> StagedCommunicator::do_iallreduce(void* data, std::size_t count,
                                                               DType type, ReduceOp op) {
  Device* dev = device_;
  auto r = std::make_unique<StagedRequest>(
      std::make_unique<Staging>(bytes_of(count, type)),
      [dev, data](const Staging& h) { dev->upload(data, h.data(), h.size()); });
  device_->download(r->staging().data(), data, r->staging().size());
  r->set_inner(inner_->iallreduce(r->staging().data(), count, type, op));
  return r;
}

std::unique_ptr<RequestImpl> StagedCommunicator::do_ireduce_scatter(const void* send, void* recv,
                                                                    std::size_t recv_count,
                                                                    DType type, ReduceOp op) {
  // One staging of size + 1 blocks: the send blocks, then the received one.
  const std::size_t block = bytes_of(recv_count, type);
  const std::size_t n = static_cast<std::size_t>(size());
  Device* dev = device_;
  auto r = std::make_unique<StagedRequest>(
      std::make_unique<Staging>(block * (n + 1)), [dev, recv, block, n](const Staging& h) {
        dev->upload(recv, h.data() + block * n, block);
      });
  std::byte* h = r->staging().data();
  device_->download(h, send, block * n);
  r->set_inner(inner_->ireduce_scatter(h, h + block * n, recv_count, type, op));
  return r;
}

std::unique_ptr<RequestImpl> StagedCommunicator::do_iall_gather(const void* send, void* recv,
                                                                std::size_t send_count,
                                                                DType type) {
  // The staging is the whole gathered buffer; this rank's block doubles as the send buffer
  // (an in-place gather for the inner communicator).
  const std::size_t block = bytes_of(send_count, type);
  const std::size_t n = static_cast<std::size_t>(size());
  Device* dev = device_;
  auto r = std::make_unique<StagedRequest>(
      std::make_unique<Staging>(block * n),
      [dev, recv](const Staging& h) { dev->upload(recv, h.data(), h.size()); });
  std::byte* h = r->staging().data();
  std::byte* mine = h + block * static_cast<std::size_t>(rank());
  device_->download(mine, send, block);
  r->set_inner(inner_->iall_gather(mine, h, send_count, type));
  return r;
}

std::unique_ptr<RequestImpl> StagedCommunicator::do_isend(const void* data, std::size_t count,
                                                          DType type, int dest, int tag) {
  auto r = std::make_unique<StagedRequest>(std::make_unique<Staging>(bytes_of(count, type)),
                                           nullptr);
  device_->download(r->staging().data(), data, r->staging().size());
  r->set_inner(inner_->isend(r->staging().data(), count, type, dest, tag));
  return r;
}

std::unique_ptr<RequestImpl> StagedCommunicator::do_irecv(void* data, std::size_t count,
                                                          DType type, int source, int tag) {
  Device* dev = device_;
  auto r = std::make_unique<StagedRequest>(
      std::make_unique<Staging>(bytes_of(count, type)),
      [dev, data](const Staging& h) { dev->upload(data, h.data(), h.size()); });
  r->set_inner(inner_->irecv(r->staging().data(), count, type, source, tag));
  return r;
}

}  // namespace saturn::comm
