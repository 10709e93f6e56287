#include "runtime/backend/cuda/check.hpp"

#include <cublasLt.h>
#include <fmt/format.h>

namespace saturn::cuda {
namespace {

std::string device_text() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();  // do not leave this secondary failure as the sticky "last error"
    return "device ?";
  }
  return fmt::format("device {}", dev);
}

}  // namespace

void check_cuda(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return;
  // The runtime also records a returned error as the thread's "last error"; this one is
  // reported here, so a later launch check must not report it again as its own. (Sticky errors,
  // which corrupt the context, come back from every later call anyway.)
  (void)cudaGetLastError();
  throw CudaError(fmt::format("CUDA error {} ({}) in {} at {}:{} on {}", cudaGetErrorName(err),
                              cudaGetErrorString(err), what, file, line, device_text()));
}

void check_cublas(int status, const char* what, const char* file, int line) {
  const auto s = static_cast<cublasStatus_t>(status);
  if (s == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(fmt::format("cuBLAS error {} ({}) in {} at {}:{} on {}", cublasLtGetStatusName(s),
                              cublasLtGetStatusString(s), what, file, line, device_text()));
}

}  // namespace saturn::cuda
