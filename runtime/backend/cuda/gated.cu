// The llama MLP's gated activations, one kernel pair for both: SwiGLU (silu(gate) * up) and
// Gemma's GeGLU (gelu_tanh(gate) * up). The gate's function is a template parameter.
#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// silu(g) = g / (1 + e^-g) and its derivative, as PyTorch and the CPU backend compute them.
struct Silu {
  __device__ __forceinline__ static float value(float g) { return g / (1.0f + expf(-g)); }
  __device__ __forceinline__ static float derivative(float g) {
    const float sig = 1.0f / (1.0f + expf(-g));
    return sig * (1.0f + g * (1.0f - sig));
  }
};

// GELU's tanh approximation (common.cuh), as the CPU backend computes it.
struct GeluTanh {
  __device__ __forceinline__ static float value(float g) { return gelu_tanh(g); }
  __device__ __forceinline__ static float derivative(float g) { return gelu_tanh_derivative(g); }
};

// vec: 8 elements per 128-bit access (common.cuh), the tail one by one.
template <class Act>
__global__ void gated_forward_kernel(bf16* out, const bf16* gate, const bf16* up, std::size_t n,
                                     bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> g = load128(gate + i), u = load128(up + i);
    Vec128<bf16> y;
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k) y.v[k] = to_bf(Act::value(to_f(g.v[k])) * to_f(u.v[k]));
    store128(out + i, y);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    out[i] = to_bf(Act::value(to_f(gate[i])) * to_f(up[i]));
}

// One element's gradients, added to *dg / *du (either may be null).
template <class Act>
__device__ __forceinline__ void gated_grad_add(bf16* dg, bf16* du, float d, float g, float u) {
  if (du != nullptr) *du = to_bf(to_f(*du) + d * Act::value(g));
  if (dg != nullptr) *dg = to_bf(to_f(*dg) + d * u * Act::derivative(g));
}

template <class Act>
__global__ void gated_backward_kernel(bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
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
      gated_grad_add<Act>(dgate != nullptr ? &dg.v[k] : nullptr,
                          dup != nullptr ? &du.v[k] : nullptr, to_f(d.v[k]), to_f(g.v[k]),
                          to_f(u.v[k]));
    if (dgate != nullptr) store128(dgate + i, dg);
    if (dup != nullptr) store128(dup + i, du);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    gated_grad_add<Act>(dgate != nullptr ? dgate + i : nullptr, dup != nullptr ? dup + i : nullptr,
                        to_f(dout[i]), to_f(gate[i]), to_f(up[i]));
}

template <class Act>
void gated_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n,
                   const char* name) {
  if (n == 0) return;
  const bool vec = all_aligned16(out, gate, up);
  const auto grid = grid_for_vectors(n, vec, kBf16Width);
  gated_forward_kernel<Act><<<grid, kThreads, 0, ctx.stream()>>>(out, gate, up, n, vec);
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);  // name: "launch of ..."
}

template <class Act>
void gated_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                    const bf16* up, std::size_t n, const char* name) {
  if (n == 0 || (dgate == nullptr && dup == nullptr)) return;
  const bool vec = all_aligned16(dgate, dup, dout, gate, up);
  const auto grid = grid_for_vectors(n, vec, kBf16Width);
  // The emulator's launch rewrite (tests/gpu/emu/transform.py) reads a launch on one line.
  // clang-format off
  gated_backward_kernel<Act><<<grid, kThreads, 0, ctx.stream()>>>(dgate, dup, dout, gate, up, n, vec);
  // clang-format on
  check_cuda(cudaGetLastError(), name, __FILE__, __LINE__);  // name: "launch of ..."
}

}  // namespace

void swiglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n) {
  gated_forward<Silu>(ctx, out, gate, up, n, "launch of swiglu_forward_kernel");
}

void swiglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                     const bf16* up, std::size_t n) {
  gated_backward<Silu>(ctx, dgate, dup, dout, gate, up, n, "launch of swiglu_backward_kernel");
}

void geglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n) {
  gated_forward<GeluTanh>(ctx, out, gate, up, n, "launch of geglu_forward_kernel");
}

void geglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                    const bf16* up, std::size_t n) {
  gated_backward<GeluTanh>(ctx, dgate, dup, dout, gate, up, n, "launch of geglu_backward_kernel");
}

}  // namespace saturn::cuda
