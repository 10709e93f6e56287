#include <gtest/gtest.h>

#include <cstring>
#include <new>

#include "runtime/core/error.hpp"
#include "runtime/core/memory.hpp"

namespace saturn {

TEST(MemoryPool, TracksCurrentAndPeakPerTag) {
  MemoryPool pool("cpu:0", 0);
  {
    Buffer<float> a(pool, 1000, "parameters");
    Buffer<float> b(pool, 500, "activations");
    EXPECT_EQ(pool.in_use(), 1500 * sizeof(float));
    EXPECT_EQ(pool.in_use_by_tag().at("parameters"), 1000 * sizeof(float));
  }
  EXPECT_EQ(pool.in_use(), 0u);
  EXPECT_EQ(pool.peak(), 1500 * sizeof(float));
  EXPECT_TRUE(pool.in_use_by_tag().empty());
}

TEST(MemoryPool, OutOfMemoryAtFirstAllocationThatExceeds) {
  MemoryPool pool("cpu:0", 1000);
  Buffer<char> a(pool, 600, "parameters");
  try {
    Buffer<char> b(pool, 500, "activations");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.requested(), 500u);
    EXPECT_EQ(e.in_use(), 600u);
    EXPECT_EQ(e.peak(), 600u);
    EXPECT_EQ(e.what_for(), "activations");
    EXPECT_NE(std::string(e.what()).find("activations"), std::string::npos);
  }
  EXPECT_EQ(pool.in_use(), 600u);  // nothing leaked by the failed request
}

TEST(MemoryPool, BufferMoveKeepsAccounting) {
  MemoryPool pool("cpu:0", 0);
  Buffer<double> a(pool, 10, "x");
  Buffer<double> b = std::move(a);
  EXPECT_EQ(pool.in_use(), 80u);
  b.reset();
  EXPECT_EQ(pool.in_use(), 0u);
}

// A backing allocator that records what the pool asks of it (host memory underneath).
class RecordingBacking final : public BackingAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    if (fail_next) return nullptr;
    allocated += bytes;
    return ::operator new(bytes == 0 ? 1 : bytes);
  }
  void release(void* ptr, std::size_t bytes) noexcept override {
    released += bytes;
    ::operator delete(ptr);
  }
  void zero(void* ptr, std::size_t bytes) override {
    zeroed += bytes;
    std::memset(ptr, 0, bytes);
  }
  bool host_accessible() const override { return false; }
  const char* describe() const override { return "recording"; }
  std::size_t allocated = 0, released = 0, zeroed = 0;
  bool fail_next = false;
};

TEST(MemoryPool, BackingAllocatorGetsTheSameAccounting) {
  RecordingBacking backing;
  MemoryPool pool("cuda:0", 0, &backing);
  EXPECT_FALSE(pool.host_accessible());
  {
    Buffer<float> a(pool, 100, "parameters");
    a.zero();
    EXPECT_EQ(backing.allocated, 400u);
    EXPECT_EQ(backing.zeroed, 400u);
    EXPECT_EQ(pool.in_use_by_tag().at("parameters"), 400u);
  }
  EXPECT_EQ(backing.released, 400u);
  EXPECT_EQ(pool.peak(), 400u);
  backing.fail_next = true;
  try {
    Buffer<float> b(pool, 10, "activations");
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("recording"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool.in_use(), 0u);
}

// Buffer::operator[] is host access: refused (an assert) on a pool whose memory is not host
// memory. This file is compiled with assertions on (tests/core/CMakeLists.txt), as debug builds
// are.
TEST(MemoryPool, IndexingDeviceMemoryIsRefused) {
  RecordingBacking backing;
  MemoryPool pool("cuda:0", 0, &backing);
  Buffer<float> a(pool, 4, "parameters");
  EXPECT_DEATH({ a[1] = 2.0f; }, "host access to device memory");
  MemoryPool host("host");
  Buffer<float> b(host, 4, "parameters");
  b[1] = 2.0f;
  EXPECT_EQ(b[1], 2.0f);
}

TEST(ParseBytes, UnitsAndErrors) {
  EXPECT_EQ(parse_bytes("4096", "x"), 4096u);
  EXPECT_EQ(parse_bytes("2GiB", "x"), 2ull << 30);
  EXPECT_EQ(parse_bytes("512MiB", "x"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5G", "x"), 3ull << 29);
  EXPECT_THROW(parse_bytes("lots", "x"), InputError);
  EXPECT_THROW(parse_bytes("5 parsecs", "x"), InputError);
}

}  // namespace saturn
