#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"
#include "runtime/core/error.hpp"

namespace saturn::cpu {
namespace {

// Rows of the score matrix are processed in blocks of this many: block r only multiplies
// against keys 0..end of the block, which skips most of the masked upper triangle (10/16 of
// the dense work at T = 256) while keeping each GEMM large enough for OpenBLAS to be efficient.
constexpr int kBlock = 64;

void check_params(int H, int Hkv, const AttentionParams& params) {
  if (Hkv < 1 || H % Hkv != 0)
    throw InputError("attention: " + std::to_string(Hkv) + " key/value heads do not divide " +
                     std::to_string(H) + " query heads");
  if (params.window < 0)
    throw InputError("attention: sliding window " + std::to_string(params.window) + " < 0");
  if ((params.positions == nullptr) != (params.segment_end == nullptr))
    throw InputError("attention: packed records need both positions and segment ends");
  if (!(params.scale > 0.0f) || !std::isfinite(params.scale) || !(params.softcap >= 0.0f) ||
      !std::isfinite(params.softcap))
    throw InputError("attention: score scale " + std::to_string(params.scale) + " and softcap " +
                     std::to_string(params.softcap) +
                     " (valid: a finite scale > 0, a finite softcap >= 0)");
}

// Gemma 2's soft-capping of a block of scaled scores [rows][cols] (row pitch ld), in place:
// s = softcap * tanh(s / softcap), in transformers' order of operations.
void softcap_rows(float* S, int ld, int rows, int cols, float softcap) {
  for (int r = 0; r < rows; ++r) {
    float* row = S + static_cast<std::size_t>(r) * ld;
    for (int j = 0; j < cols; ++j) row[j] = std::tanh(row[j] / softcap) * softcap;
  }
}

// The soft-cap's derivative on a block of score gradients [rows][cols] (pitch ld): dS *= 1 - t²
// with t = tanh(z / softcap), z the scaled scores before capping ([rows][cols], dense).
void softcap_backward_rows(float* D, int ld, const float* Z, int rows, int cols, float softcap) {
  for (int r = 0; r < rows; ++r) {
    float* d = D + static_cast<std::size_t>(r) * ld;
    const float* z = Z + static_cast<std::size_t>(r) * cols;
    for (int j = 0; j < cols; ++j) {
      const float t = std::tanh(z[j] / softcap);
      d[j] *= 1.0f - t * t;
    }
  }
}

// Rows r0..r1-1 of a [T, T] score matrix become causal softmax probabilities: row t over the
// keys it sees (attention_first_key(t) .. t: every earlier key, or those of a window or of its
// record), zeros elsewhere. The masked columns up to the next multiple of kLanes are set to
// -inf, so the vector loops run over whole chunks and exp turns them into exact zeros.
SATURN_CPU_MULTIVERSION void softmax_causal_rows(float* A, int T, int r0, int r1, int window,
                                                 const std::int32_t* pos) {
  constexpr int kLanes = detail::kLanes;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int t = r0; t < r1; ++t) {
    float* row = A + static_cast<std::size_t>(t) * T;
    const int end = std::min(T, (t + kLanes) / kLanes * kLanes);
    std::fill(row + t + 1, row + end, kMasked);
    std::fill(row, row + attention_first_key(t, window, pos), kMasked);
    const float maxv = detail::max_f32(row, end);
    const float inv = 1.0f / detail::exp_shift_sum<float>(row, row, end, maxv);
#pragma omp simd
    for (int j = 0; j < end; ++j) row[j] *= inv;
    std::fill(row + end, row + T, 0.0f);
  }
}

// Softmax backward on rows r0..r1-1, with the score scale folded in: D holds dP on entry in
// columns lo..r1-1 and dS = scale * P ⊙ (dP - rowsum(P ⊙ dP)) on exit, zero before lo (columns
// a window or a record excludes, never computed) and past the diagonal up to r1. Columns past the
// diagonal have P = 0, so the loops may run on to the next multiple of kLanes.
SATURN_CPU_MULTIVERSION void softmax_backward_rows(float* D, const float* P, int T, int r0, int r1,
                                                   int lo, float scale) {
  constexpr int kLanes = detail::kLanes;
  for (int t = r0; t < r1; ++t) {
    const float* p = P + static_cast<std::size_t>(t) * T + lo;
    float* d = D + static_cast<std::size_t>(t) * T;
    std::fill(d, d + lo, 0.0f);
    d += lo;
    const int end = std::min(r1, (t + kLanes) / kLanes * kLanes) - lo;
    const float dot = detail::dot_f32(p, d, end);
#pragma omp simd
    for (int j = 0; j < end; ++j) d[j] = scale * p[j] * (d[j] - dot);
    // The dK product reads the whole diagonal block, masked part included.
    std::fill(d + end, d + r1 - lo, 0.0f);
  }
}

// The first key any query of rows [r0, ...) sees: the first row's (the bound only grows with the
// row). Scores of earlier keys are never computed (the softmax masks them whatever they hold).
int first_key(int r0, int window, const std::int32_t* pos) {
  return attention_first_key(r0, window, pos);
}

// One past the last query that sees a key of columns [c0, c0 + cols): the last key's bound.
int last_query_end(int c0, int cols, int T, int window, const std::int32_t* end) {
  return attention_query_end(c0 + cols - 1, window, T, end);
}

// Row b's positions and segment ends of packed records (null without them).
const std::int32_t* row_of(const std::int32_t* per_token, int b, int T) {
  return per_token != nullptr ? per_token + static_cast<std::size_t>(b) * T : nullptr;
}

}  // namespace

