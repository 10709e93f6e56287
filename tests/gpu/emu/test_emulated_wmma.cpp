// The emulator's tensor cores (emu_wmma.hpp): mma_sync's results, and its strictness — a kernel
// assuming a fragment layout gets wrong results, a lane skipping a warp-collective operation or
// passing another operand is reported, misaligned operands are refused, an accumulator never
// filled is NaN. Kernels run through emu::launch on host arrays (standing in for shared memory).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

// The kernel language (after gtest: it redefines CUDA's attribute macros).
#include "tests/gpu/emu/emu_cuda.hpp"

namespace {

using namespace nvcuda;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragACol = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// 16x16 operands with room for an ldm of 24 (bf16) / 20 (float), 256-bit aligned.
struct alignas(128) Operands {
  __nv_bfloat16 a[16 * 24], b[16 * 24];
  float c[16 * 20], d[16 * 20];
};

void run_warp(const std::function<void()>& body) {
  emu::launch(emu::Dim3{1, 1, 1}, emu::Dim3{32, 1, 1}, 0, body);
}

// Random bf16 A (row-major, ld 24), B (row-major, ld 24), C (row-major, ld 20).
void fill(Operands& o, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (auto& x : o.a) x = __float2bfloat16(u(rng));
  for (auto& x : o.b) x = __float2bfloat16(u(rng));
  for (auto& x : o.c) x = u(rng);
  for (auto& x : o.d) x = NAN;
}

// D = A·B + C with exact bf16 products, fp32 sums in k order (what the emulator promises).
float reference(const Operands& o, int r, int c) {
  float sum = o.c[r * 20 + c];
  for (int k = 0; k < 16; ++k)
    sum += __bfloat162float(o.a[r * 24 + k]) * __bfloat162float(o.b[k * 24 + c]);
  return sum;
}

TEST(EmulatedWmma, MmaMatchesExactProductsAndFp32Sums) {
  auto o = std::make_unique<Operands>();
  fill(*o, 1);
  run_warp([&] {
    FragA a;
    FragB b;
    FragAcc c;
    wmma::load_matrix_sync(a, o->a, 24);
    wmma::load_matrix_sync(b, o->b, 24);
    wmma::load_matrix_sync(c, o->c, 20, wmma::mem_row_major);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(o->d, c, 20, wmma::mem_row_major);
  });
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) ASSERT_EQ(o->d[r * 20 + c], reference(*o, r, c)) << r << "," << c;
}

TEST(EmulatedWmma, ColumnMajorOperandsReadTheTranspose) {
  // A given column-major is Aᵀ of the same memory; B column-major is Bᵀ: (Aᵀ·Bᵀ)[r][c].
  auto o = std::make_unique<Operands>();
  fill(*o, 2);
  run_warp([&] {
    FragACol a;
    FragBCol b;
    FragAcc c;
    wmma::fill_fragment(c, 0.0f);
    wmma::load_matrix_sync(a, o->a, 24);
    wmma::load_matrix_sync(b, o->b, 24);
    wmma::mma_sync(c, a, b, c);
    wmma::store_matrix_sync(o->d, c, 20, wmma::mem_col_major);  // stores Dᵀ
  });
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) {
      float want = 0.0f;
      for (int k = 0; k < 16; ++k)
        want += __bfloat162float(o->a[k * 24 + r]) * __bfloat162float(o->b[c * 24 + k]);
      ASSERT_EQ(o->d[c * 20 + r], want) << r << "," << c;
    }
}

TEST(EmulatedWmma, ElementwiseUseOfFragmentsIsLayoutFree) {
  auto o = std::make_unique<Operands>();
  fill(*o, 3);
  run_warp([&] {
    FragAcc c;
    wmma::load_matrix_sync(c, o->c, 20, wmma::mem_row_major);
    for (int i = 0; i < c.num_elements; ++i) c.x[i] *= 2.0f;
    wmma::store_matrix_sync(o->d, c, 20, wmma::mem_row_major);
  });
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) ASSERT_EQ(o->d[r * 20 + c], 2.0f * o->c[r * 20 + c]);
}

// A kernel that writes an accumulator out by itself, assuming the register layout of sm_80's
// mma.sync m16n8k16 (lane l holds rows l/4 and l/4 + 8, columns 2(l%4) + {0,1}, twice for the two
// 8-column halves): right on some GPU generation maybe, wrong here, as WMMA does not promise it.
TEST(EmulatedWmma, KernelAssumingAFragmentLayoutGetsWrongResults) {
  auto o = std::make_unique<Operands>();
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) o->c[r * 20 + c] = static_cast<float>(r * 16 + c);
  run_warp([&] {
    FragAcc c;
    wmma::load_matrix_sync(c, o->c, 20, wmma::mem_row_major);
    const int lane = static_cast<int>(threadIdx.x % 32);
    for (int i = 0; i < c.num_elements; ++i) {
      const int row = lane / 4 + 8 * ((i / 2) % 2), col = (lane % 4) * 2 + i % 2 + 8 * (i / 4);
      o->d[row * 20 + col] = c.x[i];
    }
  });
  int right = 0;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) right += o->d[r * 20 + c] == static_cast<float>(r * 16 + c);
  EXPECT_LT(right, 32) << "the emulator's fragment mapping looks like a real GPU's layout";
}

