#include "runtime/backend/cuda/allocator.hpp"

#include <cuda_runtime_api.h>

#include "runtime/backend/cuda/check.hpp"

namespace saturn::cuda {

CachingDeviceAllocator::CachingDeviceAllocator(int device) : device_(device) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Live blocks belong to buffers that should be gone by now; freeing them here would turn a
  // lifetime bug into a use-after-free, so only the cache is returned.
  if (cudaSetDevice(device_) == cudaSuccess) empty_cache_locked();
}

std::size_t CachingDeviceAllocator::round(std::size_t bytes) {
  constexpr std::size_t kSmall = 512, kLarge = std::size_t{2} << 20, kSplit = std::size_t{1} << 20;
  if (bytes == 0) bytes = 1;
  const std::size_t g = bytes < kSplit ? kSmall : kLarge;
  return (bytes + g - 1) / g * g;
}

void* CachingDeviceAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = free_.find(size);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    cached_ -= size;
    return p;
  }
  SATURN_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && cached_ > 0) {
    cudaGetLastError();  // clear the failure before retrying
    empty_cache_locked();
    err = cudaMalloc(&p, size);
  }
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;  // MemoryPool turns this into OutOfMemoryError with the pool's context
  }
  check_cuda(err, "cudaMalloc", __FILE__, __LINE__);
  reserved_ += size;
  if (reserved_ > peak_reserved_) peak_reserved_ = reserved_;
  return p;
}

void CachingDeviceAllocator::release(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t size = round(bytes);
#ifdef SATURN_CUDA_EMULATION
  // The emulator poisons a cached block (NaN in fp32 and bf16): a buffer that is read before it
  // is written, or after it is released, then shows as NaN instead of passing on stale values.
  (void)cudaMemset(ptr, 0xFF, bytes);
#endif
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace(size, ptr);
  cached_ += size;
}

void CachingDeviceAllocator::zero(void* ptr, std::size_t bytes) {
  // The legacy default stream orders this with the (blocking) compute stream.
  SATURN_CUDA_CHECK(cudaMemset(ptr, 0, bytes));
}

std::size_t CachingDeviceAllocator::reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reserved_;
}
std::size_t CachingDeviceAllocator::peak_reserved() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_reserved_;
}
std::size_t CachingDeviceAllocator::cached() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_;
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  empty_cache_locked();
}

void CachingDeviceAllocator::empty_cache_locked() {
  for (const auto& [size, p] : free_) {
    cudaFree(p);  // best effort: also runs from the destructor, which must not throw
    reserved_ -= size;
  }
  free_.clear();
  cached_ = 0;
}

}  // namespace saturn::cuda
