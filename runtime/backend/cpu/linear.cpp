#include <cblas.h>

#include <cstring>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

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
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C, 1.0f, inp, C, weight, OC, beta,
                out, OC);
  }
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout) {
  const bool out_in = layout == WeightLayout::kOutIn;
  if (dinp != nullptr) {
    // dinp[N,C] += dout[N,OC] · (W as [OC,C])
    cblas_sgemm(CblasRowMajor, CblasNoTrans, out_in ? CblasNoTrans : CblasTrans, N, C, OC, 1.0f,
                dout, OC, weight, out_in ? C : OC, 1.0f, dinp, C);
  }
  if (dweight != nullptr) {
    if (out_in) {
      // dW[OC,C] += doutᵀ · inp
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                  dweight, C);
    } else {
      // dW[C,OC] += inpᵀ · dout
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N, 1.0f, inp, C, dout, OC, 1.0f,
                  dweight, OC);
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
