// Linear layers through cuBLASLt: bf16 operands, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16
// activations out, fp32 weight gradients accumulated in place (beta = 1). The row-major to
// column-major mapping is in linear_plan.hpp.
//
// Each distinct problem (shape, transposes, leading dimensions, output type, epilogue,
// alignments, beta == 0) gets its descriptors and algorithm built once and kept in the Context
// (Context::Gemm); a call then only sets the bias/aux pointers on the cached descriptor and
// runs. Epilogues used: BIAS (forward bias), GELU_AUX(_BIAS) (the MLP's fc: bias + GELU, the
// pre-activation kept in the aux buffer), DGELU (the fc_proj input gradient times GELU' of that
// pre-activation) and BGRADA/BGRADB (bias gradients from the weight-gradient GEMM).
#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/linear_plan.hpp"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

// Largest power of two (<= 16) dividing the address: cuBLASLt's heuristic must be told when a
// pointer is less aligned than its default assumption (256 B), or it may pick a kernel that needs
// more. Capped at 16 B, which is what its vectorised and TMA loads need: with the real alignment
// up to 256 B, a tensor 256-B aligned in one configuration and 128-B aligned in another (a
// pipeline stage's weights start at its first group) could get another algorithm, and so other
// bits, breaking reproducible mode's same-gradient-in-every-configuration rule.
int alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  int align = 16;
  while (align > 1 && a % static_cast<std::uintptr_t>(align) != 0) align /= 2;
  return align;
}

// cuBLASLt has no preference attribute for the epilogue's bias and aux pointers, and its
// epilogues may read and write them 16 bytes at a time: below that a matmul can be refused at
// run time. A bias or aux that is not 16-byte aligned (a bias at an odd offset of a flat
// parameter buffer) is therefore applied by the backend's own kernels instead of an epilogue.
bool epilogue_aligned(const void* p) {
  return p == nullptr || alignment(p) >= 16;
}

enum class Epilogue { kDefault, kBias, kGeluAux, kDGelu, kBGradA, kBGradB };

struct EpilogueArgs {
  Epilogue kind = Epilogue::kDefault;
  // kBias, kGeluAux (optional): the bias, of D's type. kBGradA/B: the bias gradient, written
  // (overwritten) in D's type.
  const void* bias = nullptr;
  // kGeluAux: the GELU input (pre-activation), written; kDGelu: that input, read. D's type and
  // shape, leading dimension aux_ld.
  const void* aux = nullptr;
  int aux_ld = 0;
};

bool uses_bias(const EpilogueArgs& e) {
  return e.kind == Epilogue::kBias || e.kind == Epilogue::kBGradA || e.kind == Epilogue::kBGradB ||
         (e.kind == Epilogue::kGeluAux && e.bias != nullptr);
}
bool uses_aux(const EpilogueArgs& e) {
  return e.kind == Epilogue::kGeluAux || e.kind == Epilogue::kDGelu;
}

