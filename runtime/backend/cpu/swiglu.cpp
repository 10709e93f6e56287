#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"

namespace saturn::cpu {
namespace {

// silu(x) is computed as PyTorch does, x / (1 + e^-x), in every path, so dup is bit-identical
// whichever gradients are requested.
SATURN_CPU_MULTIVERSION void swiglu_forward_range(float* out, const float* gate, const float* up,
                                                  std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + detail::exp_f32(-g)) * up[i];
  }
}

SATURN_CPU_MULTIVERSION void swiglu_backward_range(float* dgate, float* dup, const float* dout,
                                                   const float* gate, const float* up,
                                                   std::ptrdiff_t n) {
  if (dgate != nullptr && dup != nullptr) {
#pragma omp simd
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      const float g = gate[i];
      const float denom = 1.0f + detail::exp_f32(-g);
      const float sig = 1.0f / denom;
      dup[i] += dout[i] * (g / denom);
      dgate[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
    }
  } else if (dgate != nullptr) {
#pragma omp simd
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      const float g = gate[i];
      const float sig = 1.0f / (1.0f + detail::exp_f32(-g));
      dgate[i] += dout[i] * up[i] * (sig * (1.0f + g * (1.0f - sig)));
    }
  } else if (dup != nullptr) {
#pragma omp simd
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      const float g = gate[i];
      dup[i] += dout[i] * (g / (1.0f + detail::exp_f32(-g)));
    }
  }
}

}  // namespace

void swiglu_forward(float* out, const float* gate, const float* up, std::size_t n) {
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    swiglu_forward_range(out + b, gate + b, up + b, e - b);
  });
}

void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, std::size_t n) {
  if (dgate == nullptr && dup == nullptr) return;
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    swiglu_backward_range(dgate != nullptr ? dgate + b : nullptr,
                          dup != nullptr ? dup + b : nullptr, dout + b, gate + b, up + b, e - b);
  });
}

}  // namespace saturn::cpu
