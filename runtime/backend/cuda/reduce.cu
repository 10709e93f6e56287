#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

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

// Exact squares (core/exact_sum.hpp's arithmetic): fp32 exponent fields 0..254 are the bins; a
// square m² (m the 24-bit significand) is added to its bin's 128-bit integer (lo, hi).
constexpr int kExpBins = 255;
constexpr int kExactPerBlock = 2 * kExpBins + 1;  // lo[255], hi[255], non-finite count

__global__ void exact_squares_partial_kernel(unsigned long long* partial, const float* x,
                                             std::size_t n) {
  __shared__ unsigned long long lo[kExpBins], hi[kExpBins], nonfinite;
  for (int b = threadIdx.x; b < kExpBins; b += blockDim.x) {
    lo[b] = 0;
    hi[b] = 0;
  }
  if (threadIdx.x == 0) nonfinite = 0;
  __syncthreads();
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    std::uint32_t bits = 0;
    memcpy(&bits, x + i, sizeof bits);
    const std::uint32_t e = (bits >> 23) & 0xFFu;
    if (e == 0xFFu) {
      atomicAdd(&nonfinite, 1ull);
      continue;
    }
    const unsigned long long m = (bits & 0x7FFFFFu) | (e != 0 ? 0x800000u : 0u);
    const unsigned long long sq = m * m;
    const unsigned long long old = atomicAdd(&lo[e], sq);
    if (old + sq < old) atomicAdd(&hi[e], 1ull);  // the 64-bit word wrapped: carry
  }
  __syncthreads();
  unsigned long long* out = partial + static_cast<std::size_t>(blockIdx.x) * kExactPerBlock;
  for (int b = threadIdx.x; b < kExpBins; b += blockDim.x) {
    out[b] = lo[b];
    out[kExpBins + b] = hi[b];
  }
  if (threadIdx.x == 0) out[2 * kExpBins] = nonfinite;
}

// One thread per bin (and one for the non-finite count): the blocks' 128-bit partials added
// with carries, written as ExactSquareSum's 32-bit words.
__global__ void exact_squares_words_kernel(std::int64_t* words, const unsigned long long* partial,
                                           int blocks) {
  constexpr unsigned long long kMask = 0xFFFFFFFFull;
  for (int b = threadIdx.x; b <= kExpBins; b += blockDim.x) {
    if (b == kExpBins) {
      unsigned long long count = 0;
      for (int k = 0; k < blocks; ++k)
        count += partial[static_cast<std::size_t>(k) * kExactPerBlock + 2 * kExpBins];
      words[4 * kExpBins] = static_cast<std::int64_t>(count);
      continue;
    }
    unsigned long long lo = 0, hi = 0;
    for (int k = 0; k < blocks; ++k) {
      const unsigned long long* p = partial + static_cast<std::size_t>(k) * kExactPerBlock;
      lo += p[b];
      hi += p[kExpBins + b] + (lo < p[b] ? 1ull : 0ull);
    }
    words[4 * b] = static_cast<std::int64_t>(lo & kMask);
    words[4 * b + 1] = static_cast<std::int64_t>(lo >> 32);
    words[4 * b + 2] = static_cast<std::int64_t>(hi & kMask);
    words[4 * b + 3] = static_cast<std::int64_t>(hi >> 32);
  }
}

__global__ void sum_partials_kernel(double* out, const double* partial, int count) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = s;
}

// grid: (column blocks, row chunks); partial[chunk][c] = the chunk's sum of column c.
__global__ void column_sum_partial_kernel(float* partial, const bf16* src, int N, int C,
                                          int rows_per_chunk) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int r0 = blockIdx.y * rows_per_chunk;
  const int r1 = min(N, r0 + rows_per_chunk);
  float s = 0.0f;
  for (int n = r0; n < r1; ++n) s += to_f(src[static_cast<std::size_t>(n) * C + c]);
  partial[static_cast<std::size_t>(blockIdx.y) * C + c] = s;
}

__global__ void add_column_partials_kernel(float* dst, const float* partial, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; ++k) s += partial[static_cast<std::size_t>(k) * C + c];
  dst[c] += s;
}

