// The vector operations strategies run on device buffers (backend/device.hpp): sums of
// gradient shards, reproducible mode's fp64 accumulators, and device-side loss sums.
#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// vec: 4 elements per thread and step through 128-bit accesses (common.cuh: one fp32 vector, two
// fp64 vectors), the tail one by one.
constexpr int kW = kF32Width;  // 4

__global__ void add_f32_kernel(float* dst, const float* src, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kW : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    Vec128<float> d = load128(dst + v * kW);
    const Vec128<float> x = load128(src + v * kW);
#pragma unroll
    for (int k = 0; k < kW; ++k) d.v[k] += x.v[k];
    store128(dst + v * kW, d);
  }
  for (std::size_t i = nv * kW + global_index(); i < n; i += global_stride()) dst[i] += src[i];
}
__global__ void add_f64_kernel(double* dst, const double* src, std::size_t n, bool vec) {
  constexpr int kW64 = Vec128<double>::kWidth;  // 2
  const std::size_t nv = vec ? n / kW64 : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    Vec128<double> d = load128(dst + v * kW64);
    const Vec128<double> x = load128(src + v * kW64);
    d.v[0] += x.v[0];
    d.v[1] += x.v[1];
    store128(dst + v * kW64, d);
  }
  for (std::size_t i = nv * kW64 + global_index(); i < n; i += global_stride()) dst[i] += src[i];
}
__global__ void accumulate_kernel(double* acc, float* g, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kW : 0;
  const Vec128<float> zero{};
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kW;
    const Vec128<float> x = load128(g + i);
    Vec128<double> lo = load128(acc + i), hi = load128(acc + i + 2);
    lo.v[0] += static_cast<double>(x.v[0]);
    lo.v[1] += static_cast<double>(x.v[1]);
    hi.v[0] += static_cast<double>(x.v[2]);
    hi.v[1] += static_cast<double>(x.v[3]);
    store128(acc + i, lo);
    store128(acc + i + 2, hi);
    store128(g + i, zero);
  }
  for (std::size_t i = nv * kW + global_index(); i < n; i += global_stride()) {
    acc[i] += static_cast<double>(g[i]);
    g[i] = 0.0f;
  }
}
__global__ void round_into_kernel(float* out, double* acc, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kW : 0;
  const Vec128<double> zero{};
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kW;
    const Vec128<double> lo = load128(acc + i), hi = load128(acc + i + 2);
    const Vec128<float> r{{static_cast<float>(lo.v[0]), static_cast<float>(lo.v[1]),
                           static_cast<float>(hi.v[0]), static_cast<float>(hi.v[1])}};
    store128(out + i, r);
    store128(acc + i, zero);
    store128(acc + i + 2, zero);
  }
  for (std::size_t i = nv * kW + global_index(); i < n; i += global_stride()) {
    out[i] = static_cast<float>(acc[i]);
    acc[i] = 0.0;
  }
}
__global__ void widen_kernel(double* dst, const float* src, std::size_t n, bool vec) {
  const std::size_t nv = vec ? n / kW : 0;
  for (std::size_t v = global_index(); v < nv; v += global_stride()) {
    const std::size_t i = v * kW;
    const Vec128<float> x = load128(src + i);
    const Vec128<double> lo{{static_cast<double>(x.v[0]), static_cast<double>(x.v[1])}};
    const Vec128<double> hi{{static_cast<double>(x.v[2]), static_cast<double>(x.v[3])}};
    store128(dst + i, lo);
    store128(dst + i + 2, hi);
  }
  for (std::size_t i = nv * kW + global_index(); i < n; i += global_stride())
    dst[i] = static_cast<double>(src[i]);
}
// One thread: a scalar read-modify-write, ordered on the stream after the kernel that wrote x.
__global__ void add_scaled_kernel(double* acc, const float* x, double weight) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *acc += static_cast<double>(*x) * weight;
}

}  // namespace

void add(Context& ctx, float* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dst, src);
  add_f32_kernel<<<grid_for_vectors(n, vec, kW), kThreads, 0, ctx.stream()>>>(dst, src, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("add_f32_kernel");
}

void add(Context& ctx, double* dst, const double* src, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dst, src);
  add_f64_kernel<<<grid_for_vectors(n, vec, Vec128<double>::kWidth), kThreads, 0, ctx.stream()>>>(
      dst, src, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("add_f64_kernel");
}

void accumulate(Context& ctx, double* acc, float* g, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(acc, g);
  accumulate_kernel<<<grid_for_vectors(n, vec, kW), kThreads, 0, ctx.stream()>>>(acc, g, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("accumulate_kernel");
}

void round_into(Context& ctx, float* out, double* acc, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(out, acc);
  round_into_kernel<<<grid_for_vectors(n, vec, kW), kThreads, 0, ctx.stream()>>>(out, acc, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("round_into_kernel");
}

void widen(Context& ctx, double* dst, const float* src, std::size_t n) {
  if (n == 0) return;
  const bool vec = all_aligned16(dst, src);
  widen_kernel<<<grid_for_vectors(n, vec, kW), kThreads, 0, ctx.stream()>>>(dst, src, n, vec);
  SATURN_CUDA_LAUNCH_CHECK("widen_kernel");
}

void add_scaled(Context& ctx, double* acc, const float* x, double weight) {
  add_scaled_kernel<<<1, 32, 0, ctx.stream()>>>(acc, x, weight);
  SATURN_CUDA_LAUNCH_CHECK("add_scaled_kernel");
}

}  // namespace saturn::cuda
