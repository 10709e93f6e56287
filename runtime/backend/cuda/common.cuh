// Device helpers shared by the kernels (not part of the ops.hpp contract).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/check.hpp"

namespace saturn::cuda::detail {

// Block size of the elementwise and row kernels. Every one of them works for any multiple of 32;
// the CPU emulator (tests/gpu/emu) uses one warp for speed (its cost is one context switch per
// thread per barrier), except in the build that checks the real size (SATURN_EMU_REAL_BLOCKS).
#if defined(SATURN_CUDA_EMULATION) && !defined(SATURN_EMU_REAL_BLOCKS)
constexpr int kThreads = 32;
#else
constexpr int kThreads = 256;
#endif
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float to_f(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ __nv_bfloat16 to_bf(float x) {
  return __float2bfloat16(x);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// Every thread of the block must call it.
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T r = lane < warps ? partial[lane] : T(0);
  return warp_sum(r);
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float r = lane < warps ? partial[lane] : -INFINITY;
  return warp_max(r);
}

// Blocks for a grid-stride loop over n elements.
inline unsigned grid_for(std::size_t n, int threads = kThreads) {
  const std::size_t blocks = (n + static_cast<std::size_t>(threads) - 1) / threads;
  constexpr std::size_t kMaxBlocks = 65536;  // grid-stride loops cover the rest
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

// Loop index helpers for grid-stride loops over size_t ranges.
__device__ __forceinline__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t global_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

}  // namespace saturn::cuda::detail
