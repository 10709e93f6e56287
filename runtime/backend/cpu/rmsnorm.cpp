#include <cmath>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps, float offset) {
  const float inv_c = 1.0f / static_cast<float>(C);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    float* o = out + static_cast<std::size_t>(n) * C;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (int c = 0; c < C; ++c) sq += x[c] * x[c];
    const float s = 1.0f / std::sqrt(sq * inv_c + eps);
    // Hugging Face LlamaRMSNorm order: weight * (x * rstd); GemmaRMSNorm's (1 + weight) is formed
    // first, as it is there.
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (offset + weight[c]) * (x[c] * s);
    if (rstd != nullptr) rstd[n] = s;
  }
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, float offset) {
  const float inv_c = 1.0f / static_cast<float>(C);
  auto input_row = [&](std::ptrdiff_t n) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* g = dout + static_cast<std::size_t>(n) * C;
    const float s = rstd[n];
    // y = w*x*s with s = (mean(x^2)+eps)^-1/2, ds/dx_i = -s^3 x_i / C.
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int c = 0; c < C; ++c) dot += g[c] * (offset + weight[c]) * x[c];
    const float k = dot * s * s * s * inv_c;
    float* dx = dinp + static_cast<std::size_t>(n) * C;
#pragma omp simd
    for (int c = 0; c < C; ++c) dx[c] += s * (offset + weight[c]) * g[c] - k * x[c];
  };
  auto param_row = [&](std::ptrdiff_t n, float* pw) {
    const float* x = inp + static_cast<std::size_t>(n) * C;
    const float* g = dout + static_cast<std::size_t>(n) * C;
    const float s = rstd[n];
#pragma omp simd
    for (int c = 0; c < C; ++c) pw[c] += g[c] * (x[c] * s);
  };
  detail::row_blocks_backward(N, C, dinp != nullptr, dweight != nullptr, input_row, param_row,
                              [&](std::ptrdiff_t c, float sum) { dweight[c] += sum; });
}

}  // namespace saturn::cpu
