#include "runtime/core/memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/core/error.hpp"

namespace saturn {

MemoryPool::MemoryPool(std::string name, std::size_t capacity, BackingAllocator* backing)
    : name_(std::move(name)), capacity_(capacity), backing_(backing) {}

MemoryPool::~MemoryPool() = default;

void* MemoryPool::allocate(std::size_t requested, std::string_view tag) {
  const std::size_t bytes = backing_ != nullptr ? backing_->footprint(requested) : requested;
  if (capacity_ != 0 && in_use_ + bytes > capacity_) {
    throw OutOfMemoryError(name_, std::string(tag), bytes, in_use_, peak_, capacity_);
  }
  void* p = nullptr;
  if (backing_ != nullptr) {
    p = backing_->allocate(requested);
  } else {
    constexpr std::size_t kAlign = 64;
    const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  }
  if (p == nullptr) {
    // The host or device itself ran out: report it like a pool overflow so callers handle one
    // type.
    throw OutOfMemoryError(
        name_ + " (" + (backing_ != nullptr ? backing_->describe() : "host allocator") + " failed)",
        std::string(tag), bytes, in_use_, peak_, capacity_);
  }
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) it = by_tag_.emplace(std::string(tag), 0).first;
  it->second += bytes;
  return p;
}

void MemoryPool::release(void* ptr, std::size_t requested, std::string_view tag) noexcept {
  std::size_t bytes = requested;
  if (backing_ != nullptr) {
    backing_->release(ptr, requested);
    bytes = backing_->footprint(requested);
  } else {
    std::free(ptr);
  }
  in_use_ -= bytes;
  auto it = by_tag_.find(tag);
  if (it != by_tag_.end()) {
    it->second -= bytes;
    if (it->second == 0) by_tag_.erase(it);
  }
}

}  // namespace saturn

namespace saturn {

void MemoryPool::zero(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return;
  if (backing_ != nullptr) {
    backing_->zero(ptr, bytes);
  } else {
    std::memset(ptr, 0, bytes);
  }
}

}  // namespace saturn
