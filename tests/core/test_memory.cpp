#include <gtest/gtest.h>

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

TEST(ParseBytes, UnitsAndErrors) {
  EXPECT_EQ(parse_bytes("4096", "x"), 4096u);
  EXPECT_EQ(parse_bytes("2GiB", "x"), 2ull << 30);
  EXPECT_EQ(parse_bytes("512MiB", "x"), 512ull << 20);
  EXPECT_EQ(parse_bytes("1.5G", "x"), 3ull << 29);
  EXPECT_THROW(parse_bytes("lots", "x"), InputError);
  EXPECT_THROW(parse_bytes("5 parsecs", "x"), InputError);
}

}  // namespace saturn
