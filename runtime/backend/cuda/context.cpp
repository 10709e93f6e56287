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
  tile_counts_.reset();
  cublasLtDestroy(lt_);
  cudaStreamDestroy(stream_);
}

void Context::synchronize(const char* what) {
  check_cuda(cudaStreamSynchronize(stream_), what, __FILE__, __LINE__);
  check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

void Context::enable_attention_tile_count() {
  if (tile_counts_.data() == nullptr)
    tile_counts_ = Buffer<unsigned long long>(*pool_, 3, "attention tile counters");
  SATURN_CUDA_CHECK(cudaMemsetAsync(tile_counts_.data(), 0, tile_counts_.bytes(), stream_));
}

Context::AttentionTiles Context::attention_tiles() {
  AttentionTiles t;
  if (tile_counts_.data() == nullptr) return t;
  unsigned long long host[3] = {0, 0, 0};
  SATURN_CUDA_CHECK(
      cudaMemcpyAsync(host, tile_counts_.data(), sizeof(host), cudaMemcpyDeviceToHost, stream_));
  synchronize("attention tile counters");
  t.forward = host[kAttentionForward];
  t.dq = host[kAttentionDq];
  t.dkv = host[kAttentionDkv];
  return t;
}

}  // namespace saturn::cuda
