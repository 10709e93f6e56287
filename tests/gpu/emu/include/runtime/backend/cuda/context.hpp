// The emulator's stand-in for runtime/backend/cuda/context.hpp (found first on the include path
// of the emulated build only): host memory, no stream, no cuBLASLt.
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

namespace saturn::cuda {

class Context {
 public:
  Context() : scratch_(kReduceBlocks + 1) {}
  static constexpr int kReduceBlocks = 512;
  cudaStream_t stream() const { return nullptr; }
  double* reduce_scratch() { return scratch_.data(); }
  void synchronize(const char* = nullptr) {}

 private:
  std::vector<double> scratch_;
};

}  // namespace saturn::cuda
