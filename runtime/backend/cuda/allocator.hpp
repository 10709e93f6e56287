// A caching device allocator behind MemoryPool (runtime/core/memory.hpp): device buffers are
// counted by the same accounting as host ones, so peaks and capacities read the same for the
// profiler and the solver whichever backend trains.
//
// cudaMalloc and cudaFree synchronise the device and cost tens of microseconds, and training
// allocates the same sizes every step, so released blocks are kept and handed out again for the
// same rounded size. Every buffer is used on one stream (Context::stream()), whose ordering makes
// reuse safe without events. When cudaMalloc fails the cache is returned to the driver and the
// allocation tried once more; if that fails too the pool reports OutOfMemoryError.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "runtime/core/memory.hpp"

namespace saturn::cuda {

class CachingDeviceAllocator final : public BackingAllocator {
 public:
  explicit CachingDeviceAllocator(int device);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) noexcept override;
  void zero(void* ptr, std::size_t bytes) override;
  bool host_accessible() const override { return false; }
  const char* describe() const override { return "cudaMalloc"; }
  // The pool counts rounded sizes, so its peak matches the device memory really taken.
  std::size_t footprint(std::size_t bytes) const override { return round(bytes); }

  // Bytes held from the driver: live blocks plus cached ones, each rounded (see round()).
  std::size_t reserved() const;
  std::size_t peak_reserved() const;
  std::size_t cached() const;
  // Returns every cached block to the driver.
  void empty_cache();
  int device() const { return device_; }
  // The block size a request of `bytes` occupies: 512-byte granules below 1 MiB, 2 MiB ones
  // above (the driver's own granularity for large allocations).
  static std::size_t round(std::size_t bytes);

 private:
  void empty_cache_locked();
  int device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // rounded size -> cached block
  std::size_t reserved_ = 0, peak_reserved_ = 0, cached_ = 0;
};

}  // namespace saturn::cuda
