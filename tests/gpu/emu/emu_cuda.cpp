#include "tests/gpu/emu/emu_cuda.hpp"

#include <atomic>
#include <barrier>
#include <memory>
#include <stdexcept>
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

void memcpy2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
              std::size_t height) {
  for (std::size_t r = 0; r < height; ++r)
    std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                width);
}

// Worker threads, one per thread of a block, kept across launches (creating hundreds of threads
// per launch dominated the run time).
class Workers {
 public:
  explicit Workers(unsigned n) : n_(n), start_(n + 1), done_(n + 1) {
    for (unsigned t = 0; t < n; ++t) threads_.emplace_back([this, t] { loop(t); });
  }
  ~Workers() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& th : threads_) th.join();
  }
  unsigned size() const { return n_; }
  void run(dim3 grid, const std::function<void()>& body) {
    grid_ = grid;
    body_ = &body;
    start_.arrive_and_wait();
    done_.arrive_and_wait();
  }

 private:
  void loop(unsigned t) {
    threadIdx = uint3{t, 0, 0};
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      for (unsigned z = 0; z < grid_.z; ++z)
        for (unsigned y = 0; y < grid_.y; ++y)
          for (unsigned x = 0; x < grid_.x; ++x) {
            blockIdx = uint3{x, y, z};
            (*body_)();
            // A block's threads finish together before the next block reuses shared memory.
            g_block_barrier->arrive_and_wait();
          }
      done_.arrive_and_wait();
    }
  }
  unsigned n_;
  std::barrier<> start_, done_;
  std::vector<std::thread> threads_;
  dim3 grid_;
  const std::function<void()>* body_ = nullptr;
  std::atomic<bool> stop_{false};
};

std::unique_ptr<Workers> g_workers;

void launch(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& body) {
  const unsigned threads = block.x * block.y * block.z;
  if (threads % 32 != 0 || block.y != 1 || block.z != 1)
    throw std::runtime_error("emulator: blocks must be 1-D multiples of 32 threads");
  blockDim = block;
  gridDim = grid;
  if (!g_workers || g_workers->size() != threads) {
    g_workers.reset();
    g_block_barrier = std::make_unique<std::barrier<>>(threads);
    g_warp_barriers.clear();
    for (unsigned w = 0; w < threads / 32; ++w)
      g_warp_barriers.push_back(std::make_unique<std::barrier<>>(32));
    g_slots.assign(threads, 0.0);
    g_workers = std::make_unique<Workers>(threads);
  }
  g_smem.assign(smem_bytes + 16, 0xFF);  // garbage, as on a GPU
  g_workers->run(grid, body);
}

}  // namespace emu
