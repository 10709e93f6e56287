// Linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16
// activations out, fp32 weight gradients accumulated in place (beta = 1). The row-major to
// column-major mapping is in linear_plan.hpp.
#include <fmt/format.h>

#include <cstdint>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/linear_plan.hpp"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

// Largest power of two (<= 256) dividing the address: cuBLASLt's heuristic must be told when a
// pointer is less aligned than its default assumption, or it may pick a kernel that needs more.
int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

// Runs one GemmPlan: A and B bf16, D of d_type, bias[m] (d_type) broadcast over columns.
void matmul(Context& ctx, const GemmPlan& plan, cudaDataType_t d_type, const void* bias) {
  const GemmOperand& A = plan.a;
  const GemmOperand& B = plan.b;
  void* D = plan.d;
  const int m = plan.m, n = plan.n, k = plan.k, ldd = plan.ldd;
  const float beta = plan.beta;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a_layout = nullptr, b_layout = nullptr, d_layout = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  auto cleanup = [&] {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d_layout) cublasLtMatrixLayoutDestroy(d_layout);
    if (b_layout) cublasLtMatrixLayoutDestroy(b_layout);
    if (a_layout) cublasLtMatrixLayoutDestroy(a_layout);
    if (op) cublasLtMatmulDescDestroy(op);
  };
  try {
    SATURN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = A.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = B.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
    SATURN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    SATURN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    if (bias != nullptr) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      SATURN_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
      const cudaDataType_t bias_type = d_type;
      SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof(bias_type)));
      SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                         &bias, sizeof(bias)));
    }
    SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout, CUDA_R_16BF,
                                                   static_cast<std::uint64_t>(A.rows),
                                                   static_cast<std::uint64_t>(A.cols), A.ld));
    SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout, CUDA_R_16BF,
                                                   static_cast<std::uint64_t>(B.rows),
                                                   static_cast<std::uint64_t>(B.cols), B.ld));
    SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_layout, d_type, static_cast<std::uint64_t>(m),
                                                   static_cast<std::uint64_t>(n), ldd));

    const int align_a = alignment(A.ptr), align_b = alignment(B.ptr), align_d = alignment(D),
              align_bias = bias != nullptr ? alignment(bias) : 256;
    const Context::AlgoKey key{m,           n,
                               k,           A.trans,
                               B.trans,     A.ld,
                               B.ld,        ldd,
                               d_type,      align_a * 1000 + align_b,
                               align_d,     bias != nullptr ? 1 + align_bias : 0,
                               beta != 0.0f};
    auto& cache = ctx.algo_cache();
    auto it = cache.find(key);
    if (it == cache.end()) {
      SATURN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
      const std::uint64_t ws = ctx.workspace_bytes();
      SATURN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
          pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
      const std::uint32_t aligns[4] = {
          static_cast<std::uint32_t>(align_a), static_cast<std::uint32_t>(align_b),
          static_cast<std::uint32_t>(align_d), static_cast<std::uint32_t>(align_d)};
      const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
      for (int i = 0; i < 4; ++i)
        SATURN_CUBLAS_CHECK(
            cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof(aligns[i])));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      SATURN_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(ctx.lt(), op, a_layout, b_layout, d_layout,
                                                         d_layout, pref, 1, &result, &found));
      if (found == 0)
        throw CudaError(
            fmt::format("cuBLASLt found no algorithm for a {}x{}x{} product (transa {}, transb {}, "
                        "lda {}, ldb {}, ldd {}, alignments {}/{}/{} bytes, bias {})",
                        m, n, k, A.trans, B.trans, A.ld, B.ld, ldd, align_a, align_b, align_d,
                        bias != nullptr));
      it = cache.emplace(key, result).first;
    }
    const float alpha = 1.0f;
    SATURN_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), op, &alpha, A.ptr, a_layout, B.ptr, b_layout,
                                       &beta, D, d_layout, D, d_layout, &it->second.algo,
                                       ctx.workspace(), ctx.workspace_bytes(), ctx.stream()));
  } catch (...) {
    cleanup();
    throw;
  }
  cleanup();
}

}  // namespace

void linear_forward(Context& ctx, bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                    int N, int C, int OC, WeightLayout layout) {
  if (N == 0 || OC == 0) return;
  matmul(ctx, plan_linear_forward(out, inp, weight, N, C, OC, layout), CUDA_R_16BF, bias);
}

void linear_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     WeightLayout layout) {
  if (N == 0) return;
  if (dinp != nullptr)
    matmul(ctx, plan_linear_backward_input(dinp, dout, weight, N, C, OC, layout), CUDA_R_16BF,
           nullptr);
  if (dweight != nullptr)
    matmul(ctx, plan_linear_backward_weight(dweight, dout, inp, N, C, OC, layout), CUDA_R_32F,
           nullptr);
  if (dbias != nullptr) column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace saturn::cuda
