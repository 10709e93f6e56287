#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// One block per row; two passes (mean, then squared deviations) as on the CPU. Given the row's
// sum of x (this thread's part), finishes the row: the statistics, then the output.
__device__ __forceinline__ void layernorm_row(bf16* o, float* mean, float* rstd, const bf16* x,
                                              const bf16* weight, const bf16* bias, int C,
                                              float eps, float s, std::size_t row) {
  const float m = block_sum(s) / static_cast<float>(C);
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = to_f(x[c]) - m;
    sq += d * d;
  }
  const float r = rsqrtf(block_sum(sq) / static_cast<float>(C) + eps);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float y = (to_f(x[c]) - m) * r * to_f(weight[c]);
    if (bias != nullptr) y += to_f(bias[c]);
    o[c] = to_bf(y);
  }
  if (threadIdx.x == 0) {
    if (mean != nullptr) mean[row] = m;
    if (rstd != nullptr) rstd[row] = r;
  }
}

__global__ void layernorm_forward_kernel(bf16* out, float* mean, float* rstd, const bf16* inp,
                                         const bf16* weight, const bf16* bias, int C, float eps) {
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) s += to_f(x[c]);
  layernorm_row(out + row * C, mean, rstd, x, weight, bias, C, eps, s, row);
}

// res = a + b (bf16), then the layernorm of res: the residual's values are summed as they are
// written, and each thread reads back only the elements it wrote itself (its own earlier stores),
// so the row is never read a second time from memory by another pass. The same arithmetic, in
// the same order, as residual_forward followed by layernorm_forward. res may alias a or b.
__global__ void residual_layernorm_forward_kernel(bf16* res, bf16* out, float* mean, float* rstd,
                                                  const bf16* a, const bf16* b, const bf16* weight,
                                                  const bf16* bias, int C, float eps) {
  const std::size_t row = blockIdx.x;
  bf16* x = res + row * C;
  const bf16* ar = a + row * C;
  const bf16* br = b + row * C;
  float s = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const bf16 v = to_bf(to_f(ar[c]) + to_f(br[c]));
    x[c] = v;
    s += to_f(v);
  }
  layernorm_row(out + row * C, mean, rstd, x, weight, bias, C, eps, s, row);
}

__global__ void layernorm_backward_input_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                                                const bf16* weight, const float* mean,
                                                const float* rstd, int C) {
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* g = dout + row * C;
  const float m = mean[row], r = rstd[row];
  float sum_dn = 0.0f, sum_dn_norm = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float dn = to_f(weight[c]) * to_f(g[c]);
    sum_dn += dn;
    sum_dn_norm += dn * (to_f(x[c]) - m) * r;
  }
  const float mean_dn = block_sum(sum_dn) / static_cast<float>(C);
  const float mean_dn_norm = block_sum(sum_dn_norm) / static_cast<float>(C);
  bf16* dx = dinp + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float norm = (to_f(x[c]) - m) * r;
    const float d = (to_f(weight[c]) * to_f(g[c]) - mean_dn - norm * mean_dn_norm) * r;
    dx[c] = to_bf(to_f(dx[c]) + d);
  }
}

// grid: (channel blocks, row chunks). Each thread sums one channel over the chunk's rows and
// writes the partial sums (weight, bias) of its chunk: pw[chunk][c], pb[chunk][c] (row_chunks in
// common.cuh; add_column_partials adds them in chunk order).
__global__ void layernorm_backward_params_kernel(float* pw, float* pb, const bf16* dout,
                                                 const bf16* inp, const float* mean,
                                                 const float* rstd, int N, int C,
                                                 int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float w = 0.0f, b = 0.0f;
  for (int n = r0; n < r1; ++n) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    const float g = to_f(dout[i]);
    w += g * (to_f(inp[i]) - mean[n]) * rstd[n];
    b += g;
  }
  const std::size_t at = static_cast<std::size_t>(blockIdx.y) * C + c;
  pw[at] = w;
  pb[at] = b;
}

}  // namespace

void layernorm_forward(Context& ctx, bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C, float eps) {
  if (N == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      out, mean, rstd, inp, weight, bias, C, eps);
  SATURN_CUDA_LAUNCH_CHECK("layernorm_forward_kernel");
}

void residual_layernorm_forward(Context& ctx, bf16* res, bf16* out, float* mean, float* rstd,
                                const bf16* a, const bf16* b, const bf16* weight, const bf16* bias,
                                int N, int C, float eps) {
  if (N == 0) return;
  residual_layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      res, out, mean, rstd, a, b, weight, bias, C, eps);
  SATURN_CUDA_LAUNCH_CHECK("residual_layernorm_forward_kernel");
}

void layernorm_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int N, int C) {
  if (N == 0) return;
  if (dinp != nullptr) {
    layernorm_backward_input_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
        dinp, dout, inp, weight, mean, rstd, C);
    SATURN_CUDA_LAUNCH_CHECK("layernorm_backward_input_kernel");
  }
  if (dweight != nullptr || dbias != nullptr) {
    const RowChunks chunks = row_chunks(N);
    const std::size_t per = static_cast<std::size_t>(chunks.count) * C;
    Buffer<float> partial(ctx.pool(), 2 * per, "layernorm gradient partials");
    const dim3 grid((C + kThreads - 1) / kThreads, chunks.count);
    layernorm_backward_params_kernel<<<grid, kThreads, 0, ctx.stream()>>>(
        partial.data(), partial.data() + per, dout, inp, mean, rstd, N, C, chunks.rows);
    SATURN_CUDA_LAUNCH_CHECK("layernorm_backward_params_kernel");
    if (dweight != nullptr) add_column_partials(ctx, dweight, partial.data(), chunks.count, C);
    if (dbias != nullptr) add_column_partials(ctx, dbias, partial.data() + per, chunks.count, C);
  }
}

}  // namespace saturn::cuda
