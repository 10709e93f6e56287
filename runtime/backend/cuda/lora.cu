// The one op LoRA adds to the linears it reuses (cpu/lora.cpp): dst[r, c] += scale * src[r, c],
// each matrix with its own row pitch.
#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

__global__ void scaled_add_rows_kernel(bf16* dst, std::size_t dst_pitch, const bf16* src,
                                       std::size_t src_pitch, std::size_t width, std::size_t rows,
                                       float scale) {
  const std::size_t total = width * rows;
  for (std::size_t i = global_index(); i < total; i += global_stride()) {
    const std::size_t r = i / width, c = i % width;
    bf16* d = dst + r * dst_pitch + c;
    // As the CPU: the scaled adapter output (rounded as the activations are), then the add.
    const float s = to_f(to_bf(to_f(src[r * src_pitch + c]) * scale));
    *d = to_bf(to_f(*d) + s);
  }
}

}  // namespace

void scaled_add_rows(Context& ctx, bf16* dst, std::size_t dst_pitch, const bf16* src,
                     std::size_t src_pitch, std::size_t width, std::size_t rows, float scale) {
  const std::size_t total = width * rows;
  if (total == 0) return;
  // clang-format off
  scaled_add_rows_kernel<<<grid_for(total), kThreads, 0, ctx.stream()>>>(dst, dst_pitch, src, src_pitch, width, rows, scale);
  // clang-format on
  SATURN_CUDA_LAUNCH_CHECK("scaled_add_rows_kernel");
}

}  // namespace saturn::cuda
