#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

constexpr int kRowsPerChunk = 128;  // column sums: rows per block, one atomic per column each

// Stage 1: a fixed grid of Context::kReduceBlocks blocks, each summing a fixed strided subset in
// double; stage 2: one block adds the partials in a fixed tree. The order never changes, so the
// norm is identical run to run (and replicas agree).
__global__ void sum_squares_partial_kernel(double* partial, const float* x, std::size_t n) {
  double s = 0.0;
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const double v = x[i];
    s += v * v;
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(double* out, const double* partial, int count) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

__global__ void column_sum_kernel(float* dst, const bf16* src, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * kRowsPerChunk;
  const int r1 = min(N, r0 + kRowsPerChunk);
  float s = 0.0f;
  for (int n = r0; n < r1; ++n) s += to_f(src[static_cast<std::size_t>(n) * C + c]);
  atomicAdd(&dst[c], s);
}

__global__ void to_bf16_kernel(bf16* dst, const float* src, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) dst[i] = to_bf(src[i]);
}
__global__ void to_f32_kernel(float* dst, const bf16* src, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) dst[i] = to_f(src[i]);
}
template <typename T>
__global__ void fill_kernel(T* dst, T value, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) dst[i] = value;
}

}  // namespace

double sum_of_squares(Context& ctx, const float* x, std::size_t n) {
  if (n == 0) return 0.0;
  double* scratch = ctx.reduce_scratch();
  sum_squares_partial_kernel<<<Context::kReduceBlocks, kThreads, 0, ctx.stream()>>>(scratch + 1, x,
                                                                                    n);
  SATURN_CUDA_LAUNCH_CHECK("sum_squares_partial_kernel");
  sum_partials_kernel<<<1, kThreads, 0, ctx.stream()>>>(scratch, scratch + 1,
                                                        Context::kReduceBlocks);
  SATURN_CUDA_LAUNCH_CHECK("sum_partials_kernel");
  double result = 0.0;
  SATURN_CUDA_CHECK(
      cudaMemcpyAsync(&result, scratch, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize("sum_of_squares");
  return result;
}

void column_sum_accumulate(Context& ctx, float* dst, const bf16* src, int N, int C) {
  if (N == 0 || C == 0) return;
  const dim3 grid((C + kThreads - 1) / kThreads, (N + kRowsPerChunk - 1) / kRowsPerChunk);
  column_sum_kernel<<<grid, kThreads, 0, ctx.stream()>>>(dst, src, N, C);
  SATURN_CUDA_LAUNCH_CHECK("column_sum_kernel");
}

void convert(Context& ctx, bf16* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, src, n);
  SATURN_CUDA_LAUNCH_CHECK("to_bf16_kernel");
}

void convert(Context& ctx, float* dst, const bf16* src, std::size_t n) {
  if (n == 0) return;
  to_f32_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, src, n);
  SATURN_CUDA_LAUNCH_CHECK("to_f32_kernel");
}

void fill(Context& ctx, bf16* dst, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, __float2bfloat16(value), n);
  SATURN_CUDA_LAUNCH_CHECK("fill_kernel<bf16>");
}

void fill(Context& ctx, float* dst, float value, std::size_t n) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, value, n);
  SATURN_CUDA_LAUNCH_CHECK("fill_kernel<float>");
}

}  // namespace saturn::cuda
