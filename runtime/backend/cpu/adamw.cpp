#include <charconv>
#include <cmath>
#include <cstdlib>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {
namespace {

// The double a user most likely wrote for a float hyperparameter: the shortest decimal that
// rounds to it (0.999f -> 0.999, not 0.99900001287). PyTorch computes 1 - beta2, lr * wd and the
// bias corrections from the Python (double) values; widening the float directly would put
// 1 - beta2 off by 1.3e-5 relative.
double as_written(float x) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// Per-step scalars, rounded to float where PyTorch applies them to float tensors.
struct Step {
  float step_size;  // -lr / bias_correction1
  float bc2_sqrt;   // sqrt(bias_correction2)
  float decay;      // 1 - lr * weight_decay
  bool decayed;
  float w1;  // lerp weight 1 - beta1
  bool w1_small;
  float w1c;  // 1 - w1, the lerp's other form
  float b2, w2;
  float eps, grad_scale;
};

SATURN_CPU_MULTIVERSION void adamw_range(float* param, const float* grad, float* m, float* v,
                                         std::ptrdiff_t n, const Step& s) {
  const Step k = s;  // local copy: the compiler need not reload it through the pointers
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
// p += (-lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps); the scalars in double, as Python does.
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& p, float grad_scale) {
  const double lr = as_written(p.lr), beta1 = as_written(p.beta1), beta2 = as_written(p.beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, p.step);
  const double bias_correction2 = 1.0 - std::pow(beta2, p.step);
  Step s{};
  s.step_size = static_cast<float>(-lr / bias_correction1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.decay = static_cast<float>(1.0 - lr * as_written(p.weight_decay));
  s.decayed = p.weight_decay != 0.0f;
  s.w1 = static_cast<float>(1.0 - beta1);
  s.w1_small = std::fabs(s.w1) < 0.5f;  // torch's lerp switches formula at 0.5
  s.w1c = 1.0f - s.w1;
  s.b2 = p.beta2;
  s.w2 = static_cast<float>(1.0 - beta2);
  s.eps = p.eps;
  s.grad_scale = grad_scale;
  detail::parallel_ranges(static_cast<std::ptrdiff_t>(n), [&](std::ptrdiff_t b, std::ptrdiff_t e) {
    adamw_range(param + b, grad + b, m + b, v + b, e - b, s);
  });
}

}  // namespace saturn::cpu
