// A small CUDA emulator for the backend's kernels on the CPU (test only): the kernel sources are
// compiled as C++ after their launches are rewritten (transform.py), each block runs its
// threads as std::threads with real barriers, warp shuffles exchange values through per-warp
// slots, and shared memory is process-wide storage reused block after block (blocks run one at
// a time). It checks indexing, synchronisation structure and arithmetic, not timing or the
// memory model of a real GPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>

// The CUDA headers define these as attributes for host compilers: replaced for kernels-as-C++.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define cudaFuncSetAttribute(...) cudaSuccess
#define cudaMemcpyAsync(dst, src, bytes, kind, stream) \
  (std::memcpy((dst), (src), (bytes)), cudaSuccess)
#define cudaMemsetAsync(ptr, value, bytes, stream) \
  (std::memset((ptr), (value), (bytes)), cudaSuccess)
#define cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind, stream) \
  (::emu::memcpy2d((dst), (dpitch), (src), (spitch), (width), (height)), cudaSuccess)
#define cudaStreamSynchronize(stream) cudaSuccess
#define SATURN_CUDA_EMULATION 1

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

namespace emu {
void syncthreads();
float shfl(float v, int src_lane);
double shfl(double v, int src_lane);
void* dynamic_smem();
void memcpy2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
              std::size_t height);
// Runs body() as the kernel for every block of `grid`, `block` threads each.
void launch(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& body);
}  // namespace emu

inline void __syncthreads() {
  emu::syncthreads();
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
  return emu::shfl(v, src);
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return emu::shfl(v, static_cast<int>(threadIdx.x % 32) ^ mask);
}
inline float atomicAdd(float* p, float v) {
  return std::atomic_ref<float>(*p).fetch_add(v);
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
