// The emulator's linear layers: the backend's own GEMM plans (linear_plan.cpp) executed on the
// CPU the way cuBLASLt would (bf16 operands, fp32 accumulation, bias epilogue, bf16 or fp32
// output), inside the device arena, so the model code above them runs unchanged. This file
// replaces linear.cpp (the cuBLASLt calls) in the emulated build.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "runtime/backend/cuda/context.hpp"
#include "runtime/backend/cuda/linear_plan.hpp"
#include "runtime/backend/cuda/ops.hpp"
#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_stream.hpp"

namespace saturn::cuda {
namespace {

float element(const GemmOperand& o, int i, int j) {
  const int r = o.trans ? j : i, c = o.trans ? i : j;
  return __bfloat162float(static_cast<const bf16*>(o.ptr)[r + static_cast<std::size_t>(c) * o.ld]);
}

void require_device(const void* p, const char* what) {
  if (p != nullptr && !emu::is_device(p))
    throw std::runtime_error(std::string("CUDA emulator: linear layer: ") + what +
                             " is not device memory (an illegal address for cuBLASLt)");
}

template <typename D>
void run(const GemmPlan& p, const bf16* bias) {
  require_device(p.a.ptr, "operand A");
  require_device(p.b.ptr, "operand B");
  require_device(p.d, "the output");
  require_device(bias, "the bias");
  emu::DeviceAccess access;
  D* d = static_cast<D*>(p.d);
  for (int j = 0; j < p.n; ++j)
    for (int i = 0; i < p.m; ++i) {
      float s = 0.0f;
      for (int l = 0; l < p.k; ++l) s += element(p.a, i, l) * element(p.b, l, j);
      D& out = d[i + static_cast<std::size_t>(j) * p.ldd];
      float prev = 0.0f;
      if (p.beta != 0.0f) {
        if constexpr (std::is_same_v<D, float>) {
          prev = out;
        } else {
          prev = __bfloat162float(out);
        }
      }
      float v = s + p.beta * prev;
      if (bias != nullptr) v += __bfloat162float(bias[i]);
      if constexpr (std::is_same_v<D, float>) {
        out = v;
      } else {
        out = __float2bfloat16(v);
      }
    }
}

}  // namespace

void linear_forward(Context& ctx, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, int N, int C, int OC, WeightLayout layout) {
  emu::order_before(ctx.stream());  // after the deferred work queued on its stream
  run<bf16>(plan_linear_forward(out, inp, weight, N, C, OC, layout), bias);
}

void linear_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     WeightLayout layout) {
  emu::order_before(ctx.stream());
  if (dinp != nullptr)
    run<bf16>(plan_linear_backward_input(dinp, dout, weight, N, C, OC, layout), nullptr);
  if (dweight != nullptr)
    run<float>(plan_linear_backward_weight(dweight, dout, inp, N, C, OC, layout), nullptr);
  if (dbias != nullptr) column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace saturn::cuda
