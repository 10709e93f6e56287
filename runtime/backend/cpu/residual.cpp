#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void residual_forward(float* out, const float* a, const float* b, std::size_t n) {
  const std::ptrdiff_t len = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (len >= detail::kParallelMin)
  for (std::ptrdiff_t i = 0; i < len; ++i) out[i] = a[i] + b[i];
}

void residual_backward(float* da, float* db, const float* dout, std::size_t n) {
  const std::ptrdiff_t len = static_cast<std::ptrdiff_t>(n);
  if (da != nullptr) {
#pragma omp parallel for simd schedule(static) if (len >= detail::kParallelMin)
    for (std::ptrdiff_t i = 0; i < len; ++i) da[i] += dout[i];
  }
  if (db != nullptr) {
#pragma omp parallel for simd schedule(static) if (len >= detail::kParallelMin)
    for (std::ptrdiff_t i = 0; i < len; ++i) db[i] += dout[i];
  }
}

void add_bias(float* out, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace saturn::cpu
