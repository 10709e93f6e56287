#include "runtime/backend/cuda/context.hpp"

#include "runtime/backend/cuda/check.hpp"

namespace saturn::cuda {

namespace {
// cuBLASLt's guidance for Hopper is 32 MiB of workspace; smaller ones rule out some kernels.
constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;
}  // namespace

Context::Context(int device, MemoryPool& pool) : device_(device), pool_(&pool) {
  if (pool.host_accessible())
    throw Error("cuda::Context needs a device memory pool (CachingDeviceAllocator), not '" +
                pool.name() + "'");
  SATURN_CUDA_CHECK(cudaSetDevice(device));
  SATURN_CUDA_CHECK(cudaStreamCreate(&stream_));
  try {
    SATURN_CUBLAS_CHECK(cublasLtCreate(&lt_));
    workspace_ = Buffer<std::byte>(pool, kWorkspaceBytes, "cublas workspace");
    scratch_ = Buffer<double>(pool, kReduceBlocks + 1, "reduction scratch");
  } catch (...) {
    if (lt_ != nullptr) cublasLtDestroy(lt_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

Context::Gemm::~Gemm() {
  if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
  if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
  if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
  if (op != nullptr) cublasLtMatmulDescDestroy(op);
}

Context::~Context() {
  // Buffers return to the cache only once the stream no longer uses them.
  cudaStreamSynchronize(stream_);
  gemms_.clear();
  workspace_.reset();
  scratch_.reset();
  cublasLtDestroy(lt_);
  cudaStreamDestroy(stream_);
}

void Context::synchronize(const char* what) {
  check_cuda(cudaStreamSynchronize(stream_), what, __FILE__, __LINE__);
  check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

}  // namespace saturn::cuda
