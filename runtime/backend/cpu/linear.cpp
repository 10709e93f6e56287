#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {
namespace {

// The fixed grid's tiles: start from the whole output and halve the longer side (to a multiple
// of 16) until there are kGridTiles tiles or both sides are at most kMinTileSide. Each tile packs
// its own panels of A and B, so large tiles keep that repacking small (about (1/m + 1/n) / 2
// floats per multiply-add), while kGridTiles tiles still give as many threads work. A function
// of the product's shape only, never of the thread count.
constexpr long kGridTiles = 16;
constexpr int kMinTileSide = 128;

struct Tile {
  int rows, cols;
};

Tile grid_tile(int M, int N) {
  Tile t{M, N};
  const auto tiles = [&] {
    return static_cast<long>((M + t.rows - 1) / t.rows) * ((N + t.cols - 1) / t.cols);
  };
  const auto half = [](int side) { return std::max(kMinTileSide, (side / 2 + 15) / 16 * 16); };
  while (tiles() < kGridTiles && (t.rows > kMinTileSide || t.cols > kMinTileSide)) {
    if (t.rows >= t.cols)
      t.rows = half(t.rows);
    else
      t.cols = half(t.cols);
  }
  return t;
}

// Row-major C[M,N] = alpha · op(A) · op(B) + beta · C. Normally one OpenBLAS call, threaded as
// OpenBLAS likes, whose bits may depend on the thread count. Under FixedGemmGrid: one
// single-threaded call per tile of a grid fixed by (M, N), the whole K in each (OpenBLAS's
// OpenMP build does not nest inside our parallel loop), so every element is computed by the same
// call with the same arguments whatever the thread count.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
          int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (!FixedGemmGrid::active()) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const Tile t = grid_tile(M, N);
  const int rows = (M + t.rows - 1) / t.rows, cols = (N + t.cols - 1) / t.cols;
#pragma omp parallel for schedule(dynamic)
  for (int tile = 0; tile < rows * cols; ++tile) {
    const int i0 = tile / cols * t.rows, j0 = tile % cols * t.cols;
    const int m = std::min(t.rows, M - i0), n = std::min(t.cols, N - j0);
    // op(A) rows i0.. and op(B) columns j0.. (A stored [M,K] or [K,M]; B [K,N] or [N,K]).
    const float* a = ta == CblasNoTrans ? A + static_cast<std::size_t>(i0) * lda : A + i0;
    const float* b = tb == CblasNoTrans ? B + j0 : B + static_cast<std::size_t>(j0) * ldb;
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, K, alpha, a, lda, b, ldb, beta,
                C + static_cast<std::size_t>(i0) * ldc + j0, ldc);
  }
}

}  // namespace

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, WeightLayout layout) {
  float beta = 0.0f;
  if (bias != nullptr) {
    // Seeding out with the bias and accumulating (beta = 1) saves a separate pass over out.
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; ++n) {
      std::memcpy(out + static_cast<std::size_t>(n) * OC, bias, sizeof(float) * OC);
    }
    beta = 1.0f;
  }
  if (layout == WeightLayout::kOutIn) {
    gemm(CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta, out, OC);
  } else {
    gemm(CblasNoTrans, CblasNoTrans, N, OC, C, 1.0f, inp, C, weight, OC, beta, out, OC);
  }
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::kOutIn;
  if (dinp != nullptr) {
    // dinp[N,C] += dout[N,OC] · (W as [OC,C])
    gemm(CblasNoTrans, out_in ? CblasNoTrans : CblasTrans, N, C, OC, 1.0f, dout, OC, weight,
         out_in ? C : OC, 1.0f, dinp, C);
  }
  if (dweight != nullptr) {
    if (out_in) {
      // dW[OC,C] += doutᵀ · inp
      gemm(CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    } else {
      // dW[C,OC] += inpᵀ · dout
      gemm(CblasTrans, CblasNoTrans, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
    }
  }
  if (dbias != nullptr) {
    // Column sums: each thread owns a slice of the columns and sums the rows in order, so the
    // result does not depend on the thread count.
#pragma omp parallel
    {
      const detail::Range cols =
          detail::thread_range(OC, omp_get_thread_num(), omp_get_num_threads());
      std::vector<float> acc(static_cast<std::size_t>(cols.end - cols.begin), 0.0f);
      float* a = acc.data();
      const std::ptrdiff_t width = cols.end - cols.begin;
      for (int n = 0; n < N; ++n) {
        const float* g = dout + static_cast<std::size_t>(n) * OC + cols.begin;
#pragma omp simd
        for (std::ptrdiff_t c = 0; c < width; ++c) a[c] += g[c];
      }
#pragma omp simd
      for (std::ptrdiff_t c = 0; c < width; ++c) dbias[cols.begin + c] += a[c];
    }
  }
}

}  // namespace saturn::cpu
