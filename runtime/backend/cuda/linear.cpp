// Linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16
// activations out, fp32 weight gradients accumulated in place (beta = 1).
//
// Row-major [R, K] data read as column-major is its transpose, so each row-major product
// Y = X · op(W) is issued as the column-major Yᵀ = op(W)ᵀ · Xᵀ.
#include <fmt/format.h>

#include <cstdint>

#include "runtime/backend/cuda/check.hpp"
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

struct Operand {
  const void* ptr;
  cudaDataType_t type;
  bool trans;          // column-major op
  int rows, cols, ld;  // of the stored (column-major) matrix
};

// D[m, n] = alpha · op(A)[m, k] · op(B)[k, n] + beta · D (+ bias[m] broadcast over columns).
void matmul(Context& ctx, void* D, cudaDataType_t d_type, int ldd, const Operand& A,
            const Operand& B, int m, int n, int k, float beta, const void* bias) {
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
    SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout, A.type,
                                                   static_cast<std::uint64_t>(A.rows),
                                                   static_cast<std::uint64_t>(A.cols), A.ld));
    SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout, B.type,
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
  // outᵀ[OC, N] = Wᵀ-as-needed · inpᵀ[C, N]
  const bool out_in = layout == WeightLayout::kOutIn;
  // W [OC, C] row-major is column-major C x OC (ld C): transpose it. W [C, OC] row-major is
  // column-major OC x C (ld OC): use as is.
  const Operand A{weight, CUDA_R_16BF, out_in, out_in ? C : OC, out_in ? OC : C, out_in ? C : OC};
  const Operand B{inp, CUDA_R_16BF, false, C, N, C};
  matmul(ctx, out, CUDA_R_16BF, OC, A, B, OC, N, C, 0.0f, bias);
}

void linear_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC,
                     WeightLayout layout) {
  if (N == 0) return;
  const bool out_in = layout == WeightLayout::kOutIn;
  if (dinp != nullptr) {
    // dinpᵀ[C, N] += W'[C, OC] · doutᵀ[OC, N], W' = W viewed as [OC, C] row-major, transposed.
    // kOutIn: W row-major [OC, C] = column-major C x OC (ld C), no transpose.
    // kInOut: W row-major [C, OC] = column-major OC x C (ld OC), transposed.
    const Operand A{weight,          CUDA_R_16BF,     !out_in,
                    out_in ? C : OC, out_in ? OC : C, out_in ? C : OC};
    const Operand B{dout, CUDA_R_16BF, false, OC, N, OC};
    matmul(ctx, dinp, CUDA_R_16BF, C, A, B, C, N, OC, 1.0f, nullptr);
  }
  if (dweight != nullptr) {
    if (out_in) {
      // dW[OC, C] row-major = column-major C x OC: inpᵀ-col[C, N] · dout-colᵀ[N, OC]
      const Operand A{inp, CUDA_R_16BF, false, C, N, C};
      const Operand B{dout, CUDA_R_16BF, true, OC, N, OC};
      matmul(ctx, dweight, CUDA_R_32F, C, A, B, C, OC, N, 1.0f, nullptr);
    } else {
      // dW[C, OC] row-major = column-major OC x C: dout-col[OC, N] · inp-colᵀ[N, C]
      const Operand A{dout, CUDA_R_16BF, false, OC, N, OC};
      const Operand B{inp, CUDA_R_16BF, true, C, N, C};
      matmul(ctx, dweight, CUDA_R_32F, OC, A, B, OC, C, N, 1.0f, nullptr);
    }
  }
  if (dbias != nullptr) column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace saturn::cuda
