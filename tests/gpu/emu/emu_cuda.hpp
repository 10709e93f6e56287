// The kernel language of the CUDA emulator (test only): force-included into the backend's .cu
// sources after transform.py has turned every launch `k<<<grid, block, smem, stream>>>(args)`
// into `::emu::launch(...)`, so that they compile as C++ and run on the CPU (emu_core.hpp). The
// host-side CUDA runtime calls those sources make (cudaMemsetAsync, ...) are the emulated
// runtime's (emu_runtime.cpp), which enforces that device memory is only reached by the device.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_kernel_state.hpp"
#include "tests/gpu/emu/emu_stream.hpp"
#include "tests/gpu/emu/emu_wmma.hpp"  // nvcuda::wmma (tensor cores), __syncwarp

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
// A block's threads run one block at a time on one OS thread: a function-local static is the
// block's shared memory (it keeps the previous block's values: garbage, as on a GPU).
#define __shared__ static
#ifndef SATURN_CUDA_EMULATION
#define SATURN_CUDA_EMULATION 1
#endif

// A kernel's pointer argument must be device memory (or null): a host pointer is an illegal
// address on a GPU, though a CPU emulator could read it.
template <typename T>
void emu_check_argument(const char* kernel, int index, const T& value) {
  if constexpr (std::is_pointer_v<T>) {
    if (value != nullptr && !emu::is_device(value))
      throw std::runtime_error(std::string("CUDA emulator: kernel ") + kernel + ": argument " +
                               std::to_string(index) +
                               " is a pointer outside device memory (an illegal address on a GPU)");
  }
}

// What a rewritten launch calls (transform.py) with the kernel's arguments. A launch runs at
// once, after the deferred work queued before it on its stream (emu_stream.hpp).
template <typename... Args>
void emu_launch(dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream, const char* kernel,
                const std::function<void()>& body, const Args&... args) {
  int index = 0;
  (emu_check_argument(kernel, index++, args), ...);
  emu::order_before(stream);
  emu::launch(emu::Dim3{grid.x, grid.y, grid.z}, emu::Dim3{block.x, block.y, block.z}, smem, body);
}
// cuda_runtime.h's overload for kernel pointers (the kernel sources include only the C API).
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

inline void __syncthreads() {
  emu::syncthreads();
}
template <typename T>
inline T __shfl_sync(unsigned, T v, int src) {
  return static_cast<T>(emu::shuffle(static_cast<double>(v), src));
}
template <typename T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return static_cast<T>(
      emu::shuffle(static_cast<double>(v), static_cast<int>(threadIdx.x % 32) ^ mask));
}
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}
inline float rsqrtf(float x) {
  return 1.0f / std::sqrt(x);
}
inline float __fdiv_rn(float a, float b) {
  return a / b;
}
inline float __fmul_rn(float a, float b) {
  return a * b;  // a product never fused into a multiply-add: the host build has no FMA
}
inline float __fsqrt_rn(float x) {
  return std::sqrt(x);
}
inline int min(int a, int b) {
  return a < b ? a : b;
}
