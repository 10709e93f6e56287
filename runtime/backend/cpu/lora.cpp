// The one op LoRA adds to the linears it reuses: a scaled add of an adapter's output into the
// columns of its base linear's output (for LLaMA's fused q|k|v, a strided part of each row).
#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"

namespace saturn::cpu {

void scaled_add_rows(float* dst, std::size_t dst_pitch, const float* src, std::size_t src_pitch,
                     std::size_t width, std::size_t rows, float scale) {
  const auto n = static_cast<std::ptrdiff_t>(rows);
#pragma omp parallel for schedule(static) if (n * static_cast <std::ptrdiff_t>(width) >= \
                                              detail::kParallelMin)
  for (std::ptrdiff_t r = 0; r < n; ++r) {
    float* d = dst + static_cast<std::size_t>(r) * dst_pitch;
    const float* s = src + static_cast<std::size_t>(r) * src_pitch;
    // PEFT's order: the adapter's output is scaled (rounded to fp32), then added.
    for (std::size_t c = 0; c < width; ++c) d[c] = d[c] + s[c] * scale;
  }
}

}  // namespace saturn::cpu
