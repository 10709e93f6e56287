#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// GELU, tanh approximation (common.cuh), with the CPU backend's constants and operation order.
__device__ __forceinline__ float gelu(float x) {
  return gelu_tanh(x);
}
// dinp + dout * gelu'(x)
__device__ __forceinline__ float gelu_grad_add(float acc, float x, float d) {
  return acc + d * gelu_tanh_derivative(x);
}

// vec: 8 elements per 128-bit access (common.cuh), the tail one by one.
__global__ void gelu_forward_kernel(bf16* out, const bf16* inp, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> x = load128(inp + i);
    Vec128<bf16> y;
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k) y.v[k] = to_bf(gelu(to_f(x.v[k])));
    store128(out + i, y);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    out[i] = to_bf(gelu(to_f(inp[i])));
}

__global__ void gelu_backward_kernel(bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n,
                                     bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> x = load128(inp + i), d = load128(dout + i);
    Vec128<bf16> acc = load128(dinp + i);
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k)
      acc.v[k] = to_bf(gelu_grad_add(to_f(acc.v[k]), to_f(x.v[k]), to_f(d.v[k])));
    store128(dinp + i, acc);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    dinp[i] = to_bf(gelu_grad_add(to_f(dinp[i]), to_f(inp[i]), to_f(dout[i])));
}

}  // namespace

void gelu_forward(Context& ctx, bf16* out, const bf16* inp, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(out, inp);
  gelu_forward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(out, inp,
                                                                                           n, vec);
  SATURN_CUDA_LAUNCH_CHECK("gelu_forward_kernel");
}

void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dinp, inp, dout);
  gelu_backward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      dinp, inp, dout, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("gelu_backward_kernel");
}

}  // namespace saturn::cuda
