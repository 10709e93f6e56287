// How linear.cpp maps each row-major linear-layer product onto one column-major cuBLASLt GEMM,
// as pure functions, so the mapping (transposes, leading dimensions, shapes) is tested against
// the CPU backend on any machine (tests/gpu/test_gpu_ops.cpp, LinearPlan), GPU or not.
//
// Row-major [R, K] data read as column-major is its transpose, so a row-major product
// Y = X · op(W) is issued as the column-major Yᵀ = op(W)ᵀ · Xᵀ.
#pragma once

namespace saturn::cuda {

enum class WeightLayout;

struct GemmOperand {
  const void* ptr;
  bool trans;          // op() transposes the stored matrix
  int rows, cols, ld;  // the stored column-major matrix: element (i, j) at ptr[i + j·ld]
};

// D[m, n] (column-major, leading dimension ldd) = op(A)[m, k] · op(B)[k, n] + beta · D.
struct GemmPlan {
  GemmOperand a, b;
  void* d;
  int m, n, k, ldd;
  float beta;
};

// out[N, OC] = inp[N, C] · W (bias added by the caller's epilogue).
GemmPlan plan_linear_forward(void* out, const void* inp, const void* weight, int N, int C, int OC,
                             WeightLayout layout);
// dinp[N, C] += dout[N, OC] · W (W as [OC, C]).
GemmPlan plan_linear_backward_input(void* dinp, const void* dout, const void* weight, int N, int C,
                                    int OC, WeightLayout layout);
// dW += the weight gradient, in W's own layout.
GemmPlan plan_linear_backward_weight(void* dweight, const void* dout, const void* inp, int N, int C,
                                     int OC, WeightLayout layout);

// Which operand of plan_linear_backward_weight's GEMM is dout: its sum over the GEMM's k (the
// N rows) is the bias gradient, which cuBLASLt computes in the same GEMM as the BGRADA (dout is
// A: the bias runs along D's rows) or BGRADB (dout is B: along D's columns) epilogue.
enum class BiasGradOperand { kA, kB };
BiasGradOperand bias_gradient_operand(WeightLayout layout);

}  // namespace saturn::cuda
