// The scalars of one AdamW update, as torch.optim.AdamW takes them (AdamWStep: one type for the
// optimizer, the devices and both backends' kernels), and the one derivation of what a kernel
// applies per element from them (adamw_scalars), which every backend calls on the host.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace saturn {

struct AdamWStep {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0;  // decoupled; 0 for tensors that are not decayed
  int step = 1;            // 1-based, for bias correction
};

// Per-step scalars of the kernels, rounded to float where PyTorch applies them to float tensors.
// A kernel computes, per element: g = grad * grad_scale; p *= decay (when decayed);
// m = lerp(m, g, w1) in torch's two forms; v = v * b2 + w2 * g * g;
// p += step_size * m / (sqrt(v) / bc2_sqrt + eps).
struct AdamWScalars {
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

namespace adamw_detail {

// The double a user most likely wrote for a float hyperparameter: the shortest decimal that
// rounds to it (0.999f -> 0.999, not 0.99900001287). PyTorch computes 1 - beta2, lr * wd and the
// bias corrections from the Python (double) values; widening the float directly would put
// 1 - beta2 off by 1.3e-5 relative.
static inline double as_written(float x) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

}  // namespace adamw_detail

// Follows torch.optim.AdamW (single-tensor path): the scalars in double, as Python computes
// them, each rounded to float once; the CPU and CUDA kernels take the same values.
// static: each translation unit keeps its own copy, compiled under its own flags (the CPU
// backend's -ffp-contract=off), so no backend's numbers depend on which copy the linker keeps.
static inline AdamWScalars adamw_scalars(const AdamWStep& p, float grad_scale) {
  using adamw_detail::as_written;
  const double lr = as_written(p.lr), beta1 = as_written(p.beta1), beta2 = as_written(p.beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, p.step);
  const double bias_correction2 = 1.0 - std::pow(beta2, p.step);
  AdamWScalars s{};
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
  return s;
}

}  // namespace saturn
