#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/embedding_gradient.hpp"

namespace saturn::cpu {

namespace {

// dst[id] += the rows of dout of each id's occurrences (ids[n] for row n of N; skip_id's rows
// left out), times scale: the token embedding's gradient (ids: tokens), and the learned
// positions' with packed records (ids: positions, whose tokens are scattered over the rows).
void sum_rows_by_id(float* dst, const float* dout, const int32_t* ids, std::ptrdiff_t N, int C,
                    int skip_id, float scale) {
  const std::size_t row = static_cast<std::size_t>(C);
  // Ids repeat, so rows of dst collide across positions. The sums follow the windows of
  // embedding_gradient.hpp (as the CUDA kernels do). Each thread owns a slice of the channels
  // and walks every run of sorted keys: no atomics, and the same order at any thread count.
  std::vector<std::uint64_t> keys(static_cast<std::size_t>(N));
  for (std::ptrdiff_t n = 0; n < N; ++n)
    keys[static_cast<std::size_t>(n)] =
        embedding_gradient_key(ids[n], static_cast<std::uint64_t>(n));
  std::sort(keys.begin(), keys.end());
  const std::size_t count = keys.size();
#pragma omp parallel
  {
    const detail::Range r = detail::thread_range(C, omp_get_thread_num(), omp_get_num_threads());
    std::vector<float> segment(static_cast<std::size_t>(r.end - r.begin));
    // segment = the rows of keys [first, last) summed from zero, then added to the token's row.
    auto add_segment = [&](float* d, std::size_t first, std::size_t last) {
      std::fill(segment.begin(), segment.end(), 0.0f);
      for (std::size_t m = first; m < last; ++m) {
        const float* g = dout + (keys[m] & 0xffffffffu) * row + r.begin;
#pragma omp simd
        for (std::ptrdiff_t c = 0; c < r.end - r.begin; ++c) segment[c] += g[c] * scale;
      }
#pragma omp simd
      for (std::ptrdiff_t c = 0; c < r.end - r.begin; ++c) d[r.begin + c] += segment[c];
    };
    for (std::size_t first = 0; first < count;) {
      const std::uint64_t token = keys[first] >> 32;
      std::size_t end = first + 1;
      while (end < count && (keys[end] >> 32) == token) ++end;
      if (static_cast<std::int64_t>(token) != skip_id) {
        float* d = dst + token * row;
        for (std::size_t s = first; s < end;) {
          const std::size_t window_end =
              (s / kEmbeddingGradientWindow + 1) * kEmbeddingGradientWindow;
          const std::size_t last = std::min(end, window_end);
          add_segment(d, s, last);
          s = last;
        }
      }
      first = end;
    }
  }
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, float scale, const int32_t* positions) {
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
  const std::size_t row = static_cast<std::size_t>(C);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    float* o = out + static_cast<std::size_t>(n) * row;
    const float* e = wte + static_cast<std::size_t>(tokens[n]) * row;
    if (wpe != nullptr) {
      const std::size_t t = static_cast<std::size_t>(positions != nullptr ? positions[n] : n % T);
      const float* p = wpe + t * row;
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    } else if (scale != 1.0f) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = e[c] * scale;
    } else {
      std::memcpy(o, e, row * sizeof(float));
    }
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int padding_idx, float scale, const int32_t* positions) {
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
  const std::size_t row = static_cast<std::size_t>(C);
  if (dwte != nullptr) sum_rows_by_id(dwte, dout, tokens, N, C, padding_idx, scale);
  if (dwpe != nullptr && positions != nullptr) {
    sum_rows_by_id(dwpe, dout, positions, N, C, -1, 1.0f);
  } else if (dwpe != nullptr) {
#pragma omp parallel for schedule(static)
    for (int t = 0; t < T; ++t) {
      float* d = dwpe + static_cast<std::size_t>(t) * row;
      for (int b = 0; b < B; ++b) {
        const float* g = dout + (static_cast<std::size_t>(b) * T + t) * row;
#pragma omp simd
        for (int c = 0; c < C; ++c) d[c] += g[c];
      }
    }
  }
}

}  // namespace saturn::cpu
