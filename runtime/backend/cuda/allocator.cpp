#include "runtime/backend/cuda/allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "runtime/backend/cuda/check.hpp"

#ifdef SATURN_CUDA_EMULATION
extern "C" void emu_poison_released_block(void* p, std::size_t bytes);
#endif

namespace saturn::cuda {

CachingDeviceAllocator::CachingDeviceAllocator(int device) : device_(device) {}

CachingDeviceAllocator::~CachingDeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  // Live blocks belong to buffers that should be gone by now; freeing them here would turn a
  // lifetime bug into a use-after-free, so only the cache is returned (pending blocks once
  // their streams are done).
  if (cudaSetDevice(device_) != cudaSuccess) return;
  collect_pending_locked(true);
  empty_cache_locked();
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  spare_events_.clear();
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
  collect_pending_locked(false);
  auto it = free_.find(size);
  if (it != free_.end()) {
    void* p = it->second;
    free_.erase(it);
    cached_ -= size;
    live_.emplace(p, size);
    return p;
  }
  SATURN_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, size);
  if (err == cudaErrorMemoryAllocation && cached_ + pending_bytes_ > 0) {
    cudaGetLastError();  // clear the failure before retrying
    // Blocks other streams still use come back once those streams are done; then the whole
    // cache goes back to the driver.
    collect_pending_locked(true);
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
  live_.emplace(p, size);
  return p;
}

void CachingDeviceAllocator::record_stream(const void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.upper_bound(ptr);
  const auto* p = static_cast<const char*>(ptr);
  if (it == live_.begin() ||
      p >= static_cast<const char*>(std::prev(it)->first) + std::prev(it)->second)
    throw Error(
        fmt::format("cuda:{}: record_stream of {}, which is inside no live block of the "
                    "caching allocator",
                    device_, ptr));
  auto& streams = used_by_[std::prev(it)->first];
  if (std::find(streams.begin(), streams.end(), stream) == streams.end()) streams.push_back(stream);
}

cudaEvent_t CachingDeviceAllocator::take_event_locked() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

void CachingDeviceAllocator::release(void* ptr, std::size_t bytes) noexcept {
  if (ptr == nullptr) return;
  const std::size_t size = round(bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  live_.erase(ptr);
  Pending pending{ptr, size, {}};
  bool safe = true;
  if (auto used = used_by_.find(ptr); used != used_by_.end()) {
    for (cudaStream_t s : used->second) {
      cudaEvent_t e = take_event_locked();
      if (e != nullptr && cudaEventRecord(e, s) == cudaSuccess) {
        pending.events.push_back(e);
        continue;
      }
      // No event to wait on (this must not throw): wait for the stream itself. If even that
      // fails, the block is never reused: a leak is better than handing out memory a stream
      // may still write.
      cudaGetLastError();
      if (e != nullptr) spare_events_.push_back(e);
      if (cudaStreamSynchronize(s) != cudaSuccess) {
        cudaGetLastError();
        safe = false;
      }
    }
    used_by_.erase(used);
  }
  if (!safe) {
    for (cudaEvent_t e : pending.events) spare_events_.push_back(e);
    std::fprintf(stderr,
                 "saturn: cuda:%d: a released block of %zu bytes could not be tied to the "
                 "streams that used it; it is not reused\n",
                 device_, size);
    return;
  }
  pending_bytes_ += size;
  pending_.push_back(std::move(pending));
  collect_pending_locked(false);
}

void CachingDeviceAllocator::collect_pending_locked(bool wait) {
  auto done = [&](Pending& p) {
    for (cudaEvent_t e : p.events) {
      const cudaError_t st = wait ? cudaEventSynchronize(e) : cudaEventQuery(e);
      if (st == cudaErrorNotReady) return false;
      if (st != cudaSuccess) {
        // A failed stream (the context is unusable then) never completes the event: keep the
        // block out of the cache.
        cudaGetLastError();
        return false;
      }
    }
    return true;
  };
  auto keep =
      std::partition(pending_.begin(), pending_.end(), [&](Pending& p) { return !done(p); });
  for (auto it = keep; it != pending_.end(); ++it) {
#ifdef SATURN_CUDA_EMULATION
    // The emulator poisons a block as it becomes reusable (NaN in fp32 and bf16): a buffer that
    // is read before it is written, or after it is released, then shows as NaN instead of
    // passing on stale values (tests/gpu/emu/emu_runtime.cpp).
    emu_poison_released_block(it->ptr, it->size);
#endif
    for (cudaEvent_t e : it->events) spare_events_.push_back(e);
    free_.emplace(it->size, it->ptr);
    cached_ += it->size;
    pending_bytes_ -= it->size;
  }
  pending_.erase(keep, pending_.end());
}

void CachingDeviceAllocator::zero(void* ptr, std::size_t bytes) {
  // On the compute stream: after the block's previous owner's kernels, before the new owner's,
  // and the host does not wait (cudaMemset would, and would order the whole device on the legacy
  // stream).
  SATURN_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, compute_stream_));
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
std::size_t CachingDeviceAllocator::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pending_bytes_;
}

void CachingDeviceAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  collect_pending_locked(false);
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

void* PinnedHostAllocator::allocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    return nullptr;  // MemoryPool reports OutOfMemoryError naming the pool and the tag
  }
  check_cuda(err, "cudaHostAlloc", __FILE__, __LINE__);
  return p;
}

void PinnedHostAllocator::release(void* ptr, std::size_t) noexcept {
  if (ptr == nullptr) return;
  // Best effort (noexcept): a copy still reading it would have been waited for by its owner.
  if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}

void PinnedHostAllocator::zero(void* ptr, std::size_t bytes) {
  std::memset(ptr, 0, bytes);
}

}  // namespace saturn::cuda
