#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/backend/embedding_gradient.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// One block per token row.
__global__ void embedding_forward_kernel(bf16* out, const std::int32_t* tokens, const bf16* wte,
                                         const bf16* wpe, int T, int C, float scale,
                                         const std::int32_t* positions) {
  const std::size_t n = blockIdx.x;
  const std::size_t tok = static_cast<std::size_t>(tokens[n]);
  const std::size_t t = positions != nullptr ? static_cast<std::size_t>(positions[n])
                                             : n % static_cast<std::size_t>(T);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float x = to_f(wte[tok * C + c]) * scale;  // Gemma's sqrt(d_model); 1 otherwise
    if (wpe != nullptr) x += to_f(wpe[t * C + c]);
    out[n * C + c] = to_bf(x);
  }
}

// The token embedding's gradient without atomics. Tokens repeat, so rows of dwte collide; the
// rows are grouped by token through a sort of the keys (token << 32 | position), which are
// unique, so the sorted order is unique too. The sums then follow embedding_gradient.hpp, as the
// CPU does: the sorted keys are cut into windows of kEmbeddingGradientWindow; a segment (one
// token's keys inside one window) is one block's sum, so no block adds more than a window of
// rows, and each token's row adds its segments' sums in order, so the result does not depend on
// how blocks are scheduled. The sort is bitonic over the keys padded to a power of two: steps
// whose partners lie within a tile of kSortTile keys run in shared memory, one launch for a run
// of them; larger strides take one launch per step.
constexpr int kSortTile = 2048;
constexpr std::uint64_t kPadKey = ~std::uint64_t{0};  // sorts after every real key

__global__ void embedding_sort_keys_kernel(std::uint64_t* keys, const std::int32_t* tokens,
                                           std::size_t N, std::size_t padded) {
  for (std::size_t i = global_index(); i < padded; i += global_stride())
    keys[i] = i < N ? embedding_gradient_key(tokens[i], i) : kPadKey;
}

// The compare-exchange of keys i and i ^ j (i the lower) in stage k of a bitonic sort:
// ascending where bit k of i is clear.
__device__ __forceinline__ void bitonic_exchange(std::uint64_t& lo, std::uint64_t& hi,
                                                 std::size_t i, std::size_t k) {
  const bool ascending = (i & k) == 0;
  if ((lo > hi) == ascending) {
    const std::uint64_t t = lo;
    lo = hi;
    hi = t;
  }
}

// Stages k_first..k_last (powers of two), each with its strides from min(k / 2, tile / 2) down
// to 1, on one tile of `tile` keys per block (tile <= kSortTile).
__global__ void bitonic_tile_kernel(std::uint64_t* keys, std::size_t tile, std::size_t k_first,
                                    std::size_t k_last) {
  __shared__ std::uint64_t s[kSortTile];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * tile;
  for (std::size_t i = threadIdx.x; i < tile; i += blockDim.x) s[i] = keys[base + i];
  __syncthreads();
  for (std::size_t k = k_first; k <= k_last; k <<= 1) {
    for (std::size_t j = (k / 2 < tile / 2 ? k / 2 : tile / 2); j > 0; j >>= 1) {
      for (std::size_t i = threadIdx.x; i < tile; i += blockDim.x) {
        const std::size_t l = i ^ j;
        if (l > i) bitonic_exchange(s[i], s[l], base + i, k);
      }
      __syncthreads();
    }
  }
  for (std::size_t i = threadIdx.x; i < tile; i += blockDim.x) keys[base + i] = s[i];
}

// One step (stage k, stride j >= the tile) over all keys in global memory.
__global__ void bitonic_step_kernel(std::uint64_t* keys, std::size_t padded, std::size_t k,
                                    std::size_t j) {
  for (std::size_t i = global_index(); i < padded; i += global_stride()) {
    const std::size_t l = i ^ j;
    if (l > i) {
      std::uint64_t lo = keys[i], hi = keys[l];
      bitonic_exchange(lo, hi, i, k);
      keys[i] = lo;
      keys[l] = hi;
    }
  }
}

constexpr std::size_t kWindow = kEmbeddingGradientWindow;

__device__ __forceinline__ std::uint64_t token_of(std::uint64_t key) {
  return key >> 32;
}

// The rows of the sorted keys [first, last) summed from zero in key order, at channel c.
// __fmul_rn: no multiply-add contraction, so that the rounding is the CPU's.
__device__ __forceinline__ float segment_sum(const bf16* dout, const std::uint64_t* keys,
                                             std::size_t first, std::size_t last, int C, int c,
                                             float scale) {
  float s = 0.0f;
  for (std::size_t m = first; m < last; ++m)
    s += __fmul_rn(to_f(dout[(keys[m] & 0xffffffffu) * C + c]), scale);
  return s;
}

// One block per window: where a token's run continues into this window from the one before,
// the block sums the run's segment in this window into partial[window]. Such a segment starts
// at the window's first key, so a window holds at most one.
__global__ void embedding_gradient_continuations_kernel(float* partial, const bf16* dout,
                                                        const std::uint64_t* keys, std::size_t N,
                                                        int C, float scale) {
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * kWindow;
  const std::uint64_t tok = token_of(keys[first]);
  if (first == 0 || token_of(keys[first - 1]) != tok) return;  // no run continues here
  std::size_t last = first + 1;
  while (last < N && last < first + kWindow && token_of(keys[last]) == tok) ++last;
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    partial[blockIdx.x * static_cast<std::size_t>(C) + c] =
        segment_sum(dout, keys, first, last, C, c, scale);
}

