#include "runtime/core/memory.hpp"

#include <cstdlib>
#include <new>

#include "runtime/core/error.hpp"

namespace saturn {

MemoryPool::MemoryPool(std::string name, std::size_t capacity)
    : name_(std::move(name)), capacity_(capacity) {}

MemoryPool::~MemoryPool() = default;

void* MemoryPool::allocate(std::size_t bytes, std::string_view tag) {
  if (capacity_ != 0 && in_use_ + bytes > capacity_) {
    throw OutOfMemoryError(name_, std::string(tag), bytes, in_use_, peak_, capacity_);
  }
  constexpr std::size_t kAlign = 64;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (p == nullptr) {
    // The host itself ran out: report it like a pool overflow so callers handle one type.
    throw OutOfMemoryError(name_ + " (host allocator failed)", std::string(tag), bytes, in_use_,
                           peak_, capacity_);
  }
  in_use_ += bytes;
  if (in_use_ > peak_) peak_ = in_use_;
  auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) it = by_tag_.emplace(std::string(tag), 0).first;
  it->second += bytes;
  return p;
}

void MemoryPool::release(void* ptr, std::size_t bytes, std::string_view tag) noexcept {
  std::free(ptr);
  in_use_ -= bytes;
  auto it = by_tag_.find(tag);
  if (it != by_tag_.end()) {
    it->second -= bytes;
    if (it->second == 0) by_tag_.erase(it);
  }
}

}  // namespace saturn
