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
  const bool params = dweight != nullptr || dbias != nullptr;
  // dweight/dbias sum over rows: each block of kNormRowBlock rows is summed into its own partial
  // and the partials are added in block order, so the result is the same for any thread count
  // (ranks with different OMP_NUM_THREADS, or a job resumed at another degree, agree).
  const std::ptrdiff_t blocks = (N + detail::kNormRowBlock - 1) / detail::kNormRowBlock;
  std::vector<float> partial(params ? static_cast<std::size_t>(blocks) * 2 * C : 0, 0.0f);
  // dinp rows are independent: with fewer blocks than threads they get their own row-parallel
  // loop (the same bits), so a small micro-batch does not leave threads idle.
  const bool rows_apart = dinp != nullptr && blocks < omp_get_max_threads();
  auto input_grad_row = [&](std::ptrdiff_t n) {
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
#pragma omp parallel
  {
    if (rows_apart) {
#pragma omp for schedule(static)
      for (std::ptrdiff_t n = 0; n < N; ++n) input_grad_row(n);
    }
#pragma omp for schedule(static)
    for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) {
      float* pw = params ? partial.data() + static_cast<std::size_t>(blk) * 2 * C : nullptr;
      float* pb = params ? pw + C : nullptr;
      const std::ptrdiff_t end = std::min<std::ptrdiff_t>(N, (blk + 1) * detail::kNormRowBlock);
      for (std::ptrdiff_t n = blk * detail::kNormRowBlock; n < end; ++n) {
        const float* x = inp + static_cast<std::size_t>(n) * C;
        const float* g = dout + static_cast<std::size_t>(n) * C;
        const float m = mean[n];
        const float s = rstd[n];
        if (dinp != nullptr && !rows_apart) input_grad_row(n);
        if (params) {
#pragma omp simd
          for (int c = 0; c < C; ++c) {
            pw[c] += g[c] * (x[c] - m) * s;
            pb[c] += g[c];
          }
        }
      }
    }
    if (params) {
#pragma omp for schedule(static)
      for (int c = 0; c < C; ++c) {
        float w = 0.0f, b = 0.0f;
        for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) {
          w += partial[static_cast<std::size_t>(blk) * 2 * C + c];
          b += partial[static_cast<std::size_t>(blk) * 2 * C + C + c];
        }
        if (dweight != nullptr) dweight[c] += w;
        if (dbias != nullptr) dbias[c] += b;
      }
    }
  }
}

}  // namespace saturn::cpu