// One block per sorted key; the block at the start of a run of equal tokens sums the run's first
// segment, adds it to the token's row of dwte, then adds the run's continuations in window order.
__global__ void embedding_backward_wte_kernel(float* dwte, const bf16* dout,
                                              const std::uint64_t* keys, const float* partial,
                                              std::size_t N, int C, int padding_idx, float scale) {
  const std::size_t first = blockIdx.x;
  const std::uint64_t tok = token_of(keys[first]);
  if (first > 0 && token_of(keys[first - 1]) == tok) return;  // not the start of a run
  if (padding_idx >= 0 && tok == static_cast<std::uint64_t>(padding_idx)) return;
  const std::size_t window_end = (first / kWindow + 1) * kWindow;
  std::size_t last = first + 1;
  while (last < N && last < window_end && token_of(keys[last]) == tok) ++last;
  float* d = dwte + tok * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float s = d[c] + segment_sum(dout, keys, first, last, C, c, scale);
    for (std::size_t w = window_end; w < N && token_of(keys[w]) == tok; w += kWindow)
      s += partial[(w / kWindow) * static_cast<std::size_t>(C) + c];
    d[c] = s;
  }
}

// One thread per (t, c): sums over the batch in order, no atomics.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const bf16* dout, int B, int T, int C) {
  const std::size_t TC = static_cast<std::size_t>(T) * C;
  for (std::size_t i = global_index(); i < TC; i += global_stride()) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += to_f(dout[static_cast<std::size_t>(b) * TC + i]);
    dwpe[i] += s;
  }
}

// dst[id] += the rows of dout of each id's occurrences (ids[n] for row n, skip_id's rows left
// out), summed by the windows of embedding_gradient.hpp: the token embedding's gradient (ids:
// tokens), and the learned positions' with packed records (ids: positions).
void sum_rows_by_id(Context& ctx, float* dst, const bf16* dout, const std::int32_t* ids, unsigned N,
                    int C, int skip_id, float scale) {
  std::size_t padded = 1;
  while (padded < N) padded <<= 1;
  Buffer<std::uint64_t> keys(ctx.pool(), padded, "embedding gradient sort keys");
  embedding_sort_keys_kernel<<<grid_for(padded), kThreads, 0, ctx.stream()>>>(keys.data(), ids, N,
                                                                              padded);
  SATURN_CUDA_LAUNCH_CHECK("embedding_sort_keys_kernel");
  const std::size_t tile = padded < kSortTile ? padded : kSortTile;
  const auto tiles = static_cast<unsigned>(padded / tile);
  if (padded > 1) {
    bitonic_tile_kernel<<<tiles, kThreads, 0, ctx.stream()>>>(keys.data(), tile, 2, tile);
    SATURN_CUDA_LAUNCH_CHECK("bitonic_tile_kernel");
  }
  for (std::size_t k = tile * 2; k <= padded; k <<= 1) {
    for (std::size_t j = k / 2; j >= tile; j >>= 1) {
      bitonic_step_kernel<<<grid_for(padded / 2), kThreads, 0, ctx.stream()>>>(keys.data(), padded,
                                                                               k, j);
      SATURN_CUDA_LAUNCH_CHECK("bitonic_step_kernel");
    }
    bitonic_tile_kernel<<<tiles, kThreads, 0, ctx.stream()>>>(keys.data(), tile, k, k);
    SATURN_CUDA_LAUNCH_CHECK("bitonic_tile_kernel");
  }
  // Windows after the first can hold a run's continuation; their sums go to `partial`.
  const auto windows = static_cast<unsigned>((N + kWindow - 1) / kWindow);
  Buffer<float> partial(ctx.pool(), static_cast<std::size_t>(windows) * C,
                        "embedding gradient window sums");
  if (windows > 1) {
    // clang-format off
    embedding_gradient_continuations_kernel<<<windows, kThreads, 0, ctx.stream()>>>(partial.data(), dout, keys.data(), N, C, scale);
    // clang-format on
    SATURN_CUDA_LAUNCH_CHECK("embedding_gradient_continuations_kernel");
  }
  // clang-format off
  embedding_backward_wte_kernel<<<N, kThreads, 0, ctx.stream()>>>(dst, dout, keys.data(), partial.data(), N, C, skip_id, scale);
  // clang-format on
  SATURN_CUDA_LAUNCH_CHECK("embedding_backward_wte_kernel");
}

}  // namespace

void embedding_forward(Context& ctx, bf16* out, const std::int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, float scale,
                       const std::int32_t* positions) {
  const unsigned N = static_cast<unsigned>(B) * static_cast<unsigned>(T);
  if (N == 0) return;
  // clang-format off
  embedding_forward_kernel<<<N, kThreads, 0, ctx.stream()>>>(out, tokens, wte, wpe, T, C, scale, positions);
  // clang-format on
  SATURN_CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const std::int32_t* tokens, int B, int T, int C, int padding_idx,
                        float scale, const std::int32_t* positions) {
  const unsigned N = static_cast<unsigned>(B) * static_cast<unsigned>(T);
  if (N == 0) return;
  if (dwte != nullptr) sum_rows_by_id(ctx, dwte, dout, tokens, N, C, padding_idx, scale);
  if (dwpe != nullptr && positions != nullptr) {
    // Packed records: a position's tokens are scattered over the rows, grouped as a token's are.
    sum_rows_by_id(ctx, dwpe, dout, positions, N, C, -1, 1.0f);
  } else if (dwpe != nullptr) {
    const std::size_t TC = static_cast<std::size_t>(T) * C;
    embedding_backward_wpe_kernel<<<grid_for(TC), kThreads, 0, ctx.stream()>>>(dwpe, dout, B, T, C);
    SATURN_CUDA_LAUNCH_CHECK("embedding_backward_wpe_kernel");
  }
}

}  // namespace saturn::cuda
