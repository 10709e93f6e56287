// A data communicator for device buffers over a host transport: every operation copies its
// device send buffer to host memory, runs the inner communicator (MPI) there and copies the
// result back to the device. It lets every strategy run on a GPU backend (and on the CUDA
// emulator) with MPI alone; NCCL, which reads device memory directly, replaces it on real GPUs.
// Non-blocking operations keep their host staging until they complete, and copy back on
// completion (test() or wait()).
#pragma once

#include <memory>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"

namespace saturn::comm {

class StagedCommunicator final : public Communicator {
 public:
  // `device` must outlive the communicator.
  StagedCommunicator(Device& device, std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string describe() const override;
  std::unique_ptr<Communicator> split(int color, int key) override;

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

 private:
  Device* device_;
  std::unique_ptr<Communicator> inner_;
};

}  // namespace saturn::comm
