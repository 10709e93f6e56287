#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// out may alias a or b.
__global__ void residual_forward_kernel(bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride())
    out[i] = to_bf(to_f(a[i]) + to_f(b[i]));
}

__global__ void residual_backward_kernel(bf16* da, bf16* db, const bf16* dout, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    const float d = to_f(dout[i]);
    if (da != nullptr) da[i] = to_bf(to_f(da[i]) + d);
    if (db != nullptr) db[i] = to_bf(to_f(db[i]) + d);
  }
}

// out[n, c] += bias[c].
__global__ void add_bias_kernel(bf16* out, const bf16* bias, std::size_t N, int C) {
  const std::size_t total = N * static_cast<std::size_t>(C);
  for (std::size_t i = global_index(); i < total; i += global_stride())
    out[i] = to_bf(to_f(out[i]) + to_f(bias[i % static_cast<std::size_t>(C)]));
}

}  // namespace

void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int C) {
  const std::size_t total = static_cast<std::size_t>(N) * static_cast<std::size_t>(C);
  if (total == 0) return;
  add_bias_kernel<<<grid_for(total), kThreads, 0, ctx.stream()>>>(out, bias,
                                                                  static_cast<std::size_t>(N), C);
  SATURN_CUDA_LAUNCH_CHECK("add_bias_kernel");
}

void residual_forward(Context& ctx, bf16* out, const bf16* a, const bf16* b, std::size_t n) {
  if (n == 0) return;
  residual_forward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(out, a, b, n);
  SATURN_CUDA_LAUNCH_CHECK("residual_forward_kernel");
}

void residual_backward(Context& ctx, bf16* da, bf16* db, const bf16* dout, std::size_t n) {
  if (n == 0 || (da == nullptr && db == nullptr)) return;
  residual_backward_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(da, db, dout, n);
  SATURN_CUDA_LAUNCH_CHECK("residual_backward_kernel");
}

}  // namespace saturn::cuda
