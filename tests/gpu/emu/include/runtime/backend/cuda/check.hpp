// The emulator's stand-in for runtime/backend/cuda/check.hpp: calls are host emulations that
// return cudaSuccess; anything else is a test failure.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "runtime/core/error.hpp"

namespace saturn::cuda {
class CudaError : public Error {
 public:
  using Error::Error;
};
}  // namespace saturn::cuda

#define SATURN_CUDA_CHECK(call)                                                    \
  do {                                                                             \
    if ((call) != cudaSuccess) throw ::saturn::cuda::CudaError("emulated " #call); \
  } while (0)
#define SATURN_CUDA_LAUNCH_CHECK(kernel) \
  do {                                   \
  } while (0)
