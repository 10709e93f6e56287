// The CUDA emulator's tensor cores (test only): the subset of nvcuda::wmma (<mma.h>) the kernels
// use — bf16 m16n16k16 matrix_a / matrix_b fragments (row or column major) and float
// accumulators: fill_fragment, load_matrix_sync, mma_sync, store_matrix_sync, fragment.x[] and
// num_elements. Included by emu_cuda.hpp.
//
// As strict as the rest of the emulator, so that a kernel passing here does not rely on what a
// GPU leaves unspecified:
// - load/store/mma are warp-collective: every lane must call, with the same pointer, ldm and
//   layout (a lane skipping one, or at another operation, is reported and aborts; one exiting is a
//   deadlock); pointers must be 256-bit aligned and ldm a multiple of 16 bytes (8 bf16, 4 float).
// - Which lane holds which element of a fragment is unspecified on a GPU: here it is a seeded
//   random permutation per fragment kind (SATURN_EMU_SEED), so a kernel that assumes a layout
//   (reads x[i] as "row lane/4 ...") gets wrong results. Elementwise use of x[] (scaling every
//   element, converting) is layout-free and works.
// - load_matrix_sync reads memory as each lane arrives and store_matrix_sync writes it after the
//   rendezvous, lanes in shuffled order: neither orders memory between lanes, so shared memory
//   written by other lanes needs __syncwarp() before a load, and a store's elements read by
//   other lanes need one after it (as on a GPU, where neither is a memory barrier).
// - A fragment never filled or loaded holds NaN (garbage on a GPU).
// - mma_sync: products of bf16 inputs are exact in fp32; the sum over k is fp32, in k order.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_kernel_state.hpp"

namespace emu::wmma_detail {

// Fragment kinds, each with its own element-to-lane mapping.
enum Kind { kMatrixARow, kMatrixACol, kMatrixBRow, kMatrixBCol, kAccumulator, kKinds };
constexpr int kElementsPerLane = 8;  // 16 x 16 elements over 32 lanes

// element (lane l, x[i]) is the matrix element pos[l * 8 + i] = row * 16 + col; owner inverts it.
struct Mapping {
  unsigned char pos[256];
  unsigned char owner[256];
};
const Mapping& mapping(Kind kind);  // emu_wmma.cpp

// Checks a load/store operand (alignment, ldm) on this lane, then that every lane passed the
// same one; `element_bytes` is the memory element's size.
void check_operand(const char* what, const void* ptr, unsigned ldm, int layout,
                   std::size_t element_bytes);
void agree_on_operand(const char* what, const void* ptr, unsigned ldm, int layout);

inline unsigned lane() {
  return threadIdx.x % 32;
}

}  // namespace emu::wmma_detail

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator's WMMA has m16n16k16 only");
  static_assert(std::is_same_v<Use, accumulator> ? std::is_same_v<T, float>
                                                 : std::is_same_v<T, __nv_bfloat16>,
                "the emulator's WMMA has bf16 matrix_a/matrix_b and float accumulators only");
  static_assert(std::is_same_v<Use, accumulator> == std::is_same_v<Layout, void>,
                "matrix_a/matrix_b take row_major or col_major; accumulators no layout");

 public:
  using element_type = T;
  using storage_element_type = T;
  static constexpr int num_elements = emu::wmma_detail::kElementsPerLane;
  T x[num_elements];

  fragment() {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (T& e : x) {
      if constexpr (std::is_same_v<T, float>)
        e = nan;
      else
        e = __float2bfloat16(nan);
    }
  }

  static constexpr emu::wmma_detail::Kind kind() {
    using namespace emu::wmma_detail;
    if constexpr (std::is_same_v<Use, accumulator>)
      return kAccumulator;
    else if constexpr (std::is_same_v<Use, matrix_a>)
      return std::is_same_v<Layout, row_major> ? kMatrixARow : kMatrixACol;
    else
      return std::is_same_v<Layout, row_major> ? kMatrixBRow : kMatrixBCol;
  }
};

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f, const T& v) {
  // Not a _sync operation on a GPU either: per lane.
  for (T& e : f.x) e = v;
}

