// Internal helpers shared by the CPU kernels (not part of the ops.hpp contract).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <vector>

// Compute-bound kernels (exp, tanh, sqrt, division) are compiled for AVX-512, AVX2 and baseline
// x86-64 and picked at load time, since builds target baseline x86-64 but the hardware is
// usually far wider. The versions agree bit for bit: the backend is built with
// -ffp-contract=off (no fused multiply-adds in one version only), and their row reductions use
// a fixed lane count (vecmath.hpp), so replicas on different CPUs stay in lockstep.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define SATURN_CPU_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SATURN_CPU_MULTIVERSION
#endif

namespace saturn::cpu::detail {

// Below this many elements an elementwise loop runs on the calling thread: waking the OpenMP
// team costs more than the loop.
inline constexpr std::ptrdiff_t kParallelMin = 1 << 15;

// Rows per partial sum of the norms' weight gradients: fixed, so the sum's order does not depend
// on the thread count.
inline constexpr std::ptrdiff_t kNormRowBlock = 64;

// The backward of a row-wise op whose parameter gradients sum over its N rows (the norms):
// input_row(n) writes row n's input gradient (when `input`); param_row(n, partial) adds row n's
// parameter gradients into the `width` floats of its block of kNormRowBlock rows (when
// `params`); add(i, sum) then receives each element's partials summed in block order. The sums
// are the same bits for any thread count (ranks with different OMP_NUM_THREADS, or a job
// resumed at another degree, agree). Input rows are independent: with fewer blocks than threads
// they get a loop of their own, so a small micro-batch does not leave threads idle.
template <class InputRow, class ParamRow, class Add>
void row_blocks_backward(std::ptrdiff_t N, std::ptrdiff_t width, bool input, bool params,
                         InputRow&& input_row, ParamRow&& param_row, Add&& add) {
  const std::ptrdiff_t blocks = (N + kNormRowBlock - 1) / kNormRowBlock;
  std::vector<float> partial(params ? static_cast<std::size_t>(blocks * width) : 0, 0.0f);
  const bool rows_apart = input && blocks < omp_get_max_threads();
#pragma omp parallel
  {
    if (rows_apart) {
#pragma omp for schedule(static)
      for (std::ptrdiff_t n = 0; n < N; ++n) input_row(n);
    }
#pragma omp for schedule(static)
    for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) {
      float* p = params ? partial.data() + blk * width : nullptr;
      const std::ptrdiff_t end = std::min(N, (blk + 1) * kNormRowBlock);
      for (std::ptrdiff_t n = blk * kNormRowBlock; n < end; ++n) {
        if (input && !rows_apart) input_row(n);
        if (params) param_row(n, p);
      }
    }
    if (params) {
#pragma omp for schedule(static)
      for (std::ptrdiff_t i = 0; i < width; ++i) {
        float sum = 0.0f;
        for (std::ptrdiff_t blk = 0; blk < blocks; ++blk) sum += partial[blk * width + i];
        add(i, sum);
      }
    }
  }
}

// Half-open range [begin, end) of `n` items owned by thread `tid` of `nthreads` under an even
// static split, with boundaries rounded to `align` items (a cache line of floats by default) so
// threads writing neighbouring ranges do not share cache lines.
struct Range {
  std::ptrdiff_t begin, end;
};
inline Range thread_range(std::ptrdiff_t n, int tid, int nthreads, std::ptrdiff_t align = 16) {
  std::ptrdiff_t chunk = (n + nthreads - 1) / nthreads;
  chunk = (chunk + align - 1) / align * align;
  const std::ptrdiff_t begin = std::min(n, chunk * tid);
  return {begin, std::min(n, begin + chunk)};
}

// Calls body(begin, end) on a static split of [0, n) across the OpenMP team (or once, on this
// thread, for small n). The body is typically a SATURN_CPU_MULTIVERSION function: target clones
// cannot be applied to OpenMP's outlined region itself.
template <class Body>
void parallel_ranges(std::ptrdiff_t n, Body&& body) {
  if (n < kParallelMin) {
    if (n > 0) body(std::ptrdiff_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const Range r = thread_range(n, omp_get_thread_num(), omp_get_num_threads());
    if (r.begin < r.end) body(r.begin, r.end);
  }
}

}  // namespace saturn::cpu::detail
