#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"

namespace saturn::cpu {
namespace {

// Constants and operation order follow PyTorch's gelu(approximate='tanh') CPU kernel.
constexpr float kBeta = static_cast<float>(0.7978845608028654);  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;

SATURN_CPU_MULTIVERSION void gelu_forward_range(float* out, const float* inp, std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float inner = kBeta * (x + kKappa * (x * x * x));
    out[i] = 0.5f * x * (1.0f + detail::tanh_f32(inner));
  }
}

SATURN_CPU_MULTIVERSION void gelu_backward_range(float* dinp, const float* inp, const float* dout,
                                                 std::ptrdiff_t n) {
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float x_sq = x * x;
    const float inner = kBeta * (x + kKappa * (x_sq * x));
    const float th = detail::tanh_f32(inner);
    const float left_derivative = 0.5f * (1.0f + th);
    const float right_derivative =
        0.5f * x * (1.0f - th * th) * (kBeta * (1.0f + 3.0f * kKappa * x_sq));
    dinp[i] += dout[i] * (left_derivative + right_derivative);
  }
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
