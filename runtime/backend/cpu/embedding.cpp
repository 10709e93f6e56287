#include <cstring>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, float scale) {
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
  const std::size_t row = static_cast<std::size_t>(C);
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    float* o = out + static_cast<std::size_t>(n) * row;
    const float* e = wte + static_cast<std::size_t>(tokens[n]) * row;
    if (wpe != nullptr) {
      const float* p = wpe + static_cast<std::size_t>(n % T) * row;
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
                        int T, int C, int padding_idx, float scale) {
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
  const std::size_t row = static_cast<std::size_t>(C);
  if (dwte != nullptr) {
    // Tokens repeat, so rows of dwte collide across positions. Each thread owns a slice of the
    // channels and walks all positions in order: no atomics, and every element's sum has the
    // same order whatever the thread count.
#pragma omp parallel
    {
      const detail::Range r = detail::thread_range(C, omp_get_thread_num(), omp_get_num_threads());
      for (std::ptrdiff_t n = 0; n < N; ++n) {
        if (tokens[n] == padding_idx) continue;
        float* d = dwte + static_cast<std::size_t>(tokens[n]) * row;
        const float* g = dout + static_cast<std::size_t>(n) * row;
        if (scale != 1.0f) {
#pragma omp simd
          for (std::ptrdiff_t c = r.begin; c < r.end; ++c) d[c] += g[c] * scale;
        } else {
#pragma omp simd
          for (std::ptrdiff_t c = r.begin; c < r.end; ++c) d[c] += g[c];
        }
      }
    }
  }
  if (dwpe != nullptr) {
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
