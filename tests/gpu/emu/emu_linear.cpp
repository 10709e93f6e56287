// cuBLASLt as the CPU emulator provides it (test only): the descriptor, layout, preference,
// heuristic and matmul calls that runtime/backend/cuda/linear.cpp makes, defined here instead of
// in libcublasLt, so the backend's real GEMM code (its descriptor cache, epilogues and
// alignment handling included) runs unchanged on the emulator. (The handle itself is
// emu_runtime.cpp's.)
//
// What is emulated, and nothing more (anything else is refused with CUBLAS_STATUS_NOT_SUPPORTED
// and a message on stderr, never ignored): compute type CUBLAS_COMPUTE_32F with fp32 scale;
// A and B bf16, C = D (same pointer and layout) bf16 or fp32; the epilogues DEFAULT, BIAS,
// GELU_AUX, GELU_AUX_BIAS, DGELU, BGRADA and BGRADB. Rounding points, as cuBLASLt documents
// them: products of bf16 operands accumulate in fp32 (here sequentially over k);
// v = alpha·acc + beta·C in fp32; the epilogue works on that fp32 value (bias, of D's type or
// the type set, added in fp32; GELU — tanh approximation — of the fp32 value; the aux matrix
// receives the GELU input rounded to D's type; DGELU multiplies the fp32 value by GELU' of the
// aux element); one rounding to D's type at the end. BGRADA/BGRADB write the fp32 sums over k
// of op(A)'s rows / op(B)'s columns, rounded to D's type (cuBLASLt: the bias gradient has the
// output's type), OVERWRITING the vector. An activation epilogue with beta != 0 is refused (its
// order against beta·C is not documented).
//
// Strictness beyond the values: the heuristic's algorithm remembers the problem it was chosen
// for (a fingerprint of the descriptor's non-pointer attributes and the layouts) and the
// alignments it was promised (the preference's minimum alignments of A, B, C, D; the bias and
// aux pointers' alignment at query time, which cuBLASLt reads for that purpose); cublasLtMatmul
// refuses an algorithm used for another problem or with less aligned pointers, as a GPU might
// fail or read wrongly. Every pointer must lie in device memory.
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_stream.hpp"

namespace emu {

namespace {
thread_local std::string g_lt_error = "no error";
}  // namespace

// The message of the last refused cuBLASLt call (emu_runtime.cpp's cublasLtGetStatusString).
const char* cublaslt_last_error() {
  return g_lt_error.c_str();
}

}  // namespace emu

