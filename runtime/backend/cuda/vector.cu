// The vector operations strategies run on device buffers (backend/device.hpp): sums of
// gradient shards, reproducible mode's fp64 accumulators, and device-side loss sums.
#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

__global__ void add_f32_kernel(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) dst[i] += src[i];
}
__global__ void add_f64_kernel(double* dst, const double* src, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) dst[i] += src[i];
}
__global__ void accumulate_kernel(double* acc, float* g, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    acc[i] += static_cast<double>(g[i]);
    g[i] = 0.0f;
  }
}
__global__ void round_into_kernel(float* out, double* acc, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride()) {
    out[i] = static_cast<float>(acc[i]);
    acc[i] = 0.0;
  }
}
__global__ void widen_kernel(double* dst, const float* src, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += global_stride())
    dst[i] = static_cast<double>(src[i]);
}
// One thread: a scalar read-modify-write, ordered on the stream after the kernel that wrote x.
__global__ void add_scaled_kernel(double* acc, const float* x, double weight) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *acc += static_cast<double>(*x) * weight;
}

}  // namespace

void add(Context& ctx, float* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  add_f32_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, src, n);
  SATURN_CUDA_LAUNCH_CHECK("add_f32_kernel");
}

void add(Context& ctx, double* dst, const double* src, std::size_t n) {
  if (n == 0) return;
  add_f64_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, src, n);
  SATURN_CUDA_LAUNCH_CHECK("add_f64_kernel");
}

void accumulate(Context& ctx, double* acc, float* g, std::size_t n) {
  if (n == 0) return;
  accumulate_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(acc, g, n);
  SATURN_CUDA_LAUNCH_CHECK("accumulate_kernel");
}

void round_into(Context& ctx, float* out, double* acc, std::size_t n) {
  if (n == 0) return;
  round_into_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(out, acc, n);
  SATURN_CUDA_LAUNCH_CHECK("round_into_kernel");
}

void widen(Context& ctx, double* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  widen_kernel<<<grid_for(n), kThreads, 0, ctx.stream()>>>(dst, src, n);
  SATURN_CUDA_LAUNCH_CHECK("widen_kernel");
}

void add_scaled(Context& ctx, double* acc, const float* x, double weight) {
  add_scaled_kernel<<<1, 32, 0, ctx.stream()>>>(acc, x, weight);
  SATURN_CUDA_LAUNCH_CHECK("add_scaled_kernel");
}

}  // namespace saturn::cuda