cublasLtEpilogue_t lt_epilogue(const EpilogueArgs& e) {
  switch (e.kind) {
    case Epilogue::kDefault:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAux:
      return e.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case Epilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case Epilogue::kBGradA:
      return CUBLASLT_EPILOGUE_BGRADA;
    case Epilogue::kBGradB:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  throw Error("linear.cpp: unknown epilogue");
}

const char* epilogue_name(const EpilogueArgs& e) {
  switch (lt_epilogue(e)) {
    case CUBLASLT_EPILOGUE_BIAS:
      return "BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
      return "GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX:
      return "GELU_AUX";
    case CUBLASLT_EPILOGUE_DGELU:
      return "DGELU";
    case CUBLASLT_EPILOGUE_BGRADA:
      return "BGRADA";
    case CUBLASLT_EPILOGUE_BGRADB:
      return "BGRADB";
    default:
      return "DEFAULT";
  }
}

struct Alignments {
  int a, b, d, bias, aux;
};

std::string describe(const GemmPlan& p, cudaDataType_t d_type, const EpilogueArgs& e,
                     const Alignments& al) {
  return fmt::format(
      "{}x{}x{} GEMM (m x n x k; transa {}, transb {}, lda {}, ldb {}, ldd {}, D {}, epilogue {}"
      "{}, beta {}, alignments A/B/D/bias/aux {}/{}/{}/{}/{} bytes)",
      p.m, p.n, p.k, p.a.trans, p.b.trans, p.a.ld, p.b.ld, p.ldd,
      d_type == CUDA_R_32F ? "fp32" : "bf16", epilogue_name(e),
      uses_aux(e) ? fmt::format(" aux ld {}", e.aux_ld) : std::string(), p.beta, al.a, al.b, al.d,
      al.bias, al.aux);
}

// Builds the descriptors of one problem and asks the heuristic for its algorithm; the bias and
// aux pointers are set too, since the heuristic reads their alignment.
std::unique_ptr<Context::Gemm> build(Context& ctx, const GemmPlan& plan, cudaDataType_t d_type,
                                     const EpilogueArgs& e, const Alignments& al) {
  auto g = std::make_unique<Context::Gemm>();
  SATURN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&g->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = plan.a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = plan.b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  SATURN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  SATURN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const cublasLtEpilogue_t epi = lt_epilogue(e);
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    SATURN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (uses_bias(e)) {
    // A forward bias is bf16 like D; a bias gradient takes D's type (fp32) by cuBLASLt's rule,
    // so its type is left at the default.
    if (e.kind == Epilogue::kBias || e.kind == Epilogue::kGeluAux) {
      const cudaDataType_t bias_type = d_type;
      SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                         &bias_type, sizeof(bias_type)));
    }
    SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                       &e.bias, sizeof(e.bias)));
  }
  if (uses_aux(e)) {
    const std::int64_t ld = e.aux_ld;
    SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                                       &ld, sizeof(ld)));
    SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
  }
  SATURN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&g->a, CUDA_R_16BF, static_cast<std::uint64_t>(plan.a.rows),
                                 static_cast<std::uint64_t>(plan.a.cols), plan.a.ld));
  SATURN_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&g->b, CUDA_R_16BF, static_cast<std::uint64_t>(plan.b.rows),
                                 static_cast<std::uint64_t>(plan.b.cols), plan.b.ld));
  SATURN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&g->d, d_type, static_cast<std::uint64_t>(plan.m),
                                                 static_cast<std::uint64_t>(plan.n), plan.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  SATURN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  try {
    const std::uint64_t ws = ctx.workspace_bytes();
    SATURN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    const std::uint32_t aligns[4] = {
        static_cast<std::uint32_t>(al.a), static_cast<std::uint32_t>(al.b),
        static_cast<std::uint32_t>(al.d), static_cast<std::uint32_t>(al.d)};
    const cublasLtMatmulPreferenceAttributes_t attrs[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      SATURN_CUBLAS_CHECK(
          cublasLtMatmulPreferenceSetAttribute(pref, attrs[i], &aligns[i], sizeof(aligns[i])));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(ctx.lt(), g->op, g->a, g->b, g->d,
                                                                 g->d, pref, 1, &result, &found);
    // NOT_SUPPORTED means "no heuristic function available for current configuration"
    // (cublasLt.h): the same answer as found == 0, which callers fall back from or report.
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) SATURN_CUBLAS_CHECK(status);
    g->algo_found =
        status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (g->algo_found) g->algo = result.algo;
  } catch (...) {
    cublasLtMatmulPreferenceDestroy(pref);
    throw;
  }
  SATURN_CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  return g;
}

