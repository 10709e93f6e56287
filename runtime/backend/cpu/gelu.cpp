#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"

namespace saturn::cpu {
namespace {

// Constants and operation order follow PyTorch's gelu(approximate='tanh') CPU kernel
// (detail::gelu_tanh_f32).
SATURN_CPU_MULTIVERSION void gelu_forward_range(float* out, const float* inp, std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) out[i] = detail::gelu_tanh_f32(inp[i]);
}

SATURN_CPU_MULTIVERSION void gelu_backward_range(float* dinp, const float* inp, const float* dout,
                                                 std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i)
    dinp[i] += dout[i] * detail::gelu_tanh_derivative_f32(inp[i]);
}

}  // namespace

void gelu_forward(float* out, const float* inp, std::size_t n) {
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    gelu_forward_range(out + b, inp + b, e - b);
  });
}

void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n) {
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    gelu_backward_range(dinp + b, inp + b, dout + b, e - b);
  });
}

}  // namespace saturn::cpu
