// The CUDA backend's host-side logic that needs no GPU, run everywhere the backend compiles:
// the row-major to column-major mapping of every linear-layer GEMM (linear_plan.hpp), executed
// here by a column-major GEMM emulator and held against the CPU backend; and the caching
// allocator's rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cuda/allocator.hpp"
#include "runtime/backend/cuda/linear_plan.hpp"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/backend/device.hpp"

namespace saturn::cuda {
namespace {

using Vec = std::vector<float>;

// op(X)(i, j) of a stored column-major operand, with its bounds checked.
float element(const GemmOperand& o, int i, int j) {
  const int r = o.trans ? j : i, c = o.trans ? i : j;
  EXPECT_LT(r, o.rows);
  EXPECT_LT(c, o.cols);
  return static_cast<const float*>(o.ptr)[r + static_cast<std::size_t>(c) * o.ld];
}

// What cuBLASLt computes for the plan, on host floats, in double.
void emulate(const GemmPlan& p) {
  ASSERT_GE(p.a.ld, p.a.rows);
  ASSERT_GE(p.b.ld, p.b.rows);
  ASSERT_GE(p.ldd, p.m);
  ASSERT_EQ(p.a.trans ? p.a.cols : p.a.rows, p.m);
  ASSERT_EQ(p.a.trans ? p.a.rows : p.a.cols, p.k);
  ASSERT_EQ(p.b.trans ? p.b.cols : p.b.rows, p.k);
  ASSERT_EQ(p.b.trans ? p.b.rows : p.b.cols, p.n);
  float* d = static_cast<float*>(p.d);
  for (int i = 0; i < p.m; ++i)
    for (int j = 0; j < p.n; ++j) {
      double s = 0;
      for (int l = 0; l < p.k; ++l)
        s += static_cast<double>(element(p.a, i, l)) * element(p.b, l, j);
      float& out = d[i + static_cast<std::size_t>(j) * p.ldd];
      out = static_cast<float>(p.beta * out + s);
    }
}

Vec random(std::mt19937& g, std::size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = u(g);
  return v;
}

void expect_close(const Vec& got, const Vec& want) {
  ASSERT_EQ(got.size(), want.size());
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

TEST(LinearPlan, EveryGemmMatchesTheCpuBackend) {
  std::mt19937 g(12345);
  const int N = 7, C = 5, OC = 3;  // all different, so a swapped dimension cannot pass
  for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
    SCOPED_TRACE(layout == cpu::WeightLayout::kOutIn ? "out-in" : "in-out");
    const auto glayout =
        layout == cpu::WeightLayout::kOutIn ? WeightLayout::kOutIn : WeightLayout::kInOut;
    const Vec x = random(g, static_cast<std::size_t>(N) * C);
    const Vec w = random(g, static_cast<std::size_t>(C) * OC);
    const Vec dout = random(g, static_cast<std::size_t>(N) * OC);

    Vec want(static_cast<std::size_t>(N) * OC), got(want.size(), NAN);
    cpu::linear_forward(want.data(), x.data(), w.data(), nullptr, N, C, OC, layout);
    GemmPlan p = plan_linear_forward(got.data(), x.data(), w.data(), N, C, OC, glayout);
    EXPECT_EQ(p.beta, 0.0f);
    for (float& v : got) v = 0.0f;  // beta = 0 ignores D; the emulator multiplies it
    emulate(p);
    expect_close(got, want);

    const Vec dinp0 = random(g, x.size());
    Vec dinp_want = dinp0, dinp_got = dinp0;
    cpu::linear_backward(dinp_want.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), N, C,
                         OC, layout);
    emulate(plan_linear_backward_input(dinp_got.data(), dout.data(), w.data(), N, C, OC, glayout));
    expect_close(dinp_got, dinp_want);

    const Vec dw0 = random(g, w.size());
    Vec dw_want = dw0, dw_got = dw0;
    cpu::linear_backward(nullptr, dw_want.data(), nullptr, dout.data(), x.data(), w.data(), N, C,
                         OC, layout);
    emulate(plan_linear_backward_weight(dw_got.data(), dout.data(), x.data(), N, C, OC, glayout));
    expect_close(dw_got, dw_want);
  }
}

// The bias-gradient epilogue sums one operand of the weight-gradient GEMM over k: BGRADA the
// rows of op(A) (length m), BGRADB the columns of op(B) (length n). Whichever
// bias_gradient_operand names must give the CPU's bias gradient (column sums of dout).
TEST(LinearPlan, BiasGradientEpilogueReducesDout) {
  std::mt19937 g(777);
  const int N = 7, C = 5, OC = 3;
  for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
    SCOPED_TRACE(layout == cpu::WeightLayout::kOutIn ? "out-in" : "in-out");
    const auto glayout =
        layout == cpu::WeightLayout::kOutIn ? WeightLayout::kOutIn : WeightLayout::kInOut;
    const Vec x = random(g, static_cast<std::size_t>(N) * C);
    const Vec w = random(g, static_cast<std::size_t>(C) * OC);
    const Vec dout = random(g, static_cast<std::size_t>(N) * OC);
    Vec dw(w.size(), 0.0f), want(OC, 0.0f);
    cpu::linear_backward(nullptr, dw.data(), want.data(), dout.data(), x.data(), w.data(), N, C, OC,
                         layout);
    const GemmPlan p =
        plan_linear_backward_weight(dw.data(), dout.data(), x.data(), N, C, OC, glayout);
    const bool use_a = bias_gradient_operand(glayout) == BiasGradOperand::kA;
    const int len = use_a ? p.m : p.n;
    ASSERT_EQ(len, OC);
    EXPECT_EQ(use_a ? p.a.ptr : p.b.ptr, static_cast<const void*>(dout.data()));
    Vec got(OC, 0.0f);
    for (int x_i = 0; x_i < len; ++x_i) {
      double s = 0;
      for (int l = 0; l < p.k; ++l) s += use_a ? element(p.a, x_i, l) : element(p.b, l, x_i);
      got[static_cast<std::size_t>(x_i)] = static_cast<float>(s);
    }
    expect_close(got, want);
  }
}

TEST(CachingDeviceAllocator, RoundsToGranules) {
  EXPECT_EQ(CachingDeviceAllocator::round(0), 512u);
  EXPECT_EQ(CachingDeviceAllocator::round(1), 512u);
  EXPECT_EQ(CachingDeviceAllocator::round(513), 1024u);
  EXPECT_EQ(CachingDeviceAllocator::round((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(CachingDeviceAllocator::round(1u << 20), 2u << 20);
  EXPECT_EQ(CachingDeviceAllocator::round((2u << 20) + 1), 4u << 20);
  // Memory estimates count every buffer as the allocator rounds it.
  const BackendTraits& t = backend_traits(DeviceKind::kCuda);
  for (std::size_t b : {std::size_t{1}, std::size_t{512}, std::size_t{513}, std::size_t{4104},
                        (std::size_t{1} << 20) - 1, std::size_t{1} << 20, (std::size_t{3} << 20) + 5,
                        std::size_t{33} << 20})
    EXPECT_EQ(t.footprint(b), CachingDeviceAllocator::round(b)) << b;
  EXPECT_EQ(t.footprint(0), 0u);  // no buffer is allocated for nothing
  EXPECT_EQ(backend_traits(DeviceKind::kCpu).footprint(4104), 4104u);
}

}  // namespace
}  // namespace saturn::cuda
