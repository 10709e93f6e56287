#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// Given this thread's part of the row's sum of squares, finishes the row.
// offset: 0 (LLaMA), or 1 (Gemma: the weight applied as 1 + w).
__device__ __forceinline__ void rmsnorm_row(bf16* o, float* rstd, const bf16* x, const bf16* weight,
                                            int C, float eps, float offset, float sq,
                                            std::size_t row) {
  const float r = rsqrtf(block_sum(sq) / static_cast<float>(C) + eps);
  // Hugging Face LlamaRMSNorm order: weight * (x * rstd).
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    o[c] = to_bf((offset + to_f(weight[c])) * (to_f(x[c]) * r));
  if (threadIdx.x == 0 && rstd != nullptr) rstd[row] = r;
}

__global__ void rmsnorm_forward_kernel(bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                                       int C, float eps, float offset) {
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float v = to_f(x[c]);
    sq += v * v;
  }
  rmsnorm_row(out + row * C, rstd, x, weight, C, eps, offset, sq, row);
}

// res = a + b (bf16), then the rmsnorm of res, as residual_layernorm_forward_kernel
// (layernorm.cu): each thread reads back only its own stores. res may alias a or b.
__global__ void residual_rmsnorm_forward_kernel(bf16* res, bf16* out, float* rstd, const bf16* a,
                                                const bf16* b, const bf16* weight, int C, float eps,
                                                float offset) {
  const std::size_t row = blockIdx.x;
  bf16* x = res + row * C;
  const bf16* ar = a + row * C;
  const bf16* br = b + row * C;
  float sq = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const bf16 v = to_bf(to_f(ar[c]) + to_f(br[c]));
    x[c] = v;
    const float f = to_f(v);
    sq += f * f;
  }
  rmsnorm_row(out + row * C, rstd, x, weight, C, eps, offset, sq, row);
}

__global__ void rmsnorm_backward_input_kernel(bf16* dinp, const bf16* dout, const bf16* inp,
                                              const bf16* weight, const float* rstd, int C,
                                              float offset) {
  const std::size_t row = blockIdx.x;
  const bf16* x = inp + row * C;
  const bf16* g = dout + row * C;
  const float r = rstd[row];
  float dot = 0.0f;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    dot += to_f(g[c]) * (offset + to_f(weight[c])) * to_f(x[c]);
  // y = w*x*r with r = (mean(x^2)+eps)^-1/2, dr/dx_i = -r^3 x_i / C.
  const float k = block_sum(dot) * r * r * r / static_cast<float>(C);
  bf16* dx = dinp + row * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    const float d = r * (offset + to_f(weight[c])) * to_f(g[c]) - k * to_f(x[c]);
    dx[c] = to_bf(to_f(dx[c]) + d);
  }
}

// grid: (channel blocks, row chunks); partial[chunk][c], summed in order by add_column_partials.
__global__ void rmsnorm_backward_weight_kernel(float* partial, const bf16* dout, const bf16* inp,
                                               const float* rstd, int N, int C,
                                               int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float w = 0.0f;
  for (int n = r0; n < r1; ++n) {
    const std::size_t i = static_cast<std::size_t>(n) * C + c;
    w += to_f(dout[i]) * (to_f(inp[i]) * rstd[n]);
  }
  partial[static_cast<std::size_t>(blockIdx.y) * C + c] = w;
}

}  // namespace

void rmsnorm_forward(Context& ctx, bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                     int N, int C, float eps, float offset) {
  if (N == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      out, rstd, inp, weight, C, eps, offset);
  SATURN_CUDA_LAUNCH_CHECK("rmsnorm_forward_kernel");
}

void residual_rmsnorm_forward(Context& ctx, bf16* res, bf16* out, float* rstd, const bf16* a,
                              const bf16* b, const bf16* weight, int N, int C, float eps,
                              float offset) {
  if (N == 0) return;
  residual_rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      res, out, rstd, a, b, weight, C, eps, offset);
  SATURN_CUDA_LAUNCH_CHECK("residual_rmsnorm_forward_kernel");
}

void rmsnorm_backward(Context& ctx, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int N, int C, float offset) {
  if (N == 0) return;
  if (dinp != nullptr) {
    rmsnorm_backward_input_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
        dinp, dout, inp, weight, rstd, C, offset);
    SATURN_CUDA_LAUNCH_CHECK("rmsnorm_backward_input_kernel");
  }
  if (dweight != nullptr) {
    const RowChunks chunks = row_chunks(N);
    Buffer<float> partial(ctx.pool(), static_cast<std::size_t>(chunks.count) * C,
                          "rmsnorm gradient partials");
    const dim3 grid((C + kThreads - 1) / kThreads, chunks.count);
    rmsnorm_backward_weight_kernel<<<grid, kThreads, 0, ctx.stream()>>>(partial.data(), dout, inp,
                                                                        rstd, N, C, chunks.rows);
    SATURN_CUDA_LAUNCH_CHECK("rmsnorm_backward_weight_kernel");
    add_column_partials(ctx, dweight, partial.data(), chunks.count, C);
  }
}

}  // namespace saturn::cuda