// vec: whole 128-bit vectors (common.cuh; 8 elements: two fp32 vectors, one bf16 vector), the
// tail one by one.
__global__ void to_bf16_kernel(bf16* dst, const float* src, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<float> lo = load128(src + i), hi = load128(src + i + kF32Width);
    Vec128<bf16> r;
#pragma unroll
    for (int k = 0; k < kF32Width; ++k) {
      r.v[k] = to_bf(lo.v[k]);
      r.v[k + kF32Width] = to_bf(hi.v[k]);
    }
    store128(dst + i, r);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    dst[i] = to_bf(src[i]);
}
__global__ void to_f32_kernel(float* dst, const bf16* src, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kBf16Width : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kBf16Width;
    const Vec128<bf16> x = load128(src + i);
    Vec128<float> lo, hi;
#pragma unroll
    for (int k = 0; k < kF32Width; ++k) {
      lo.v[k] = to_f(x.v[k]);
      hi.v[k] = to_f(x.v[k + kF32Width]);
    }
    store128(dst + i, lo);
    store128(dst + i + kF32Width, hi);
  }
  for (std::size_t i = nv * kBf16Width + global_index(); i < n; i += global_stride())
    dst[i] = to_f(src[i]);
}
template <typename T>
__global__ void fill_kernel(T* dst, T value, std::size_t n, bool vec) {
  constexpr int kWidth = Vec128<T>::kWidth;
  const std::size_t nv = vec ? n / kWidth : 0;
  Vec128<T> r;
#pragma unroll
  for (int k = 0; k < kWidth; ++k) r.v[k] = value;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) store128(dst + v * kWidth, r);
  for (std::size_t i = nv * kWidth + global_index(); i < n; i += global_stride()) dst[i] = value;
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

std::vector<std::int64_t> exact_square_sum_words(Context& ctx, const float* x, std::size_t n) {
  std::vector<std::int64_t> words(4 * kExpBins + 1, 0);
  if (n == 0) return words;
  const int blocks = Context::kReduceBlocks;
  Buffer<unsigned long long> partial(ctx.pool(), static_cast<std::size_t>(blocks) * kExactPerBlock,
                                     "exact square sum bins");
  Buffer<std::int64_t> summed(ctx.pool(), words.size(), "exact square sum words");
  exact_squares_partial_kernel<<<blocks, kThreads, 0, ctx.stream()>>>(partial.data(), x, n);
  SATURN_CUDA_LAUNCH_CHECK("exact_squares_partial_kernel");
  exact_squares_words_kernel<<<1, kThreads, 0, ctx.stream()>>>(summed.data(), partial.data(),
                                                               blocks);
  SATURN_CUDA_LAUNCH_CHECK("exact_squares_words_kernel");
  SATURN_CUDA_CHECK(cudaMemcpyAsync(words.data(), summed.data(),
                                    words.size() * sizeof(std::int64_t), cudaMemcpyDeviceToHost,
                                    ctx.stream()));
  ctx.synchronize("exact_square_sum_words");
  return words;
}

void column_sum_accumulate(Context& ctx, float* dst, const bf16* src, int N, int C) {
  if (N == 0 || C == 0) return;
  const RowChunks chunks = row_chunks(N);
  Buffer<float> partial(ctx.pool(), static_cast<std::size_t>(chunks.count) * C,
                        "column sum partials");
  const dim3 grid((C + kThreads - 1) / kThreads, chunks.count);
  column_sum_partial_kernel<<<grid, kThreads, 0, ctx.stream()>>>(partial.data(), src, N, C,
                                                                 chunks.rows);
  SATURN_CUDA_LAUNCH_CHECK("column_sum_partial_kernel");
  add_column_partials(ctx, dst, partial.data(), chunks.count, C);
  // `partial` goes back to the pool now: its next user runs on this stream, after these kernels.
}

void add_column_partials(Context& ctx, float* dst, const float* partial, int chunks, int C) {
  if (C == 0) return;
  add_column_partials_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, ctx.stream()>>>(
      dst, partial, chunks, C);
  SATURN_CUDA_LAUNCH_CHECK("add_column_partials_kernel");
}

void convert(Context& ctx, bf16* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dst, src);
  to_bf16_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(dst, src, n,
                                                                                      vec);
  SATURN_CUDA_LAUNCH_CHECK("to_bf16_kernel");
}

void convert(Context& ctx, float* dst, const bf16* src, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dst, src);
  to_f32_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(dst, src, n,
                                                                                     vec);
  SATURN_CUDA_LAUNCH_CHECK("to_f32_kernel");
}

void fill(Context& ctx, bf16* dst, float value, std::size_t n) {
  if (n == 0) return;
  const bool vec = aligned16(dst);
  fill_kernel<<<grid_for_vectors(n, vec, kBf16Width), kThreads, 0, ctx.stream()>>>(
      dst, __float2bfloat16(value), n, vec);
  SATURN_CUDA_LAUNCH_CHECK("fill_kernel<bf16>");
}

void fill(Context& ctx, float* dst, float value, std::size_t n) {
  if (n == 0) return;
  const bool vec = aligned16(dst);
  fill_kernel<<<grid_for_vectors(n, vec, kF32Width), kThreads, 0, ctx.stream()>>>(dst, value, n,
                                                                                  vec);
  SATURN_CUDA_LAUNCH_CHECK("fill_kernel<float>");
}

}  // namespace saturn::cuda