// Runs one GemmPlan: A and B bf16, D of d_type, with epilogue `e`. Returns false, having done
// nothing, when cuBLASLt offers no algorithm and `required` is false (the bias-gradient
// epilogues, whose callers then reduce with a kernel); throws otherwise.
bool matmul(Context& ctx, const GemmPlan& plan, cudaDataType_t d_type, const EpilogueArgs& e,
            bool required = true) {
  const Alignments al{alignment(plan.a.ptr), alignment(plan.b.ptr), alignment(plan.d),
                      uses_bias(e) ? alignment(e.bias) : 0, uses_aux(e) ? alignment(e.aux) : 0};
  const Context::GemmKey key{plan.m,
                             plan.n,
                             plan.k,
                             plan.a.trans,
                             plan.b.trans,
                             plan.a.ld,
                             plan.b.ld,
                             plan.ldd,
                             d_type,
                             static_cast<int>(e.kind),
                             e.aux_ld,
                             al.a,
                             al.b,
                             al.d,
                             al.bias,
                             al.aux,
                             plan.beta != 0.0f,
                             e.bias != nullptr};
  Context::Gemm* g = nullptr;
  try {
    auto& cache = ctx.gemm_cache();
    auto it = cache.find(key);
    if (it == cache.end()) {
      it = cache.emplace(key, build(ctx, plan, d_type, e, al)).first;
      if (!it->second->algo_found && !required)
        std::fprintf(stderr,
                     "saturn: cuBLASLt offers no algorithm for the %s; this problem's bias "
                     "gradient is computed by the column-sum kernel instead\n",
                     describe(plan, d_type, e, al).c_str());
    }
    g = it->second.get();
    if (g->algo_found) {
      if (uses_bias(e))
        SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(g->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                           &e.bias, sizeof(e.bias)));
      if (uses_aux(e))
        SATURN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
            g->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
      const float alpha = 1.0f;
      SATURN_CUBLAS_CHECK(cublasLtMatmul(ctx.lt(), g->op, &alpha, plan.a.ptr, g->a, plan.b.ptr,
                                         g->b, &plan.beta, plan.d, g->d, plan.d, g->d, &g->algo,
                                         ctx.workspace(), ctx.workspace_bytes(), ctx.stream()));
    }
  } catch (const CudaError& err) {
    throw CudaError(fmt::format("{} [in a {}]", err.what(), describe(plan, d_type, e, al)));
  }
  if (g->algo_found) return true;
  if (!required) return false;
  throw CudaError(
      fmt::format("cuBLASLt found no algorithm for a {}", describe(plan, d_type, e, al)));
}

// dweight += the weight gradient and dbias += the column sums of dout. With both, the bias
// gradient comes out of the weight-gradient GEMM (BGRADA/BGRADB epilogue, reading dout once
// for both). That epilogue OVERWRITES its vector while dbias accumulates across micro-batches,
// so it writes scratch that is then added: OC floats instead of a second pass over N·OC.
void weight_and_bias_gradients(Context& ctx, float* dweight, float* dbias, const bf16* dout,
                               const bf16* inp, int N, int C, int OC, WeightLayout layout) {
  if (dweight == nullptr) {
    if (dbias != nullptr) column_sum_accumulate(ctx, dbias, dout, N, OC);
    return;
  }
  const GemmPlan plan = plan_linear_backward_weight(dweight, dout, inp, N, C, OC, layout);
  if (dbias == nullptr || OC == 0) {
    matmul(ctx, plan, CUDA_R_32F, {});
    return;
  }
  // Freed when this returns; the allocator hands it out again only to later work on the same
  // stream, after the add has read it.
  Buffer<float> scratch(ctx.pool(), static_cast<std::size_t>(OC), "bias gradient scratch");
  EpilogueArgs e;
  e.kind =
      bias_gradient_operand(layout) == BiasGradOperand::kA ? Epilogue::kBGradA : Epilogue::kBGradB;
  e.bias = scratch.data();
  if (matmul(ctx, plan, CUDA_R_32F, e, /*required=*/false)) {
    add(ctx, dbias, scratch.data(), static_cast<std::size_t>(OC));
    return;
  }
  matmul(ctx, plan, CUDA_R_32F, {});
  column_sum_accumulate(ctx, dbias, dout, N, OC);
}

}  // namespace

void linear_forward(Context& ctx, bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                    int N, int C, int OC, WeightLayout layout) {
  if (N == 0 || OC == 0) return;
  EpilogueArgs e;
  const bool fused_bias = bias != nullptr && epilogue_aligned(bias);
  if (fused_bias) {
    e.kind = Epilogue::kBias;
    e.bias = bias;
  }
  matmul(ctx, plan_linear_forward(out, inp, weight, N, C, OC, layout), CUDA_R_16BF, e);
  if (bias != nullptr && !fused_bias) add_bias(ctx, out, bias, N, OC);
}

