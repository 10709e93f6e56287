#include "tests/gpu/emu/emu_cuda.hpp"

#include <barrier>
#include <memory>
#include <thread>
#include <vector>

thread_local uint3 threadIdx;
thread_local uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

namespace emu {
namespace {
std::unique_ptr<std::barrier<>> g_block_barrier;
std::vector<std::unique_ptr<std::barrier<>>> g_warp_barriers;
std::vector<double> g_slots;  // one per thread of the block
std::vector<unsigned char> g_smem;
}  // namespace

void syncthreads() {
  g_block_barrier->arrive_and_wait();
}

double shfl(double v, int src_lane) {
  const unsigned t = threadIdx.x, warp = t / 32;
  auto& bar = *g_warp_barriers[warp];
  g_slots[t] = v;
  bar.arrive_and_wait();
  const double r = g_slots[warp * 32 + static_cast<unsigned>(src_lane & 31)];
  bar.arrive_and_wait();  // nobody overwrites a slot before every lane has read
  return r;
}
float shfl(float v, int src_lane) {
  return static_cast<float>(shfl(static_cast<double>(v), src_lane));
}

void* dynamic_smem() {
  return g_smem.data();
}

void launch(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads % 32 != 0 || block.y != 1 || block.z != 1)
    throw std::runtime_error("emulator: blocks must be 1-D multiples of 32 threads");
  blockDim = block;
  gridDim = grid;
  g_block_barrier = std::make_unique<std::barrier<>>(threads);
  g_warp_barriers.clear();
  for (unsigned w = 0; w < threads / 32; ++w)
    g_warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
  g_slots.assign(threads, 0.0);
  g_smem.assign(smem_bytes + 16, 0xFF);  // garbage, as on a GPU
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      threadIdx = uint3{t, 0, 0};
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            blockIdx = uint3{x, y, z};
            body();
            // A block's threads finish together before the next block reuses shared memory.
            g_block_barrier->arrive_and_wait();
          }
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace emu
