#include <cmath>
#include <cstddef>

#include "runtime/backend/cpu/ops.hpp"

namespace saturn::cpu {

void softcap_forward(float* x, std::size_t n, float softcap) {
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) x[i] = std::tanh(x[i] / softcap) * softcap;
}

}  // namespace saturn::cpu
