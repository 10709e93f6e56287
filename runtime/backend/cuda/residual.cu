#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// out may alias a or b. vec: 8 elements per 128-bit access (common.cuh), the tail one by one.
__global__ void residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, std::size_t n,
                                        bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> x = load128(a + i), y = load128(b + i);
    Vec128<bf16> r;
#pragma unroll
    for (int k = 0; k < kBf16Width; ++k) r.v[k] = to_bf(to_f(x.v[k]) + to_f(y.v[k]));
    store128(out + i, r);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    out[i] = to_bf(to_f(a[i]) + to_f(b[i]));
}

// dst += dout (the vector at i).
__device__ __forceinline__ void add_vec(bf16* dst, const Vec128<bf16>& d) {
  Vec128<bf16> x = load128(dst);
#pragma unroll
  for (int k = 0; k < kBf16Width; ++k) x.v[k] = to_bf(to_f(x.v[k]) + to_f(d.v[k]));
  store128(dst, x);
}

__global__ void residual_backward_kernel(bf16* da, bf16* db, const bf16* dout, std::size_t n,
                                         bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> d = load128(dout + i);
    if (da != nullptr) add_vec(da + i, d);
    if (db != nullptr) add_vec(db + i, d);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride()) {
    const float d = to_f(dout[i]);
    if (da != nullptr) da[i] = to_bf(to_f(da[i]) + d);
    if (db != nullptr) db[i] = to_bf(to_f(db[i]) + d);
  }
}

// out[n, c] += bias[c].
__global__ void add_bias_kernel(bf16* out, const bf16* bias, std::size_t N, int C) {
  const std::size_t total = N * static_cast<std::size_t>(C);
  for (std::size_t i = global_index(); i < total; i += global_stride())
    out[i] = to_bf(to_f(out[i]) + to_f(bias[i % static_cast<std::size_t>(C)]));
}

}  // namespace

void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int C) {
  const std::size_t total = static_cast<std::size_t>(N) * static_cast<std::size_t>(C);
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total), kThreads, 0, ctx.stream()>>>(out, bias,
                                                                  static_cast<std::size_t>(N), C);
  SATURN_CUDA_LAUNCH_CHECK("add_bias_kernel");
}

void residual_forward(Context& ctx, bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(out, a, b);
  residual_forward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      out, a, b, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("residual_forward_kernel");
}

void residual_backward(Context& ctx, bf16* da, bf16* db, const bf16* dout, std::size_t n) {
  if (n == 0 || (da == nullptr && db == nullptr)) return;
  const bool vec = all_aligned16(da, db, dout);
  residual_backward_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      da, db, dout, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("residual_backward_kernel");
}

}  // namespace saturn::cuda
