#include <charconv>
#include <cmath>
#include <cstdlib>

#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// The per-step scalars, computed on the host exactly as the CPU backend does (cpu/adamw.cpp):
// the double a user wrote for each float hyperparameter, then rounded to float where PyTorch
// applies them to float tensors.
struct Step {
  float step_size;  // -lr / bias_correction1
  float bc2_sqrt;   // sqrt(bias_correction2)
  float decay;      // 1 - lr * weight_decay
  int decayed;
  float w1;  // lerp weight 1 - beta1
  int w1_small;
  float w1c;
  float b2, w2;
  float eps, grad_scale;
};

double as_written(float x) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf) - 1, x);
  *res.ptr = '\0';
  return std::strtod(buf, nullptr);
}

__global__ void adamw_kernel(float* param, bf16* param_bf16, const float* grad, float* m, float* v,
                             std::size_t n, Step k) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float g = grad[i] * k.grad_scale;
    float pi = param[i];
    if (k.decayed) pi *= k.decay;
    const float mi = m[i];
    const float mn = k.w1_small ? mi + k.w1 * (g - mi) : g - (g - mi) * k.w1c;
    const float vn = v[i] * k.b2 + k.w2 * g * g;
    // __fsqrt_rn / __fdiv_rn: IEEE-rounded like the CPU's, whatever the compile flags.
    const float denom = __fdiv_rn(__fsqrt_rn(vn), k.bc2_sqrt) + k.eps;
    const float np = pi + __fdiv_rn(k.step_size * mn, denom);
    param[i] = np;
    m[i] = mn;
    v[i] = vn;
    if (param_bf16 != nullptr) param_bf16[i] = to_bf(np);
  }
}

}  // namespace

void adamw_update(Context& ctx, float* param, bf16* param_bf16, const float* grad, float* m,
                  float* v, std::size_t n, const AdamWParams& p, float grad_scale) {
  if (n == 0) return;
  const double lr = as_written(p.lr), beta1 = as_written(p.beta1), beta2 = as_written(p.beta2);
  const double bias_correction1 = 1.0 - std::pow(beta1, p.step);
  const double bias_correction2 = 1.0 - std::pow(beta2, p.step);
  Step s{};
  s.step_size = static_cast<float>(-lr / bias_correction1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.decay = static_cast<float>(1.0 - lr * as_written(p.weight_decay));
  s.decayed = p.weight_decay != 0.0f;
  s.w1 = static_cast<float>(1.0 - beta1);
  s.w1_small = std::fabs(s.w1) < 0.5f;
  s.w1c = 1.0f - s.w1;
  s.b2 = p.beta2;
  s.w2 = static_cast<float>(1.0 - beta2);
  s.eps = p.eps;
  s.grad_scale = grad_scale;
  adamw_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(param, param_bf16, grad, m, v, n, s);
  SATURN_CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace saturn::cuda
