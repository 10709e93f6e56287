#include <algorithm>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

double sum_of_squares(const float* x, std::size_t n) {
  // Fixed-size chunks summed independently, then the chunk sums in index order: the result is
  // the same for any thread count (ranks with different OMP_NUM_THREADS agree on the norm).
  constexpr std::ptrdiff_t kChunk = 1 << 14;
  const std::ptrdiff_t len = static_cast<std::ptrdiff_t>(n);
  const std::ptrdiff_t chunks = (len + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (len >= detail::kParallelMin)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::ptrdiff_t begin = c * kChunk;
    const std::ptrdiff_t end = std::min(len, begin + kChunk);
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (std::ptrdiff_t i = begin; i < end; ++i) {
      const double xi = x[i];
      s += xi * xi;
    }
    partial[static_cast<std::size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace saturn::cpu
