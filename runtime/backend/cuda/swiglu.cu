#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// silu(g) = g / (1 + e^-g), as PyTorch and the CPU backend compute it.
__device__ __forceinline__ float swiglu(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

// vec: 8 elements per 128-bit access (common.cuh), the tail one by one.
__global__ void swiglu_forward_kernel(bf16* out, const bf16* gate, const bf16* up, std::size_t n,
                                      bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> g = load128(gate + i), u = load128(up + i);
    Vec128<bf16> y;
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k) y.v[k] = to_bf(swiglu(to_f(g.v[k]), to_f(u.v[k])));
    store128(out + i, y);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    out[i] = to_bf(swiglu(to_f(gate[i]), to_f(up[i])));
}

// One element's gradients, added to *dg / *du (either may be null).
__device__ __forceinline__ void swiglu_grad_add(bf16* dg, bf16* du, float d, float g, float u) {
  const float denom = 1.0f + expf(-g);
  const float sig = 1.0f / denom;
  if (du != nullptr) *du = to_bf(to_f(*du) + d * (g / denom));
  if (dg != nullptr) *dg = to_bf(to_f(*dg) + d * u * (sig * (1.0f + g * (1.0f - sig))));
}

__global__ void swiglu_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                                       const bf16* up, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> d = load128(dout + i), g = load128(gate + i), u = load128(up + i);
    Vec128<bf16> dg, du;
    if (dgate != nullptr) dg = load128(dgate + i);
    if (dup != nullptr) du = load128(dup + i);
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k)
      swiglu_grad_add(dgate != nullptr ? &dg.v[k] : nullptr, dup != nullptr ? &du.v[k] : nullptr,
                      to_f(d.v[k]), to_f(g.v[k]), to_f(u.v[k]));
    if (dgate != nullptr) store128(dgate + i, dg);
    if (dup != nullptr) store128(dup + i, du);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    swiglu_grad_add(dgate != nullptr ? dgate + i : nullptr, dup != nullptr ? dup + i : nullptr,
                    to_f(dout[i]), to_f(gate[i]), to_f(up[i]));
}

}  // namespace

void swiglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(out, gate, up);
  swiglu_forward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      out, gate, up, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("swiglu_forward_kernel");
}

void swiglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                     const bf16* up, std::size_t n) {
  if (n == 0 || (dgate == nullptr && dup == nullptr)) return;
  const bool vec = all_aligned16(dgate, dup, dout, gate, up);
  swiglu_backward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      dgate, dup, dout, gate, up, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("swiglu_backward_kernel");
}

}  // namespace saturn::cuda
