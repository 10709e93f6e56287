#include "runtime/backend/cuda/linear_plan.hpp"

#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {

GemmPlan plan_linear_forward(void* out, const void* inp, const void* weight, int N, int C, int OC,
                             WeightLayout layout) {
  // outᵀ[OC, N] = W' · inpᵀ[C, N]. W [OC, C] row-major (kOutIn) is column-major C x OC with
  // ld C: transposed. W [C, OC] row-major (kInOut) is column-major OC x C with ld OC: as is.
  const bool out_in = layout == WeightLayout::kOutIn;
  GemmPlan p{};
  p.a = {weight, out_in, out_in ? C : OC, out_in ? OC : C, out_in ? C : OC};
  p.b = {inp, false, C, N, C};
  p.d = out;
  p.m = OC;
  p.n = N;
  p.k = C;
  p.ldd = OC;
  p.beta = 0.0f;
  return p;
}

GemmPlan plan_linear_backward_input(void* dinp, const void* dout, const void* weight, int N, int C,
                                    int OC, WeightLayout layout) {
  // dinpᵀ[C, N] += W''[C, OC] · doutᵀ[OC, N], W'' the transpose of W viewed as [OC, C]:
  // kOutIn's column-major C x OC as is; kInOut's column-major OC x C transposed.
  const bool out_in = layout == WeightLayout::kOutIn;
  GemmPlan p{};
  p.a = {weight, !out_in, out_in ? C : OC, out_in ? OC : C, out_in ? C : OC};
  p.b = {dout, false, OC, N, OC};
  p.d = dinp;
  p.m = C;
  p.n = N;
  p.k = OC;
  p.ldd = C;
  p.beta = 1.0f;
  return p;
}

GemmPlan plan_linear_backward_weight(void* dweight, const void* dout, const void* inp, int N, int C,
                                     int OC, WeightLayout layout) {
  GemmPlan p{};
  p.d = dweight;
  p.k = N;
  p.beta = 1.0f;
  if (layout == WeightLayout::kOutIn) {
    // dW[OC, C] row-major = column-major C x OC: inp-col[C, N] · dout-colᵀ[N, OC].
    p.a = {inp, false, C, N, C};
    p.b = {dout, true, OC, N, OC};
    p.m = C;
    p.n = OC;
    p.ldd = C;
  } else {
    // dW[C, OC] row-major = column-major OC x C: dout-col[OC, N] · inp-colᵀ[N, C].
    p.a = {dout, false, OC, N, OC};
    p.b = {inp, true, C, N, C};
    p.m = OC;
    p.n = C;
    p.ldd = OC;
  }
  return p;
}

BiasGradOperand bias_gradient_operand(WeightLayout layout) {
  return layout == WeightLayout::kOutIn ? BiasGradOperand::kB : BiasGradOperand::kA;
}

}  // namespace saturn::cuda
