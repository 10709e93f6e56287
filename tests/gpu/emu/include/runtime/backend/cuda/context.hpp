// The emulator's stand-in for runtime/backend/cuda/context.hpp (found first on the include path
// of the emulated build only): host memory, no stream, no cuBLASLt.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "runtime/core/memory.hpp"

namespace saturn::cuda {

class Context {
 public:
  // Buffers come from `pool`, a host pool: in the emulator device memory is host memory.
  explicit Context(MemoryPool& pool) : pool_(&pool), scratch_(kReduceBlocks + 1) {}
  MemoryPool& pool() { return *pool_; }
  static constexpr int kReduceBlocks = 8;  // few blocks: the emulator runs them one by one
  cudaStream_t stream() const { return nullptr; }
  double* reduce_scratch() { return scratch_.data(); }
  void synchronize(const char* = nullptr) {}

 private:
  MemoryPool* pool_;
  std::vector<double> scratch_;
};

}  // namespace saturn::cuda
