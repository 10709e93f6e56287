// Memory accounting. Every buffer a device (or the host, for offload) holds is allocated
// through a MemoryPool, which tracks current and peak bytes against a capacity. The profiler
// and the solver rely on these peaks; sharding strategies prove their savings with them.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <utility>

namespace saturn {

// Where a pool's bytes live. Without one a pool uses host memory; the CUDA backend supplies a
// caching device allocator (runtime/backend/cuda/allocator.hpp), so device buffers go through
// the same accounting (peaks, capacity, per-tag bytes) that the profiler and solver read.
class BackingAllocator {
 public:
  virtual ~BackingAllocator() = default;
  // nullptr when the backing store itself is exhausted (the pool then throws OutOfMemoryError).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr, std::size_t bytes) noexcept = 0;
  // Sets `bytes` at `ptr` to zero (the host cannot memset device memory).
  virtual void zero(void* ptr, std::size_t bytes) = 0;
  // Whether the host may dereference the memory (Buffer::operator[] is host-only).
  virtual bool host_accessible() const = 0;
  virtual const char* describe() const = 0;
  // Bytes an allocation of `bytes` really occupies (the allocator's rounding): what the pool
  // counts, so its peak is what the device gives up.
  virtual std::size_t footprint(std::size_t bytes) const { return bytes; }
};

class MemoryPool {
 public:
  // capacity 0 means unlimited (accounting only). backing: nullptr for host memory; otherwise
  // it must outlive the pool.
  explicit MemoryPool(std::string name, std::size_t capacity = 0,
                      BackingAllocator* backing = nullptr);
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;
  ~MemoryPool();

  // Allocates `bytes` (64-byte aligned, uninitialised). Throws OutOfMemoryError, naming `tag`,
  // when the allocation would exceed the capacity; nothing is allocated then.
  void* allocate(std::size_t bytes, std::string_view tag);
  void release(void* ptr, std::size_t bytes, std::string_view tag) noexcept;
  // Zeroes memory this pool handed out (memset on the host, the backing allocator otherwise).
  void zero(void* ptr, std::size_t bytes);
  bool host_accessible() const { return backing_ == nullptr || backing_->host_accessible(); }
  BackingAllocator* backing() const { return backing_; }

  const std::string& name() const { return name_; }
  std::size_t capacity() const { return capacity_; }
  void set_capacity(std::size_t capacity) { capacity_ = capacity; }
  std::size_t in_use() const { return in_use_; }
  std::size_t peak() const { return peak_; }
  void reset_peak() { peak_ = in_use_; }
  // Bytes currently held per tag (e.g. "parameters", "activations").
  const std::map<std::string, std::size_t, std::less<>>& in_use_by_tag() const { return by_tag_; }

 private:
  std::string name_;
  std::size_t capacity_;
  BackingAllocator* backing_;
  std::size_t in_use_ = 0;
  std::size_t peak_ = 0;
  std::map<std::string, std::size_t, std::less<>> by_tag_;
};

// An owning, move-only array of T allocated from a pool. operator[] dereferences on the host:
// only for pools whose memory is host-accessible (asserted in debug builds; device memory is
// reached through the device, backend/device.hpp).
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(MemoryPool& pool, std::size_t count, std::string_view tag)
      : pool_(&pool), tag_(tag), count_(count) {
    if (count_ > 0) data_ = static_cast<T*>(pool.allocate(count_ * sizeof(T), tag_));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (data_) pool_->release(data_, count_ * sizeof(T), tag_);
    data_ = nullptr;
    count_ = 0;
  }
  void zero() {
    if (data_) pool_->zero(static_cast<void*>(data_), count_ * sizeof(T));
  }
  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  T& operator[](std::size_t i) {
    assert(pool_ != nullptr && pool_->host_accessible() && "host access to device memory");
    return data_[i];
  }
  const T& operator[](std::size_t i) const {
    assert(pool_ != nullptr && pool_->host_accessible() && "host access to device memory");
    return data_[i];
  }
  MemoryPool* pool() const { return pool_; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(pool_, o.pool_);
    std::swap(tag_, o.tag_);
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
  }
  MemoryPool* pool_ = nullptr;
  std::string tag_;
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

}  // namespace saturn