void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int stride, int B, int T, int H, int Hkv, int hd,
                       const AttentionParams& params) {
  check_params(H, Hkv, params);
  const int C = H * hd, group = H / Hkv, window = params.window;
  const float scale = params.scale, softcap = params.softcap;
  const std::size_t TT = static_cast<std::size_t>(T) * T;
  // One (batch, head) pair per task; the GEMMs inside run single-threaded (OpenBLAS's OpenMP
  // build does not nest), which suits these small per-head products.
#pragma omp parallel for schedule(static)
  for (int bh = 0; bh < B * H; ++bh) {
    const int b = bh / H, h = bh % H;
    const std::size_t row_off = static_cast<std::size_t>(b) * T * stride;
    const float* Q = q + row_off + static_cast<std::size_t>(h) * hd;
    const std::size_t kv_off = row_off + static_cast<std::size_t>(h / group) * hd;
    const float* K = k + kv_off;
    const float* V = v + kv_off;
    float* O = out + static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hd;
    float* A = att + static_cast<std::size_t>(bh) * TT;
    const std::int32_t* pos = row_of(params.positions, b, T);
    for (int r0 = 0; r0 < T; r0 += kBlock) {
      const int r1 = std::min(T, r0 + kBlock);
      const int rows = r1 - r0;
      const int lo = first_key(r0, window, pos);
      float* Ab = A + static_cast<std::size_t>(r0) * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1 - lo, hd, scale,
                  Q + static_cast<std::size_t>(r0) * stride, stride,
                  K + static_cast<std::size_t>(lo) * stride, stride, 0.0f, Ab + lo, T);
      if (softcap > 0.0f) softcap_rows(Ab + lo, T, rows, r1 - lo, softcap);
      softmax_causal_rows(A, T, r0, r1, window, pos);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1 - lo, 1.0f, Ab + lo, T,
                  V + static_cast<std::size_t>(lo) * stride, stride, 0.0f,
                  O + static_cast<std::size_t>(r0) * C, C);
    }
  }
}

