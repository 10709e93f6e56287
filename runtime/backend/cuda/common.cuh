// Device helpers shared by the kernels (not part of the ops.hpp contract).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

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

// 128-bit accesses for the elementwise kernels: one load or store moves 8 bf16, 4 fp32 or 2 fp64
// (16 bytes, the widest a thread can issue). A kernel takes the vector path only when every
// pointer it touches is 16-byte aligned (the host checks, aligned16) and handles the n % width
// elements past the last whole vector one by one; unaligned pointers take the scalar path for
// all n. The copy through memcpy is what the compiler turns into one 128-bit access, without
// reading one type through another.
template <typename T>
struct alignas(16) Vec128 {
  static constexpr int kWidth = static_cast<int>(16 / sizeof(T));
  T v[kWidth];
};
template <typename T>
__device__ __forceinline__ Vec128<T> load128(const T* p) {
  const int4 bits = *reinterpret_cast<const int4*>(p);
  Vec128<T> r;
  memcpy(static_cast<void*>(&r), &bits, sizeof(bits));
  return r;
}
template <typename T>
__device__ __forceinline__ void store128(T* p, const Vec128<T>& x) {
  int4 bits;
  memcpy(&bits, static_cast<const void*>(&x), sizeof(bits));
  *reinterpret_cast<int4*>(p) = bits;
}
// Null pointers (optional outputs) count as aligned.
inline bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}
template <typename... P>
inline bool all_aligned16(const P*... p) {
  return (aligned16(p) && ...);
}
constexpr int kBf16Width = Vec128<__nv_bfloat16>::kWidth;  // 8
constexpr int kF32Width = Vec128<float>::kWidth;           // 4

// Blocks for an elementwise kernel over n elements, `width` per thread on the vector path.
inline unsigned grid_for_vectors(std::size_t n, bool vec, int width) {
  return grid_for(vec ? n / static_cast<std::size_t>(width) + static_cast<std::size_t>(width) : n);
}

// Deterministic column sums over rows (parameter gradients of the norms, bias gradients): no
// atomics. A first kernel gives each chunk of `rows` consecutive rows one partial sum per column,
// written to partial[chunk * C + c]; add_column_partials (reduce.cu) then adds the chunks' partials
// in chunk order. The chunking depends on the row count alone (at most kMaxRowChunks chunks, at
// least 128 rows each), so a sum has the same order, and the same bits, every run and wherever
// the same rows are processed.
struct RowChunks {
  int rows = 0;   // rows per chunk
  int count = 0;  // chunks
};
inline RowChunks row_chunks(int N) {
  constexpr int kMinRows = 128, kMaxRowChunks = 64;
  RowChunks r;
  r.rows = (N + kMaxRowChunks - 1) / kMaxRowChunks;
  if (r.rows < kMinRows) r.rows = kMinRows;
  r.count = (N + r.rows - 1) / r.rows;
  return r;
}

// Loop index helpers for grid-stride loops over size_t ranges.
__device__ __forceinline__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t global_stride() {
  return static_cast<std::size_t>(gridDim.x) * blockDim.x;
}

// GELU's tanh approximation and its derivative, with the CPU backend's constants and operation
// order (GPT-2's MLP, Gemma's GeGLU).
constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

__device__ __forceinline__ float gelu_tanh(float x) {
  const float inner = kGeluBeta * (x + kGeluKappa * (x * x * x));
  return 0.5f * x * (1.0f + tanhf(inner));
}
__device__ __forceinline__ float gelu_tanh_derivative(float x) {
  const float x_sq = x * x;
  const float th = tanhf(kGeluBeta * (x + kGeluKappa * (x_sq * x)));
  const float left = 0.5f * (1.0f + th);
  const float right = 0.5f * x * (1.0f - th * th) * (kGeluBeta * (1.0f + 3.0f * kGeluKappa * x_sq));
  return left + right;
}

}  // namespace saturn::cuda::detail