TEST(EmulatedWmma, AccumulatorNeverFilledIsNaN) {
  auto o = std::make_unique<Operands>();
  fill(*o, 4);
  run_warp([&] {
    FragA a;
    FragB b;
    FragAcc c;
    wmma::load_matrix_sync(a, o->a, 24);
    wmma::load_matrix_sync(b, o->b, 24);
    wmma::mma_sync(c, a, b, c);  // c: garbage on a GPU
    wmma::store_matrix_sync(o->d, c, 20, wmma::mem_row_major);
  });
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) ASSERT_TRUE(std::isnan(o->d[r * 20 + c]));
}

TEST(EmulatedWmmaDeathTest, LaneSkippingMmaIsReported) {
  auto o = std::make_unique<Operands>();
  fill(*o, 5);
  EXPECT_DEATH(run_warp([&] {
                 FragA a;
                 FragB b;
                 FragAcc c;
                 wmma::fill_fragment(c, 0.0f);
                 wmma::load_matrix_sync(a, o->a, 24);
                 wmma::load_matrix_sync(b, o->b, 24);
                 if (threadIdx.x != 31) wmma::mma_sync(c, a, b, c);
                 wmma::store_matrix_sync(o->d, c, 20, wmma::mem_row_major);
               }),
               "warp-collective violation at wmma::(mma_sync|store_matrix_sync)");
}

TEST(EmulatedWmmaDeathTest, LaneExitingBeforeMmaIsADeadlock) {
  auto o = std::make_unique<Operands>();
  fill(*o, 6);
  EXPECT_DEATH(run_warp([&] {
                 if (threadIdx.x == 7) return;
                 FragA a;
                 FragB b;
                 FragAcc c;
                 wmma::fill_fragment(c, 0.0f);
                 wmma::load_matrix_sync(a, o->a, 24);
                 wmma::load_matrix_sync(b, o->b, 24);
                 wmma::mma_sync(c, a, b, c);
               }),
               "deadlock");
}

TEST(EmulatedWmmaDeathTest, LanesPassingDifferentPointersAreReported) {
  auto o = std::make_unique<Operands>();
  fill(*o, 7);
  EXPECT_DEATH(run_warp([&] {
                 FragA a;
                 wmma::load_matrix_sync(a, threadIdx.x == 3 ? o->a + 16 : o->a, 24);
               }),
               "must be the same on every lane");
}

TEST(EmulatedWmmaDeathTest, MisalignedPointerIsRefused) {
  auto o = std::make_unique<Operands>();
  fill(*o, 8);
  EXPECT_DEATH(run_warp([&] {
                 FragA a;
                 wmma::load_matrix_sync(a, o->a + 8, 24);  // 16 bytes off
               }),
               "not 256-bit");
}

TEST(EmulatedWmmaDeathTest, LdmNotAMultipleOf16BytesIsRefused) {
  auto o = std::make_unique<Operands>();
  fill(*o, 9);
  EXPECT_DEATH(run_warp([&] {
                 FragAcc c;
                 wmma::fill_fragment(c, 0.0f);
                 wmma::store_matrix_sync(o->d, c, 18, wmma::mem_row_major);
               }),
               "ldm 18");
}

TEST(EmulatedWmmaDeathTest, LaneAtAShuffleBesideMmaIsReported) {
  auto o = std::make_unique<Operands>();
  fill(*o, 10);
  EXPECT_DEATH(run_warp([&] {
                 FragA a;
                 if (threadIdx.x == 0)
                   (void)__shfl_sync(0xffffffffu, 1.0f, 0);
                 else
                   wmma::load_matrix_sync(a, o->a, 24);
               }),
               "is at __shfl_sync");
}

// Without __syncwarp a lane may read shared memory another lane has not written yet (the
// emulator runs lanes in shuffled order between warp rendezvous); with it, never.
TEST(EmulatedWmma, SyncwarpOrdersLanes) {
  std::vector<float> shared(32, 0.0f), got(32, 0.0f);
  run_warp([&] {
    const unsigned lane = threadIdx.x % 32;
    shared[lane] = static_cast<float>(lane + 1);
    __syncwarp();
    got[lane] = shared[(lane + 1) % 32];
  });
  for (unsigned l = 0; l < 32; ++l) EXPECT_EQ(got[l], static_cast<float>((l + 1) % 32 + 1));
}

}  // namespace
