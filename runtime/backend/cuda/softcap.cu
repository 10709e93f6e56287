#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// x = softcap * tanh(x / softcap) in fp32, rounded to bf16 once.
__global__ void softcap_forward_kernel(bf16* x, std::size_t n, float softcap) {
  for (std::size_t i = global_index(); i < n; i += global_stride())
    x[i] = to_bf(tanhf(to_f(x[i]) / softcap) * softcap);
}

}  // namespace

void softcap_forward(Context& ctx, bf16* x, std::size_t n, float softcap) {
  if (n == 0) return;
  softcap_forward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(x, n, softcap);
  SATURN_CUDA_LAUNCH_CHECK("softcap_forward_kernel");
}

}  // namespace saturn::cuda