void linear_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC, WeightLayout layout,
                     GradWrite dinp_write) {
  if (N == 0) return;
  if (dinp != nullptr && C > 0) {
    if (OC == 0 && dinp_write == GradWrite::kOverwrite) {
      // An empty product is zero; a GEMM with k = 0 is not asked to say so.
      SATURN_CUDA_CHECK(
          cudaMemsetAsync(dinp, 0, static_cast<std::size_t>(N) * C * sizeof(bf16), ctx.stream()));
    } else if (OC > 0) {
      GemmPlan plan = plan_linear_backward_input(dinp, dout, weight, N, C, OC, layout);
      if (dinp_write == GradWrite::kOverwrite) plan.beta = 0.0f;
      matmul(ctx, plan, CUDA_R_16BF, {});
    }
  }
  weight_and_bias_gradients(ctx, dweight, dbias, dout, inp, N, C, OC, layout);
}

void linear_gelu_forward(Context& ctx, bf16* out, bf16* pre, const bf16* inp, const bf16* weight,
                         const bf16* bias, int N, int C, int OC, WeightLayout layout) {
  if (N == 0 || OC == 0) return;
  if (OC % 8 != 0 || !epilogue_aligned(bias) || !epilogue_aligned(pre)) {
    // cuBLASLt's aux buffer needs a leading dimension divisible by 8 (ops.hpp), and the
    // epilogue's pointers 16-byte alignment.
    linear_forward(ctx, pre, inp, weight, bias, N, C, OC, layout);
    gelu_forward(ctx, out, pre, static_cast<std::size_t>(N) * OC);
    return;
  }
  EpilogueArgs e;
  e.kind = Epilogue::kGeluAux;
  e.bias = bias;
  e.aux = pre;
  e.aux_ld = OC;  // pre is [N, OC] row-major: column-major OC x N, like D
  matmul(ctx, plan_linear_forward(out, inp, weight, N, C, OC, layout), CUDA_R_16BF, e);
}

void linear_dgelu_backward(Context& ctx, bf16* dpre, bf16* dact_scratch, float* dweight,
                           float* dbias, const bf16* dout, const bf16* inp, const bf16* pre,
                           const bf16* weight, int N, int C, int OC, WeightLayout layout) {
  if (N == 0 || C == 0) return;
  if (C % 8 != 0 || OC == 0 || !epilogue_aligned(pre)) {
    if (dact_scratch == nullptr)
      throw Error(
          fmt::format("linear_dgelu_backward: C = {} is not a multiple of 8 (or the "
                      "pre-activation is not 16-byte aligned), so the GELU gradient runs as its "
                      "own kernel and needs dact_scratch",
                      C));
    linear_backward(ctx, dact_scratch, nullptr, nullptr, dout, inp, weight, N, C, OC, layout,
                    GradWrite::kOverwrite);
    const std::size_t n = static_cast<std::size_t>(N) * C;
    SATURN_CUDA_CHECK(cudaMemsetAsync(dpre, 0, n * sizeof(bf16), ctx.stream()));
    gelu_backward(ctx, dpre, pre, dact_scratch, n);
  } else {
    // dpreᵀ = (W'' · doutᵀ) ⊙ GELU'(preᵀ): the input-gradient plan with beta = 0 and DGELU,
    // whose aux (pre, [N, C] row-major) has D's shape and leading dimension C.
    GemmPlan plan = plan_linear_backward_input(dpre, dout, weight, N, C, OC, layout);
    plan.beta = 0.0f;
    EpilogueArgs e;
    e.kind = Epilogue::kDGelu;
    e.aux = pre;
    e.aux_ld = C;
    matmul(ctx, plan, CUDA_R_16BF, e);
  }
  weight_and_bias_gradients(ctx, dweight, dbias, dout, inp, N, C, OC, layout);
}

}  // namespace saturn::cuda
