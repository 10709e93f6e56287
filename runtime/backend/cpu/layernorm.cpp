#include <cmath>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps) {
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    float* o = out + static_cast<std::size_t>(n) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum * inv_c;
    // Two passes (mean, then squared deviations): no cancellation for rows with a large mean.
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) {
      const float d = x[c] - m;
      sq += d * d;
    }
    const float s = 1.0f / std::sqrt(sq * inv_c + eps);
    if (bias != nullptr) {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    } else {
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c];
    }
    if (mean != nullptr) mean[n] = m;
    if (rstd != nullptr) rstd[n] = s;
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  auto input_row = [&](std::ptrdiff_t n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* g = dout + static_cast<std::size_t>(n) * C;
    const float m = mean[n];
    const float s = rstd[n];
    float sum_dn = 0.0f, sum_dn_norm = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dn_norm)
    for (int c = 0; c < C; ++c) {
      const float dn = weight[c] * g[c];
      sum_dn += dn;
      sum_dn_norm += dn * (x[c] - m) * s;
    }
    const float mean_dn = sum_dn * inv_c;
    const float mean_dn_norm = sum_dn_norm * inv_c;
    float* dx = dinp + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      const float norm = (x[c] - m) * s;
      dx[c] += (weight[c] * g[c] - mean_dn - norm * mean_dn_norm) * s;
    }
  };
  // Partials: dweight in [0, C), dbias in [C, 2C).
  auto param_row = [&](std::ptrdiff_t n, float* p) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* g = dout + static_cast<std::size_t>(n) * C;
    const float m = mean[n];
    const float s = rstd[n];
#pragma omp simd
    for (int c = 0; c < C; ++c) {
      p[c] += g[c] * (x[c] - m) * s;
      p[C + c] += g[c];
    }
  };
  auto add = [&](std::ptrdiff_t i, float sum) {
    float* out = i < C ? dweight : dbias;
    if (out != nullptr) out[i < C ? i : i - C] += sum;
  };
  detail::row_blocks_backward(N, 2 * C, dinp != nullptr, dweight != nullptr || dbias != nullptr,
                              input_row, param_row, add);
}

}  // namespace saturn::cpu
