#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"

namespace saturn::cpu {
namespace {

// As torch computes gelu(gate, approximate='tanh') * up and its autograd: the activation is
// rounded before the product, and dgate = (dout * up) * gelu'(gate).
SATURN_CPU_MULTIVERSION void geglu_forward_range(float* out, const float* gate, const float* up,
                                                 std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = detail::gelu_tanh_f32(gate[i]) * up[i];
}

SATURN_CPU_MULTIVERSION void geglu_backward_range(float* dgate, float* dup, const float* dout,
                                                  const float* gate, const float* up,
                                                  std::ptrdiff_t n) {
  if (dup != nullptr) {
#pragma omp simd
    for (std::ptrdiff_t i = 0; i < n; ++i) dup[i] += dout[i] * detail::gelu_tanh_f32(gate[i]);
  }
  if (dgate != nullptr) {
#pragma omp simd
    for (std::ptrdiff_t i = 0; i < n; ++i)
      dgate[i] += dout[i] * up[i] * detail::gelu_tanh_derivative_f32(gate[i]);
  }
}

}  // namespace

void geglu_forward(float* out, const float* gate, const float* up, std::size_t n) {
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    geglu_forward_range(out + b, gate + b, up + b, e - b);
  });
}

void geglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                    std::size_t n) {
  if (dgate == nullptr && dup == nullptr) return;
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    geglu_backward_range(dgate != nullptr ? dgate + b : nullptr, dup != nullptr ? dup + b : nullptr,
                         dout + b, gate + b, up + b, e - b);
  });
}

}  // namespace saturn::cpu
