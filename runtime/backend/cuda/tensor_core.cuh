// Tensor cores for the kernels: nvcuda::wmma, bf16 m16n16k16 with fp32 accumulation (sm_80+).
// Under nvcc it is <mma.h>; in the CPU emulator (SATURN_CUDA_EMULATION, tests/gpu/emu) the
// force-included kernel language provides the same namespace (emu_wmma.hpp), stricter than a GPU
// about what WMMA leaves unspecified (fragment layouts, warp-collective calls, alignment).
#pragma once

#include <cuda_bf16.h>

#ifndef SATURN_CUDA_EMULATION
#include <mma.h>
#endif

namespace saturn::cuda::detail {

namespace wmma = nvcuda::wmma;
constexpr int kMma = 16;  // the m16n16k16 tile's edge
using FragA = wmma::fragment<wmma::matrix_a, kMma, kMma, kMma, __nv_bfloat16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, kMma, kMma, kMma, __nv_bfloat16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, kMma, kMma, kMma, float>;

}  // namespace saturn::cuda::detail