namespace {

constexpr std::uint64_t kDescMagic = 0x5a7d65u, kLayoutMagic = 0x5a71a7u, kPrefMagic = 0x5a7f4eu,
                        kAlgoMagic = 0x5a7a1eu;

cublasStatus_t refuse(cublasStatus_t status, const std::string& why) {
  emu::g_lt_error = "CUDA emulator: cuBLASLt: " + why;
  std::fprintf(stderr, "%s\n", emu::g_lt_error.c_str());
  return status;
}

struct Desc {
  std::uint64_t magic = kDescMagic;
  cublasComputeType_t compute{};
  cudaDataType_t scale{};
  std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  std::int32_t bias_type = -1;  // -1: D's type
  const void* aux = nullptr;
  std::int64_t aux_ld = 0;
  std::int32_t aux_type = -1;  // -1: D's type
};
struct Layout {
  std::uint64_t magic = kLayoutMagic;
  cudaDataType_t type{};
  std::uint64_t rows = 0, cols = 0;
  std::int64_t ld = 0;
};
struct Pref {
  std::uint64_t magic = kPrefMagic;
  std::uint64_t workspace = 0;
  std::uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D (cuBLASLt's defaults)
};
// What cublasLtMatmulAlgo_t::data holds here.
struct Algo {
  std::uint64_t magic;
  std::uint64_t fingerprint;
  std::uint32_t align[6];  // A, B, C, D, bias, aux
};
static_assert(sizeof(Algo) <= sizeof(cublasLtMatmulAlgo_t));

Desc* desc_of(cublasLtMatmulDesc_t d) {
  auto* p = reinterpret_cast<Desc*>(d);
  return p != nullptr && p->magic == kDescMagic ? p : nullptr;
}
const Layout* layout_of(cublasLtMatrixLayout_t l) {
  const auto* p = reinterpret_cast<const Layout*>(l);
  return p != nullptr && p->magic == kLayoutMagic ? p : nullptr;
}

bool known_epilogue(std::uint32_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
      return true;
    default:
      return false;
  }
}
bool uses_bias(std::uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}
bool uses_aux(std::uint32_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
         e == CUBLASLT_EPILOGUE_DGELU;
}
bool is_bgrad(std::uint32_t e) {
  return e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB;
}

std::uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  return (h ^ v) * 0x100000001b3ull + (h >> 29);
}
std::uint64_t fingerprint(const Desc& d, const Layout& a, const Layout& b, const Layout& c) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t v :
       {std::uint64_t(d.compute), std::uint64_t(d.scale), std::uint64_t(d.transa),
        std::uint64_t(d.transb), std::uint64_t(d.epilogue), std::uint64_t(d.bias_type + 1),
        std::uint64_t(d.aux_ld), std::uint64_t(d.aux_type + 1)})
    h = mix(h, v);
  for (const Layout* l : {&a, &b, &c}) {
    h = mix(h, std::uint64_t(l->type));
    h = mix(h, l->rows);
    h = mix(h, l->cols);
    h = mix(h, std::uint64_t(l->ld));
  }
  return h;
}

// The problem's shape and rules; empty when it is one this emulator runs.
std::string check_problem(const Desc& d, const Layout& a, const Layout& b, const Layout& c) {
  if (d.compute != CUBLAS_COMPUTE_32F || d.scale != CUDA_R_32F)
    return "only CUBLAS_COMPUTE_32F with fp32 scale is emulated";
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF) return "only bf16 A and B are emulated";
  if (c.type != CUDA_R_16BF && c.type != CUDA_R_32F) return "only bf16 or fp32 C/D is emulated";
  const bool ta = d.transa == CUBLAS_OP_T, tb = d.transb == CUBLAS_OP_T;
  if ((d.transa != CUBLAS_OP_N && !ta) || (d.transb != CUBLAS_OP_N && !tb))
    return "only CUBLAS_OP_N and CUBLAS_OP_T are emulated";
  const std::uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const std::uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || c.rows != m || c.cols != n)
    return "shapes do not agree: op(A) " + std::to_string(m) + "x" + std::to_string(k) +
           ", op(B) " + std::to_string(kb) + "x" + std::to_string(n) + ", D " +
           std::to_string(c.rows) + "x" + std::to_string(c.cols);
  for (const Layout* l : {&a, &b, &c})
    if (l->ld < static_cast<std::int64_t>(std::max<std::uint64_t>(l->rows, 1)))
      return "a leading dimension is smaller than the rows of its matrix";
  if (!known_epilogue(d.epilogue))
    return "epilogue " + std::to_string(d.epilogue) + " is not emulated";
  const bool gelu = d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX ||
                    d.epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
                    d.epilogue == CUBLASLT_EPILOGUE_DGELU;
  if (gelu && c.type != CUDA_R_16BF) return "GELU epilogues are emulated with bf16 D only";
  if (uses_aux(d.epilogue)) {
    if (d.aux_type != -1 && d.aux_type != c.type)
      return "an aux type other than D's is not emulated";
    if (d.aux_ld % 8 != 0 || d.aux_ld < static_cast<std::int64_t>(m))
      return "the GELU aux leading dimension " + std::to_string(d.aux_ld) +
             " must be a multiple of 8 and at least D's rows (" + std::to_string(m) + ")";
  }
  if (uses_bias(d.epilogue) && d.bias_type != -1 && d.bias_type != CUDA_R_16BF &&
      d.bias_type != CUDA_R_32F)
    return "only bf16 or fp32 bias vectors are emulated";
  if (is_bgrad(d.epilogue) && d.bias_type != -1 && d.bias_type != c.type)
    return "a bias gradient has D's type (cuBLASLt); another bias type is not emulated";
  // cuBLASLt reduces A's rows only when A is not transposed and B's columns only when B is.
  if (d.epilogue == CUBLASLT_EPILOGUE_BGRADA && ta)
    return "BGRADA needs transa = N (cuBLASLt reduces A's rows only then)";
  if (d.epilogue == CUBLASLT_EPILOGUE_BGRADB && !tb)
    return "BGRADB needs transb = T (cuBLASLt reduces B's columns only then)";
  return {};
}

