#include <cmath>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps) {
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    float* o = out + static_cast<std::size_t>(n) * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq * inv_c + eps);
    // Hugging Face LlamaRMSNorm order: weight * (x * rstd).
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = weight[c] * (x[c] * s);
    if (rstd != nullptr) rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C) {
  const float inv_c = 1.0f / static_cast<float>(C);
  // As in layernorm_backward: partials of dweight per block of rows, added in block order.
  const std::ptrdiff_t blocks = (N + detail::kNormRowBlock - 1) / detail::kNormRowBlock;
  std::vector<float> partial(dweight != nullptr ? static_cast<std::size_t>(blocks) * C : 0, 0.0f);
  // dinp rows are independent: with fewer blocks than threads they get their own row-parallel
  // loop (the same bits), so a small micro-batch does not leave threads idle.
  const bool rows_apart = dinp != nullptr && blocks < omp_get_max_threads();
  auto input_grad_row = [&](std::ptrdiff_t n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* g = dout + static_cast<std::size_t>(n) * C;
    const float s = rstd[n];
    // y = w*x*s with s = (mean(x^2)+eps)^-1/2, ds/dx_i = -s^3 x_i / C.
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += g[c] * weight[c] * x[c];
    const float k = dot * s * s * s * inv_c;
    float* dx = dinp + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] += s * weight[c] * g[c] - k * x[c];
  };
#pragma omp parallel
  {
    if (rows_apart) {
#pragma omp for schedule(static)
      for (std::ptrdiff_t n = 0; n < N; ++n) input_grad_row(n);
    }
#pragma omp for schedule(static)
    for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) {
      float* pw = dweight != nullptr ? partial.data() + static_cast<std::size_t>(blk) * C : nullptr;
      const std::ptrdiff_t end = std::min<std::ptrdiff_t>(N, (blk + 1) * detail::kNormRowBlock);
      for (std::ptrdiff_t n = blk * detail::kNormRowBlock; n < end; ++n) {
        const float* x = inp + static_cast<std::size_t>(n) * C;
        const float* g = dout + static_cast<std::size_t>(n) * C;
        const float s = rstd[n];
        if (dinp != nullptr && !rows_apart) input_grad_row(n);
        if (pw != nullptr) {
#pragma omp simd
          for (int c = 0; c < C; ++c) pw[c] += g[c] * (x[c] * s);
        }
      }
    }
    if (dweight != nullptr) {
#pragma omp for schedule(static)
      for (int c = 0; c < C; ++c) {
        float w = 0.0f;
        for (std::ptrdiff_t blk = 0; blk < blocks; ++blk)
          w += partial[static_cast<std::size_t>(blk) * C + c];
        dweight[c] += w;
      }
    }
  }
}

}  // namespace saturn::cpu