namespace detail_emu {
template <typename Frag, typename T>
inline void load(Frag& f, const T* ptr, unsigned ldm, bool col_major_memory, const char* what) {
  using namespace emu::wmma_detail;
  const int layout = col_major_memory ? mem_col_major : mem_row_major;
  check_operand(what, ptr, ldm, layout, sizeof(T));
  // Read on arrival (see the file comment), then meet the warp.
  const Mapping& m = mapping(Frag::kind());
  const unsigned l = lane();
  for (int i = 0; i < kElementsPerLane; ++i) {
    const unsigned p = m.pos[l * kElementsPerLane + i], row = p / 16, col = p % 16;
    f.x[i] = col_major_memory ? ptr[static_cast<std::size_t>(col) * ldm + row]
                              : ptr[static_cast<std::size_t>(row) * ldm + col];
  }
  agree_on_operand(what, ptr, ldm, layout);
}
}  // namespace detail_emu

template <typename Use, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, __nv_bfloat16, Layout>& f,
                             const __nv_bfloat16* ptr, unsigned ldm) {
  detail_emu::load(f, ptr, ldm, std::is_same_v<Layout, col_major>, "wmma::load_matrix_sync");
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* ptr,
                             unsigned ldm, layout_t layout) {
  detail_emu::load(f, ptr, ldm, layout == mem_col_major, "wmma::load_matrix_sync");
}

inline void store_matrix_sync(float* ptr, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout) {
  using namespace emu::wmma_detail;
  const char* what = "wmma::store_matrix_sync";
  check_operand(what, ptr, ldm, layout, sizeof(float));
  agree_on_operand(what, ptr, ldm, layout);
  const Mapping& m = mapping(kAccumulator);
  const unsigned l = lane();
  for (int i = 0; i < kElementsPerLane; ++i) {
    const unsigned p = m.pos[l * kElementsPerLane + i], row = p / 16, col = p % 16;
    (layout == mem_col_major ? ptr[static_cast<std::size_t>(col) * ldm + row]
                             : ptr[static_cast<std::size_t>(row) * ldm + col]) = f.x[i];
  }
}

// d = a·b + c. Every lane deposits its a and b elements; each computes its own elements of d
// from the warp's deposits (c and d share the accumulator mapping).
template <typename LayoutA, typename LayoutB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
                     const fragment<accumulator, 16, 16, 16, float>& c) {
  using namespace emu::wmma_detail;
  struct Deposit {
    __nv_bfloat16 a[kElementsPerLane], b[kElementsPerLane];
  };
  Deposit mine;
  std::memcpy(mine.a, a.x, sizeof mine.a);
  std::memcpy(mine.b, b.x, sizeof mine.b);
  const auto* all =
      static_cast<const unsigned char*>(emu::warp_rendezvous("wmma::mma_sync", &mine, sizeof mine));
  auto deposit = [&](unsigned l) {
    Deposit dep;
    std::memcpy(&dep, all + static_cast<std::size_t>(l) * emu::kMaxRendezvousBytes, sizeof dep);
    return dep;
  };
  // The warp's a and b as 16 x 16 matrices (row, col) in fp32 (exact for bf16).
  float A[256], B[256];
  const Mapping& ma = mapping(a.kind());
  const Mapping& mb = mapping(b.kind());
  for (unsigned l = 0; l < 32; ++l) {
    const Deposit dep = deposit(l);
    for (int i = 0; i < kElementsPerLane; ++i) {
      A[ma.pos[l * kElementsPerLane + i]] = __bfloat162float(dep.a[i]);
      B[mb.pos[l * kElementsPerLane + i]] = __bfloat162float(dep.b[i]);
    }
  }
  const Mapping& mc = mapping(kAccumulator);
  const unsigned l = lane();
  float out[kElementsPerLane];
  for (int i = 0; i < kElementsPerLane; ++i) {
    const unsigned p = mc.pos[l * kElementsPerLane + i], row = p / 16, col = p % 16;
    float sum = c.x[i];
    for (unsigned k = 0; k < 16; ++k) sum += A[row * 16 + k] * B[k * 16 + col];
    out[i] = sum;
  }
  for (int i = 0; i < kElementsPerLane; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma

// cuda_runtime's __syncwarp: a warp rendezvous that orders the lanes' memory accesses (the
// emulator's lanes only run between rendezvous). Partial masks are not emulated: refused.
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu)
    emu::warp_violation("__syncwarp", "partial-warp masks are not emulated (full warp only)");
  emu::warp_rendezvous("__syncwarp", nullptr, 0);
}
