#include <omp.h>

#include <atomic>

#include "runtime/backend/cpu/ops.hpp"

// OpenBLAS (any flavour) exports these; the OpenMP flavour also follows omp_set_num_threads.
extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int num_threads);

namespace saturn::cpu {
namespace {
std::atomic<int> fixed_grid_depth{0};
}  // namespace

int compute_threads() {
  return omp_get_max_threads();
}

void set_compute_threads(int threads) {
  if (threads < 1) return;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
}

FixedGemmGrid::FixedGemmGrid(bool on) : on_(on) {
  if (on_) fixed_grid_depth.fetch_add(1);
}

FixedGemmGrid::~FixedGemmGrid() {
  if (on_) fixed_grid_depth.fetch_sub(1);
}

bool FixedGemmGrid::active() {
  return fixed_grid_depth.load(std::memory_order_relaxed) > 0;
}

}  // namespace saturn::cpu
