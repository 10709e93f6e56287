#include <cmath>
#include <cstddef>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/core/adamw_step.hpp"

namespace saturn::cpu {
namespace {

SATURN_CPU_MULTIVERSION void adamw_range(float* param, const float* grad, float* m, float* v,
                                         std::ptrdiff_t n, const AdamWScalars& s) {
  const AdamWScalars k = s;  // local copy: the compiler need not reload it through the pointers
#pragma omp simd
  for (std::ptrdiff_t i = 0; i < n; ++i) {
    const float g = grad[i] * k.grad_scale;
    float pi = param[i];
    if (k.decayed) pi *= k.decay;
    const float mi = m[i];
    const float mn = k.w1_small ? mi + k.w1 * (g - mi) : g - (g - mi) * k.w1c;
    const float vn = v[i] * k.b2 + k.w2 * g * g;
    const float denom = std::sqrt(vn) / k.bc2_sqrt + k.eps;
    param[i] = pi + k.step_size * mn / denom;
    m[i] = mn;
    v[i] = vn;
  }
}

}  // namespace

// Follows torch.optim.AdamW (single-tensor path) operation by operation: decoupled decay first,
// m.lerp_(g, 1 - beta1), v = v * beta2 + (1 - beta2) * g * g, then
// p += (-lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps); the scalars from adamw_scalars.
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& p, float grad_scale) {
  const AdamWScalars s = adamw_scalars(p, grad_scale);
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    adamw_range(param + b, grad + b, m + b, v + b, e - b, s);
  });
}

}  // namespace saturn::cpu
