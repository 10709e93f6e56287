// One device's execution context: the compute stream every op of the CUDA backend runs on, the
// cuBLASLt handle and its workspace, and small scratch for reductions. The workspace and scratch
// come from the device MemoryPool, so they show in its accounting like any other buffer.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <tuple>

#include "runtime/core/memory.hpp"

namespace saturn::cuda {

class Context {
 public:
  // Makes `device` current for this thread and sets up its stream and cuBLASLt handle.
  // `pool` must be a pool over that device (CachingDeviceAllocator) and outlive the context.
  Context(int device, MemoryPool& pool);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  // kReduceBlocks + 1 doubles of device scratch for two-stage reductions (reduce.cu).
  double* reduce_scratch() { return scratch_.data(); }
  static constexpr int kReduceBlocks = 512;
  MemoryPool& pool() { return *pool_; }
  // Waits for the stream and checks for asynchronous errors (naming `what` when one is found).
  void synchronize(const char* what = "stream synchronize");

  // cuBLASLt algorithm chosen for a problem, cached by its full description (the heuristic
  // query costs more than a small GEMM).
  using AlgoKey = std::tuple<int, int, int, int, int, int, int, int, int, int, int, int, int>;
  std::map<AlgoKey, cublasLtMatmulHeuristicResult_t>& algo_cache() { return algos_; }

 private:
  int device_;
  MemoryPool* pool_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  Buffer<std::byte> workspace_;
  Buffer<double> scratch_;
  std::map<AlgoKey, cublasLtMatmulHeuristicResult_t> algos_;
};

}  // namespace saturn::cuda