void attention_backward(float* dq, float* dk, float* dv, float* datt_scratch, const float* dout,
                        const float* q, const float* k, const float* v, const float* att,
                        int stride, int B, int T, int H, int Hkv, int hd,
                        const AttentionParams& params) {
  check_params(H, Hkv, params);
  const int C = H * hd, group = H / Hkv, window = params.window;
  const float scale = params.scale, softcap = params.softcap;
  const std::size_t TT = static_cast<std::size_t>(T) * T;
  const bool need_ds = dq != nullptr || dk != nullptr;
  // One (batch, key/value head) pair per task: the task owns that head's dk and dv rows and
  // adds its query heads' parts in head order, so the sums are race-free and deterministic.
#pragma omp parallel for schedule(static)
  for (int bg = 0; bg < B * Hkv; ++bg) {
    const int b = bg / Hkv, g = bg % Hkv;
    const std::size_t row_off = static_cast<std::size_t>(b) * T * stride;
    const std::size_t kv_off = row_off + static_cast<std::size_t>(g) * hd;
    const float* K = k + kv_off;
    const float* V = v + kv_off;
    const std::int32_t* pos = row_of(params.positions, b, T);
    const std::int32_t* seg_end = row_of(params.segment_end, b, T);
    // Soft-capping: the capped scores' tanh, recomputed per row block (the saved probabilities
    // do not give it back).
    std::vector<float> capped(softcap > 0.0f && need_ds ? static_cast<std::size_t>(kBlock) * T : 0);
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const std::size_t bh = static_cast<std::size_t>(b) * H + h;
      const std::size_t q_off = row_off + static_cast<std::size_t>(h) * hd;
      const float* Q = q + q_off;
      const float* dO =
          dout + static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hd;
      const float* P = att + bh * TT;
      float* D = datt_scratch + bh * TT;
      if (need_ds) {
        for (int r0 = 0; r0 < T; r0 += kBlock) {
          const int r1 = std::min(T, r0 + kBlock);
          const int rows = r1 - r0;
          const int lo = first_key(r0, window, pos);
          float* Db = D + static_cast<std::size_t>(r0) * T;
          // dP = dO · Vᵀ
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1 - lo, hd, 1.0f,
                      dO + static_cast<std::size_t>(r0) * C, C,
                      V + static_cast<std::size_t>(lo) * stride, stride, 0.0f, Db + lo, T);
          softmax_backward_rows(D, P, T, r0, r1, lo, scale);
          if (softcap > 0.0f) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, r1 - lo, hd, scale,
                        Q + static_cast<std::size_t>(r0) * stride, stride,
                        K + static_cast<std::size_t>(lo) * stride, stride, 0.0f, capped.data(),
                        r1 - lo);
            softcap_backward_rows(Db + lo, T, capped.data(), rows, r1 - lo, softcap);
          }
          if (dq != nullptr) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, r1 - lo, 1.0f, Db + lo,
                        T, K + static_cast<std::size_t>(lo) * stride, stride, 1.0f,
                        dq + q_off + static_cast<std::size_t>(r0) * stride, stride);
          }
        }
      }
      // Key/value gradients gather over queries t >= key j: column block c needs rows c0..T-1
      // (with a sliding window or packed records, only those up to last_query_end).
      for (int c0 = 0; c0 < T; c0 += kBlock) {
        const int cols = std::min(T, c0 + kBlock) - c0;
        const int n_rows = last_query_end(c0, cols, T, window, seg_end) - c0;
        const std::size_t off = static_cast<std::size_t>(c0) * T + c0;
        if (dv != nullptr) {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, n_rows, 1.0f, P + off, T,
                      dO + static_cast<std::size_t>(c0) * C, C, 1.0f,
                      dv + kv_off + static_cast<std::size_t>(c0) * stride, stride);
        }
        if (dk != nullptr) {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, hd, n_rows, 1.0f, D + off, T,
                      Q + static_cast<std::size_t>(c0) * stride, stride, 1.0f,
                      dk + kv_off + static_cast<std::size_t>(c0) * stride, stride);
        }
      }
    }
  }
}

}  // namespace saturn::cpu
