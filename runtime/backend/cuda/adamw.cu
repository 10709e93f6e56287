#include <cstddef>

#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/core/adamw_step.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// The per-step scalars come from adamw_scalars (core/adamw_step.hpp) on the host, the same
// values the CPU backend's kernel takes.
__global__ void adamw_kernel(float* param, bf16* param_bf16, const float* grad, float* m, float* v,
                             std::size_t n, AdamWScalars k) {
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
  const AdamWScalars s = adamw_scalars(p, grad_scale);
  adamw_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(param, param_bf16, grad, m, v, n, s);
  SATURN_CUDA_LAUNCH_CHECK("adamw_kernel");
}

}  // namespace saturn::cuda
