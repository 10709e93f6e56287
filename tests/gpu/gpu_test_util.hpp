// Shared helpers of the GPU tests: skip (with the reason printed) when no CUDA device is usable,
// unless SATURN_REQUIRE_GPU=1 (the device check sets it) turns that into a failure; fresh random
// inputs per run (seed printed, SATURN_TEST_SEED replays one); host<->device copies; bf16
// rounding on the host; relative-error checks that fail on any NaN or infinity.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cuda/allocator.hpp"
#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/context.hpp"
#include "runtime/backend/cuda/device_info.hpp"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/core/memory.hpp"

namespace saturn::gpu_test {

using cuda::bf16;
using Vec = std::vector<float>;

// Empty when a device is usable, else why not.
inline std::string why_no_gpu() {
  const auto q = cuda::query_devices();
  return q.devices.empty() ? q.error : std::string();
}

inline bool gpu_required() {
  const char* v = std::getenv("SATURN_REQUIRE_GPU");
  return v != nullptr && std::string(v) == "1";
}

inline std::uint64_t test_seed() {
  static const std::uint64_t seed = []() -> std::uint64_t {
    if (const char* s = std::getenv("SATURN_TEST_SEED")) return std::stoull(s);
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

// Fixture: a device pool (caching allocator) and a context on device 0, or a skip.
class GpuTest : public ::testing::Test {
 public:
  void SetUp() override {
    const std::string why = why_no_gpu();
    if (!why.empty()) {
      if (gpu_required()) FAIL() << "SATURN_REQUIRE_GPU=1 but no CUDA device is usable: " << why;
      GTEST_SKIP() << "no CUDA device is usable (" << why << "); GPU test skipped";
    }
    allocator_ = std::make_unique<cuda::CachingDeviceAllocator>(0);
    pool_ = std::make_unique<MemoryPool>("cuda:0", 0, allocator_.get());
    ctx_ = std::make_unique<cuda::Context>(0, *pool_);
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    rng_.seed(test_seed() ^
              std::hash<std::string>{}(std::string(info->test_suite_name()) + "." + info->name()));
    std::printf("[ seed     ] SATURN_TEST_SEED=%llu\n",
                static_cast<unsigned long long>(test_seed()));
  }
  void TearDown() override {
    if (ctx_) ctx_->synchronize("end of test");
    buffers_.clear();
    ctx_.reset();
    pool_.reset();
    allocator_.reset();
  }

  Vec random(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(n);
    for (float& x : v) x = d(rng_);
    return v;
  }
  // Random values already representable in bf16, so CPU and GPU start from the same numbers.
  Vec random_bf16(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    Vec v = random(n, lo, hi);
    for (float& x : v) x = __bfloat162float(__float2bfloat16(x));
    return v;
  }
  std::vector<std::int32_t> random_ints(std::size_t n, int lo, int hi_exclusive) {
    std::uniform_int_distribution<std::int32_t> d(lo, hi_exclusive - 1);
    std::vector<std::int32_t> v(n);
    for (auto& x : v) x = d(rng_);
    return v;
  }

  // Device buffers from the pool (freed with the test).
  template <typename T>
  T* alloc(std::size_t n) {
    buffers_.emplace_back(std::make_unique<Buffer<std::byte>>(*pool_, n * sizeof(T), "test"));
    return reinterpret_cast<T*>(buffers_.back()->data());
  }
  bf16* upload_bf16(const Vec& v) {
    std::vector<bf16> tmp(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) tmp[i] = __float2bfloat16(v[i]);
    bf16* d = alloc<bf16>(v.size());
    SATURN_CUDA_CHECK(cudaMemcpy(d, tmp.data(), tmp.size() * sizeof(bf16), cudaMemcpyHostToDevice));
    return d;
  }
  float* upload_f32(const Vec& v) {
    float* d = alloc<float>(v.size());
    SATURN_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
  }
  std::int32_t* upload_i32(const std::vector<std::int32_t>& v) {
    auto* d = alloc<std::int32_t>(v.size());
    SATURN_CUDA_CHECK(
        cudaMemcpy(d, v.data(), v.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
    return d;
  }
  // Outputs start as NaN: an element the kernel fails to write stays NaN and fails the check.
  bf16* poisoned_bf16(std::size_t n) {
    bf16* d = alloc<bf16>(n);
    cuda::fill(*ctx_, d, NAN, n);
    return d;
  }
  float* poisoned_f32(std::size_t n) {
    float* d = alloc<float>(n);
    cuda::fill(*ctx_, d, NAN, n);
    return d;
  }
  Vec download(const bf16* d, std::size_t n) {
    ctx_->synchronize("download");
    std::vector<bf16> tmp(n);
    SATURN_CUDA_CHECK(cudaMemcpy(tmp.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
    Vec v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = __bfloat162float(tmp[i]);
    return v;
  }
  Vec download(const float* d, std::size_t n) {
    ctx_->synchronize("download");
    Vec v(n);
    SATURN_CUDA_CHECK(cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return v;
  }

  cuda::Context& ctx() { return *ctx_; }
  MemoryPool& pool() { return *pool_; }
  cuda::CachingDeviceAllocator& allocator() { return *allocator_; }

  std::mt19937_64 rng_;
  std::unique_ptr<cuda::CachingDeviceAllocator> allocator_;
  std::unique_ptr<MemoryPool> pool_;
  std::unique_ptr<cuda::Context> ctx_;
  std::vector<std::unique_ptr<Buffer<std::byte>>> buffers_;
};

// ‖got − want‖ / ‖want‖ (‖want‖ > 0), or infinity when any element of got is not finite.
inline double rel_error(const Vec& got, const Vec& want) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// First index whose value is not finite (unwritten poison), or -1.
inline long first_non_finite(const Vec& v) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) return static_cast<long>(i);
  return -1;
}

// Thresholds by precision. A result stored in bf16 carries up to 2^-9 relative rounding, and its
// inputs (themselves bf16, or fp32 sums of bf16 products) a little more: every element must lie
// within 2^-7 of the CPU's value relative to it, plus 2^-7 of the result's root-mean-square
// (elements near zero, where cancellation makes any relative bound meaningless). fp32 results
// computed in fp32 from identical inputs land far below 1e-4.
constexpr double kTolBf16 = 1.0 / 128;
constexpr double kTolF32 = 1e-4;

// Every element: |got − want| ≤ tol·|want| + tol·rms(want); the first few offenders named.
// Every element within rtol·|want| + atol_scale·rms(want) (atol_scale defaults to rtol).
inline ::testing::AssertionResult elements_close(const Vec& got, const Vec& want, double rtol,
                                                 double atol_scale = -1) {
  const double tol = rtol;
  if (atol_scale < 0) atol_scale = rtol;
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double ss = 0;
  for (float w : want) ss += static_cast<double>(w) * w;
  const double atol =
      atol_scale * std::sqrt(ss / static_cast<double>(std::max<std::size_t>(want.size(), 1)));
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (std::isfinite(got[i]) && d <= tol * std::abs(static_cast<double>(want[i])) + atol) continue;
    if (bad++ < 5)
      first += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
               std::to_string(want[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size()
                                       << " elements outside rtol·|want| + atol (rtol " << tol
                                       << ", rms-based atol " << atol << "):" << first;
}

#define SATURN_EXPECT_CLOSE(got, want, tol)                                       \
  do {                                                                            \
    const auto& g_ = (got);                                                       \
    const auto& w_ = (want);                                                      \
    ASSERT_EQ(g_.size(), w_.size());                                              \
    EXPECT_EQ(::saturn::gpu_test::first_non_finite(g_), -1) << #got               \
        " has an unwritten/NaN "                                                  \
        "element";                                                                \
    EXPECT_LT(::saturn::gpu_test::rel_error(g_, w_), (tol)) << #got " vs " #want; \
    EXPECT_TRUE(::saturn::gpu_test::elements_close(g_, w_, (tol)))                \
        << #got " vs " #want;                                                     \
  } while (0)

}  // namespace saturn::gpu_test
