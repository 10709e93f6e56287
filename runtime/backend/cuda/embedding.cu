#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// One block per token row.
__global__ void embedding_forward_kernel(bf16* out, const std::int32_t* tokens, const bf16* wte,
                                         const bf16* wpe, int T, int C) {
  const std::size_t n = blockIdx.x;
  const std::size_t tok = static_cast<std::size_t>(tokens[n]);
  const std::size_t t = n % static_cast<std::size_t>(T);
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float x = to_f(wte[tok * C + c]);
    if (wpe != nullptr) x += to_f(wpe[t * C + c]);
    out[n * C + c] = to_bf(x);
  }
}

// Tokens repeat, so rows of dwte collide: fp32 atomics.
__global__ void embedding_backward_wte_kernel(float* dwte, const bf16* dout,
                                              const std::int32_t* tokens, int C) {
  const std::size_t n = blockIdx.x;
  const std::size_t tok = static_cast<std::size_t>(tokens[n]);
  for (int c = threadIdx.x; c < C; c += blockDim.x)
    atomicAdd(&dwte[tok * C + c], to_f(dout[n * C + c]));
}

// One thread per (t, c): sums over the batch in order, no atomics.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const bf16* dout, int B, int T, int C) {
  const std::size_t TC = static_cast<std::size_t>(T) * C;
  for (std::size_t i = global_index(); i < TC; i += global_stride()) {
    float s = 0.0f;
    for (int b = 0; b < B; ++b) s += to_f(dout[static_cast<std::size_t>(b) * TC + i]);
    dwpe[i] += s;
  }
}

}  // namespace

void embedding_forward(Context& ctx, bf16* out, const std::int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C) {
  const unsigned N = static_cast<unsigned>(B) * static_cast<unsigned>(T);
  if (N == 0) return;
  embedding_forward_kernel<<<N, kThreads, 0, ctx.stream()>>>(out, tokens, wte, wpe, T, C);
  SATURN_CUDA_LAUNCH_CHECK("embedding_forward_kernel");
}

void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const std::int32_t* tokens, int B, int T, int C) {
  const unsigned N = static_cast<unsigned>(B) * static_cast<unsigned>(T);
  if (N == 0) return;
  if (dwte != nullptr) {
    embedding_backward_wte_kernel<<<N, kThreads, 0, ctx.stream()>>>(dwte, dout, tokens, C);
    SATURN_CUDA_LAUNCH_CHECK("embedding_backward_wte_kernel");
  }
  if (dwpe != nullptr) {
    const std::size_t TC = static_cast<std::size_t>(T) * C;
    embedding_backward_wpe_kernel<<<grid_for(TC), kThreads, 0, ctx.stream()>>>(dwpe, dout, B, T, C);
    SATURN_CUDA_LAUNCH_CHECK("embedding_backward_wpe_kernel");
  }
}

}  // namespace saturn::cuda
