#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// silu(g) = g / (1 + e^-g), as PyTorch and the CPU backend compute it.
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float g = to_f(gate[i]);
    out[i] = to_bf(g / (1.0f + expf(-g)) * to_f(up[i]));
  }
}

__global__ void swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                                       const bf16* up, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float g = to_f(gate[i]);
    const float d = to_f(dout[i]);
    const float denom = 1.0f + expf(-g);
    const float sig = 1.0f / denom;
    if (dup != nullptr) dup[i] = to_bf(to_f(dup[i]) + d * (g / denom));
    if (dgate != nullptr)
      dgate[i] = to_bf(to_f(dgate[i]) + d * to_f(up[i]) * (sig * (1.0f + g * (1.0f - sig))));
  }
}

}  // namespace

void swiglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n) {
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(out, gate, up, n);
  SATURN_CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
}

void swiglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                     const bf16* up, std::size_t n) {
  if (n == 0 || (dgate == nullptr && dup == nullptr)) return;
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dgate, dup, dout, gate, up, n);
  SATURN_CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
}

}  // namespace saturn::cuda
