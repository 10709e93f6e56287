#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// GELU, tanh approximation, with the CPU backend's constants and operation order.
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;

__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = to_f(inp[i]);
    const float inner = kBeta * (x + kKappa * (x * x * x));
    out[i] = to_bf(0.5f * x * (1.0f + tanhf(inner)));
  }
}

__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float x = to_f(inp[i]);
    const float x_sq = x * x;
    const float th = tanhf(kBeta * (x + kKappa * (x_sq * x)));
    const float left = 0.5f * (1.0f + th);
    const float right = 0.5f * x * (1.0f - th * th) * (kBeta * (1.0f + 3.0f * kKappa * x_sq));
    dinp[i] = to_bf(to_f(dinp[i]) + to_f(dout[i]) * (left + right));
  }
}

}  // namespace

void gelu_forward(Context& ctx, bf16* out, const bf16* inp, std::size_t n) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(out, inp, n);
  SATURN_CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}

void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dinp, inp, dout, n);
  SATURN_CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}

}  // namespace saturn::cuda
