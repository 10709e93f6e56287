#include <omp.h>

#include "runtime/backend/cpu/ops.hpp"

// OpenBLAS (any flavour) exports these; the OpenMP flavour also follows omp_set_num_threads.
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace saturn::cpu {

int compute_threads() {
  return omp_get_max_threads();
}

void set_compute_threads(int threads) {
  if (threads < 1) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

}  // namespace saturn::cpu