float read(const void* base, cudaDataType_t type, std::size_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(base)[i];
  return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
}
void write(void* base, cudaDataType_t type, std::size_t i, float v) {
  if (type == CUDA_R_32F)
    static_cast<float*>(base)[i] = v;
  else
    static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16(v);
}

// GELU, tanh approximation (GPT-2's), and its derivative, in fp32 as gelu.cu computes them.
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kKappa = 0.044715f;
float gelu(float x) {
  return 0.5f * x * (1.0f + std::tanh(kBeta * (x + kKappa * (x * x * x))));
}
float gelu_grad(float x) {
  const float x_sq = x * x;
  const float th = std::tanh(kBeta * (x + kKappa * (x_sq * x)));
  return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * (kBeta * (1.0f + 3.0f * kKappa * x_sq));
}

}  // namespace

extern "C" {

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  auto* d = new Desc;
  d->compute = compute;
  d->scale = scale;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  Desc* d = desc_of(desc);
  if (desc != nullptr && d == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescDestroy of something else");
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t bytes) {
  Desc* d = desc_of(desc);
  if (d == nullptr || buf == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute: bad descriptor or buffer");
  auto set = [&](auto& field) {
    if (bytes != sizeof(field))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatmulDescSetAttribute " + std::to_string(attr) +
                                                     ": size " + std::to_string(bytes) +
                                                     ", expected " + std::to_string(sizeof(field)));
    std::memcpy(&field, buf, bytes);
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return set(d->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return set(d->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      std::uint32_t e = 0;
      if (bytes != sizeof e) return set(e);  // the size error
      std::memcpy(&e, buf, sizeof e);
      if (!known_epilogue(e))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                      "epilogue " + std::to_string(e) + " is not emulated");
      d->epilogue = e;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set(d->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set(d->bias_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set(d->aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set(d->aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return set(d->aux_type);
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "matmul descriptor attribute " + std::to_string(attr) + " is not emulated");
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  auto* l = new Layout;
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  const Layout* l = layout_of(layout);
  if (layout != nullptr && l == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatrixLayoutDestroy of something else");
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Pref);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  auto* p = reinterpret_cast<Pref*>(pref);
  if (p != nullptr && p->magic != kPrefMagic)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatmulPreferenceDestroy of something else");
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t bytes) {
  auto* p = reinterpret_cast<Pref*>(pref);
  if (p == nullptr || p->magic != kPrefMagic || buf == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "MatmulPreferenceSetAttribute: bad preference");
  std::uint32_t* align = nullptr;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      if (bytes != sizeof p->workspace)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, "workspace preference size");
      std::memcpy(&p->workspace, buf, bytes);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      align = &p->align[0];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      align = &p->align[1];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      align = &p->align[2];
      break;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      align = &p->align[3];
      break;
    default:
      return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                    "preference attribute " + std::to_string(attr) + " is not emulated");
  }
  if (bytes != sizeof *align) return refuse(CUBLAS_STATUS_INVALID_VALUE, "alignment size");
  std::memcpy(align, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t adesc,
    cublasLtMatrixLayout_t bdesc, cublasLtMatrixLayout_t cdesc, cublasLtMatrixLayout_t ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t* results,
    int* found) {
  const Desc* d = desc_of(desc);
  const Layout *a = layout_of(adesc), *b = layout_of(bdesc), *c = layout_of(cdesc),
               *dl = layout_of(ddesc);
  const auto* p = reinterpret_cast<const Pref*>(pref);
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr ||
      p == nullptr || p->magic != kPrefMagic || requested < 1 || results == nullptr ||
      found == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "AlgoGetHeuristic: bad arguments");
  if (cdesc != ddesc && std::memcmp(c, dl, sizeof *c) != 0)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "C and D layouts that differ are not emulated");
  const std::string bad = check_problem(*d, *a, *b, *dl);
  if (!bad.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, bad);
  std::memset(results, 0, sizeof *results);
  Algo algo{kAlgoMagic, fingerprint(*d, *a, *b, *dl), {}};
  for (int i = 0; i < 4; ++i) algo.align[i] = p->align[i];
  algo.align[4] = d->bias != nullptr ? alignment(d->bias) : 256;
  algo.align[5] = d->aux != nullptr ? alignment(d->aux) : 256;
  std::memcpy(&results->algo, &algo, sizeof algo);
  results->state = CUBLAS_STATUS_SUCCESS;
  results->wavesCount = 1.0f;
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha_p,
                              const void* A, cublasLtMatrixLayout_t adesc, const void* B,
                              cublasLtMatrixLayout_t bdesc, const void* beta_p, const void* C,
                              cublasLtMatrixLayout_t cdesc, void* D, cublasLtMatrixLayout_t ddesc,
                              const cublasLtMatmulAlgo_t* algo_p, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  const Desc* d = desc_of(desc);
  const Layout *a = layout_of(adesc), *b = layout_of(bdesc), *c = layout_of(cdesc),
               *dl = layout_of(ddesc);
  if (d == nullptr || a == nullptr || b == nullptr || c == nullptr || dl == nullptr ||
      alpha_p == nullptr || beta_p == nullptr)
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "Matmul: bad descriptor, layout or scalar");
  if (C != D || (cdesc != ddesc && std::memcmp(c, dl, sizeof *c) != 0))
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "Matmul with C other than D is not emulated");
  const std::string bad = check_problem(*d, *a, *b, *dl);
  if (!bad.empty()) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, bad);
  if (algo_p == nullptr)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, "Matmul without an algorithm is not emulated");
  Algo algo{};
  std::memcpy(&algo, algo_p, sizeof algo);
  if (algo.magic != kAlgoMagic || algo.fingerprint != fingerprint(*d, *a, *b, *dl))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "Matmul given an algorithm the heuristic chose for another problem "
                  "(descriptor or layouts differ)");
  const void* ptrs[6] = {A, B, C, D, d->bias, d->aux};
  const char* names[6] = {"A", "B", "C", "D", "bias", "aux"};
  for (int i = 0; i < 6; ++i) {
    if (i >= 4 && !(i == 4 ? uses_bias(d->epilogue) : uses_aux(d->epilogue))) continue;
    if (ptrs[i] == nullptr || !emu::is_device(ptrs[i]))
      return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string("Matmul: ") + names[i] +
                                                     " is not device memory (an illegal "
                                                     "address for cuBLASLt)");
    // Kernels use vector accesses of up to 16 bytes where the promised alignment allows. The
    // epilogue's bias and aux have no alignment preference (cuBLASLt may refuse them below 16
    // bytes at run time): 16 bytes, whatever the heuristic was told.
    const std::uint32_t need = i >= 4 ? 16 : std::min<std::uint32_t>(algo.align[i], 16);
    if (alignment(ptrs[i]) < need)
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    std::string("Matmul: ") + names[i] + " is aligned to " +
                        std::to_string(alignment(ptrs[i])) +
                        " bytes, less than the algorithm was chosen for (" +
                        std::to_string(algo.align[i]) + ")");
  }
  if (workspace_bytes > 0 && !emu::is_device(workspace))
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "Matmul: workspace is not device memory");
  float alpha = 0, beta = 0;
  std::memcpy(&alpha, alpha_p, sizeof alpha);
  std::memcpy(&beta, beta_p, sizeof beta);
  const std::uint32_t e = d->epilogue;
  const bool activation = uses_aux(e);
  if (activation && beta != 0.0f)
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  "an activation epilogue with beta != 0 is not emulated (the order of beta·C "
                  "and the activation is not documented)");

  emu::order_before(stream);  // after the deferred work queued on its stream
  emu::DeviceAccess access;
  const bool ta = d->transa == CUBLAS_OP_T, tb = d->transb == CUBLAS_OP_T;
  const int m = static_cast<int>(dl->rows), n = static_cast<int>(dl->cols),
            k = static_cast<int>(ta ? a->rows : a->cols);
  // op(A) row by row and op(B) column by column in fp32 (exact: bf16 widens exactly), so each
  // output element is one contiguous dot product, summed in order over k.
  std::vector<float> a_rows(static_cast<std::size_t>(m) * k),
      b_cols(static_cast<std::size_t>(n) * k);
  for (int i = 0; i < m; ++i)
    for (int l = 0; l < k; ++l) {
      const std::size_t r = ta ? l : i, col = ta ? i : l;
      a_rows[static_cast<std::size_t>(i) * k + l] =
          read(A, a->type, r + col * static_cast<std::size_t>(a->ld));
    }
  for (int j = 0; j < n; ++j)
    for (int l = 0; l < k; ++l) {
      const std::size_t r = tb ? j : l, col = tb ? l : j;
      b_cols[static_cast<std::size_t>(j) * k + l] =
          read(B, b->type, r + col * static_cast<std::size_t>(b->ld));
    }
  const cudaDataType_t dtype = dl->type;
  const cudaDataType_t bias_type =
      d->bias_type == -1 ? dtype : static_cast<cudaDataType_t>(d->bias_type);
  const bool add_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const std::size_t ldd = static_cast<std::size_t>(dl->ld);
  const std::size_t aux_ld = static_cast<std::size_t>(d->aux_ld);
  void* aux = const_cast<void*>(d->aux);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      const float* ar = a_rows.data() + static_cast<std::size_t>(i) * k;
      const float* bc = b_cols.data() + static_cast<std::size_t>(j) * k;
      float acc = 0.0f;
      for (int l = 0; l < k; ++l) acc += ar[l] * bc[l];
      const std::size_t at = i + j * ldd;
      float v = alpha * acc;
      if (beta != 0.0f) v += beta * read(D, dtype, at);
      if (add_bias) v += read(d->bias, bias_type, static_cast<std::size_t>(i));
      if (e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        write(aux, dtype, i + j * aux_ld, v);
        v = gelu(v);
      } else if (e == CUBLASLT_EPILOGUE_DGELU) {
        v *= gelu_grad(read(d->aux, dtype, i + j * aux_ld));
      }
      write(D, dtype, at, v);
    }
  // Bias gradients: sums over k of op(A)'s rows (BGRADA, m of them) or op(B)'s columns (BGRADB,
  // n of them), overwriting the vector.
  if (is_bgrad(e)) {
    void* bias = const_cast<void*>(d->bias);
    const int len = e == CUBLASLT_EPILOGUE_BGRADA ? m : n;
    for (int x = 0; x < len; ++x) {
      float s = 0.0f;
      const float* v = (e == CUBLASLT_EPILOGUE_BGRADA ? a_rows : b_cols).data() +
                       static_cast<std::size_t>(x) * k;
      for (int l = 0; l < k; ++l) s += v[l];
      write(bias, bias_type, static_cast<std::size_t>(x), s);
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
