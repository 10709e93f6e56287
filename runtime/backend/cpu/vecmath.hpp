// Vectorisable float math for the CPU kernels (internal): exp, tanh and row reductions.
// glibc's expf/tanhf are scalar calls, which keep `omp simd` loops from vectorising: a GELU over
// 25M floats took 0.3 s with tanhf. These branch-free versions vectorise and stay within about
// 2 ulp (Cephes polynomials), the accuracy class of the SLEEF routines PyTorch's CPU kernels use.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

// Always inlined: a call from a SATURN_CPU_MULTIVERSION kernel must compile into that kernel's
// instruction set, not run an out-of-line baseline copy.
#if defined(__GNUC__)
#define SATURN_VECMATH inline __attribute__((always_inline))
#else
#define SATURN_VECMATH inline
#endif

namespace saturn::cpu::detail {

// e^x. Results below FLT_MIN (x < -87.34) flush to 0; x > 88.72 gives +inf; NaN propagates.
SATURN_VECMATH float exp_f32(float x) {
  constexpr float kLo = -87.33654f;  // ln(FLT_MIN)
  constexpr float kHi = 88.72284f;   // just above ln(FLT_MAX)
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo, kLn2Hi exact in 9 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float xc = x > kLo ? x : kLo;          // also maps NaN to kLo, so the int conversion is defined
  xc = xc < kHi ? xc : kHi;
  const float fn = (xc * kLog2e + kRound) - kRound;  // n = round(x / ln 2), in [-126, 128]
  const float r = (xc - fn * kLn2Hi) - fn * kLn2Lo;  // |r| <= ln(2) / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * (r * r) + r + 1.0f;
  // 2^n as two factors, each a normal float for every n in range.
  const std::int32_t n = static_cast<std::int32_t>(fn);
  const std::int32_t n1 = n / 2;
  const float s1 = std::bit_cast<float>((n1 + 127) << 23);
  const float s2 = std::bit_cast<float>((n - n1 + 127) << 23);
  float result = er * s1 * s2;
  result = x < kLo ? 0.0f : result;
  result = x > kHi ? std::numeric_limits<float>::infinity() : result;
  return x == x ? result : x;
}

// tanh(x): an odd polynomial for |x| < 0.625 (where 1 - 2/(e^2x + 1) would cancel), the
// exponential form above it.
SATURN_VECMATH float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * x + x;
  const float large = std::copysign(1.0f - 2.0f / (exp_f32(2.0f * ax) + 1.0f), x);
  return ax < 0.625f ? small : large;
}

// GELU's tanh approximation and its derivative, with the constants and the operation order of
// PyTorch's gelu(approximate='tanh') CPU kernel (GPT-2's MLP, Gemma's GeGLU).
inline constexpr float kGeluBeta = static_cast<float>(0.7978845608028654);  // sqrt(2/pi)
inline constexpr float kGeluKappa = 0.044715f;

SATURN_VECMATH float gelu_tanh_f32(float x) {
  const float inner = kGeluBeta * (x + kGeluKappa * (x * x * x));
  return 0.5f * x * (1.0f + tanh_f32(inner));
}

SATURN_VECMATH float gelu_tanh_derivative_f32(float x) {
  const float x_sq = x * x;
  const float inner = kGeluBeta * (x + kGeluKappa * (x_sq * x));
  const float th = tanh_f32(inner);
  const float left_derivative = 0.5f * (1.0f + th);
  const float right_derivative =
      0.5f * x * (1.0f - th * th) * (kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq));
  return left_derivative + right_derivative;
}

// Row reductions below keep kLanes independent partial results and combine them in a fixed
// tree. Unlike `omp simd reduction`, whose order follows the vector width a target clone was
// built for, the result then depends only on the data: every clone gives the same bits. (GCC
// also never vectorises an `omp simd reduction(max)` over floats without -ffinite-math-only.)
inline constexpr int kLanes = 16;

template <class T>
SATURN_VECMATH T combine_lanes(T* acc) {
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int l = 0; l < width; ++l) acc[l] += acc[l + width];
  }
  return acc[0];
}

// max of x[0..n), n >= 1. NaNs are skipped; a NaN row still yields NaN through exp below.
SATURN_VECMATH float max_f32(const float* x, std::ptrdiff_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = x[0];
  std::ptrdiff_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  }
  for (int l = 0; l < n - j; ++l) acc[l] = x[j + l] > acc[l] ? x[j + l] : acc[l];
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

// out[j] = e^(in[j] - shift) for j < n, returning the sum of the outputs accumulated in Acc
// (float or double). out may equal in.
template <class Acc>
SATURN_VECMATH Acc exp_shift_sum(float* out, const float* in, std::ptrdiff_t n, float shift) {
  Acc acc[kLanes] = {};
  std::ptrdiff_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float e = exp_f32(in[j + l] - shift);
      out[j + l] = e;
      acc[l] += static_cast<Acc>(e);
    }
  }
  for (int l = 0; l < n - j; ++l) {
    const float e = exp_f32(in[j + l] - shift);
    out[j + l] = e;
    acc[l] += static_cast<Acc>(e);
  }
  return combine_lanes(acc);
}

// sum of a[j] * b[j] for j < n.
SATURN_VECMATH float dot_f32(const float* a, const float* b, std::ptrdiff_t n) {
  float acc[kLanes] = {};
  std::ptrdiff_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += a[j + l] * b[j + l];
  }
  for (int l = 0; l < n - j; ++l) acc[l] += a[j + l] * b[j + l];
  return combine_lanes(acc);
}

}  // namespace saturn::cpu::detail
