// The NCCL backend of Communicator: the same calls as MpiCommunicator, on device buffers.
// Built when CUDA and NCCL are found (SATURN_HAVE_NCCL); see docs/cuda.md.
//
// Set-up: rank 0 of the job's MPI sub-communicator (any Communicator: the "bootstrap") creates a
// NCCL unique id and broadcasts it over that communicator; every member then joins one NCCL
// communicator of the same size and rank order. One NCCL communicator per job group, each with
// its own CUDA stream, so collectives overlap the compute stream:
//  - each operation first makes the NCCL stream wait for work already queued on the compute
//    stream (an event), so it reads finished data;
//  - blocking calls then wait for the NCCL stream; a non-blocking call's Request completes when
//    its event fires, and wait() also makes the compute stream wait for it, so kernels queued
//    afterwards see the result.
// NCCL matches point-to-point messages per peer in order; tags are accepted for interface
// compatibility but not used for matching.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "runtime/comm/communicator.hpp"

namespace saturn::comm {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`. `device`: this rank's CUDA device; `compute_stream`: the stream
  // whose work collectives must follow (nullptr: the legacy default stream).
  NcclCommunicator(Communicator& bootstrap, int device, cudaStream_t compute_stream);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;
  // Splits the bootstrap communicator and builds a NCCL communicator per color over it.
  std::unique_ptr<Communicator> split(int color, int key) override;
  cudaStream_t stream() const { return stream_; }
  ncclComm_t handle() const { return comm_; }

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
  NcclCommunicator(std::unique_ptr<Communicator> owned_bootstrap, int device,
                   cudaStream_t compute_stream);
  void init(int device);
  void check(ncclResult_t r, const char* what) const;
  void follow_compute();  // NCCL stream waits for the compute stream's queued work
  std::unique_ptr<RequestImpl> finish_async(const char* what);
  void finish_blocking(const char* what);

  std::unique_ptr<Communicator> owned_bootstrap_;  // split() results own theirs
  Communicator* bootstrap_;
  int device_ = 0;
  int rank_ = 0, size_ = 1;
  cudaStream_t compute_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace saturn::comm
