// The CUDA backend's memory across streams, on the emulator: the caching allocator does not hand
// out a block another stream may still use (an event per stream that used it; the emulator can
// hold a stream back so its events stay pending, emu_testing.hpp), asynchronous copies run on
// the device's copy stream from pinned host memory only, and offload's host state lives in the
// device's pinned host memory.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "runtime/backend/cuda/allocator.hpp"
#include "runtime/backend/cuda/device.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/core/error.hpp"
#include "runtime/parallel/strategy.hpp"
#include "tests/gpu/emu/emu_testing.hpp"
#include "tests/parallel/parallel_util.hpp"

namespace saturn::testing {
namespace {

using cuda::CachingDeviceAllocator;

std::unique_ptr<cuda::CudaDevice> make_cuda_device() {
  std::unique_ptr<Device> d = make_device(DeviceKind::kCuda, 0, 0);
  auto* cuda = dynamic_cast<cuda::CudaDevice*>(d.get());
  if (cuda == nullptr) throw Error("the CUDA provider did not return a cuda::CudaDevice");
  d.release();
  return std::unique_ptr<cuda::CudaDevice>(cuda);
}

bool pinned(const void* p) {
  cudaPointerAttributes a{};
  return cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost;
}

TEST(CachingAllocator, BlockAnotherStreamUsedIsNotReusedBeforeItsEventCompletes) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  CachingDeviceAllocator alloc(0);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  const std::size_t bytes = 3000, size = CachingDeviceAllocator::round(bytes);

  // A block only the compute stream used is cached at once and handed out again.
  void* plain = alloc.allocate(bytes);
  alloc.release(plain, bytes);
  EXPECT_EQ(alloc.pending(), 0u);
  EXPECT_EQ(alloc.allocate(bytes), plain);

  // One that `other` used, released while `other`'s work is still running: pending.
  void* used = alloc.allocate(bytes);
  ASSERT_NE(used, plain);
  alloc.record_stream(static_cast<char*>(used) + 100, other);  // any address inside the block
  emu::hold_stream(other, true);
  alloc.release(used, bytes);
  EXPECT_EQ(alloc.pending(), size);
  alloc.release(plain, bytes);
  // Requests of its size get other blocks, however often they come.
  for (int i = 0; i < 3; ++i) {
    void* p = alloc.allocate(bytes);
    EXPECT_NE(p, used) << "request " << i;
    alloc.release(p, bytes);
  }
  void* fresh = alloc.allocate(bytes);
  void* fresh2 = alloc.allocate(bytes);  // the cache has only `plain`: a new block
  EXPECT_NE(fresh2, used);
  EXPECT_EQ(alloc.pending(), size);

  // Once `other` is done, the next allocation finds the block reusable.
  emu::hold_stream(other, false);
  void* again = alloc.allocate(bytes);
  EXPECT_EQ(again, used);
  EXPECT_EQ(alloc.pending(), 0u);
  alloc.release(again, bytes);
  alloc.release(fresh, bytes);
  alloc.release(fresh2, bytes);
  EXPECT_EQ(alloc.cached(), alloc.reserved());
  alloc.empty_cache();
  EXPECT_EQ(alloc.reserved(), 0u);
  cudaStreamDestroy(other);
}

// Buffer::zero() through the device's pool is a cudaMemsetAsync on the compute stream: no host
// wait, and ordered with the kernels (issue 35; it was a cudaMemset on the legacy stream).
TEST(CudaDevice, ZeroIsEnqueuedOnTheComputeStream) {
  auto device = make_cuda_device();
  Buffer<float> b(device->memory(), 1000, "zeroed");
  const emu::HostWaits before = emu::host_waits();
  const std::uint64_t memsets = emu::memset_async_calls();
  b.zero();
  EXPECT_EQ(emu::host_waits().total(), before.total());
  EXPECT_EQ(emu::memset_async_calls(), memsets + 1);
  std::vector<float> host(1000, 1.0f);
  device->download(host.data(), b.data(), host.size() * sizeof(float));
  for (float x : host) ASSERT_EQ(x, 0.0f);
}

TEST(CachingAllocator, RecordStreamOutsideALiveBlockIsAnError) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  CachingDeviceAllocator alloc(0);
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  void* p = alloc.allocate(512);
  alloc.release(p, 512);
  EXPECT_THROW(alloc.record_stream(p, other), Error);  // released: no longer live
  int host = 0;
  EXPECT_THROW(alloc.record_stream(&host, other), Error);
  alloc.empty_cache();
  cudaStreamDestroy(other);
}

TEST(CudaDevice, AsynchronousCopiesRoundTripThroughPinnedMemory) {
  auto device = make_cuda_device();
  MemoryPool host("pinned", 0, device->host_allocator());
  constexpr std::size_t n = 1000;
  Buffer<float> in(host, n, "in"), out(host, n, "out");
  EXPECT_TRUE(pinned(in.data()));
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * 0.5f;
  Buffer<float> d(device->memory(), n, "device");
  const Device::CopyTicket up = device->upload_async(d.data(), in.data(), n * sizeof(float));
  EXPECT_GT(up, 0u);
  device->wait_copy(up);
  device->download_async(out.data(), d.data(), n * sizeof(float));
  device->finish_copies("test");
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], in[i]) << i;
}

TEST(CudaDevice, AsynchronousCopiesRefusePageableHostMemory) {
  auto device = make_cuda_device();
  std::vector<float> pageable(64, 1.0f);
  Buffer<float> d(device->memory(), 64, "device");
  try {
    device->upload_async(d.data(), pageable.data(), 64 * sizeof(float));
    FAIL() << "an asynchronous upload from pageable memory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not pinned"), std::string::npos) << e.what();
  }
  EXPECT_THROW(device->download_async(pageable.data(), d.data(), 64 * sizeof(float)), Error);
  // A plain host pool is pageable too; the device's host allocator is pinned.
  MemoryPool plain("plain");
  Buffer<float> p(plain, 16, "x");
  EXPECT_FALSE(pinned(p.data()));
  EXPECT_THROW(device->upload_async(d.data(), p.data(), 16 * sizeof(float)), Error);
}

TEST(CudaDevice, CopyBuffersWaitForTheCopyStreamBeforeReuse) {
  auto device = make_cuda_device();
  MemoryPool host("pinned", 0, device->host_allocator());
  constexpr std::size_t n = 4096;
  Buffer<float> src(host, n, "src");
  src.zero();
  emu::hold_stream(device->copy_stream(), true);
  void* first = nullptr;
  {
    Buffer<float> d(device->memory(), n, "device");
    first = d.data();
    device->upload_async(d.data(), src.data(), n * sizeof(float));
  }  // released while the copy stream is (notionally) still copying into it
  EXPECT_GT(device->allocator().pending(), 0u);
  {
    Buffer<float> d(device->memory(), n, "device");
    EXPECT_NE(static_cast<void*>(d.data()), first) << "a block the copy stream writes was reused";
  }
  emu::hold_stream(device->copy_stream(), false);
  Buffer<float> d(device->memory(), n, "device");
  EXPECT_EQ(device->allocator().pending(), 0u);
  device->finish_copies("test");
}

// Offload keeps its master weights, gradients and AdamW moments in the device's pinned host
// memory, and refuses a host pool that is not.
TEST(Offload, HostStateIsPinnedOnCuda) {
  comm::Communicator& w = world();
  if (w.size() != 1) GTEST_SKIP() << "registered for one rank";
  auto device = make_cuda_device();
  parallel::StrategySpec spec;
  spec.model = tiny_model(Arch::kGpt2);
  spec.train = tiny_train();
  spec.degree = 1;
  spec.backend = DeviceKind::kCuda;
  {
    MemoryPool plain("plain host");
    auto comms = comm::make_comm_pair(w, *device);
    auto s = parallel::make_strategy("offload", spec);
    try {
      s->setup(*comms, *device, plain);
      FAIL() << "offload accepted a pageable host pool on CUDA";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("host_allocator"), std::string::npos) << e.what();
    }
  }
  MemoryPool host("host", 0, device->host_allocator());
  auto comms = comm::make_comm_pair(w, *device);
  auto s = parallel::make_strategy("offload", spec);
  s->setup(*comms, *device, host);
  const parallel::Estimate e = s->estimate();
  EXPECT_EQ(host.in_use(), e.host_bytes);  // everything offload keeps on the host is here
  for (auto kind :
       {parallel::StateKind::kParams, parallel::StateKind::kAdamM, parallel::StateKind::kAdamV}) {
    const StateSlices slices = s->export_state(kind);
    ASSERT_FALSE(slices.empty());
    for (const TensorSlice& t : slices)
      if (t.elements() > 1 && t.count.size() == 1) {
        // Contiguous slices point into the state itself (host memory the strategy owns).
        EXPECT_TRUE(pinned(t.data)) << t.name;
      }
  }
  // A step trains (the copies it issues are checked to be from pinned memory), and moves the
  // bytes the estimate says, with one micro-batch and with several (gradients copied in).
  SharedData data(spec.model.vocab_size);
  data::TokenLoader loader(data::TokenArray::open(data.train(), spec.model.vocab_size),
                           spec.train.seq_len, 1);
  const parallel::StepResult r = s->train_step(loader.next_batch(spec.train.batch_size), 0);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_EQ(s->stats().host_transfer_bytes, e.host_transfer_bytes);
  spec.knobs = parallel::parse_knobs({"micro_batch_size=2"});
  MemoryPool host4("host", 0, device->host_allocator());
  auto s4 = parallel::make_strategy("offload", spec);
  const parallel::Estimate e4 = s4->estimate();
  ASSERT_EQ(e4.micro_batches, 4);
  s4->setup(*comms, *device, host4);
  s4->train_step(loader.next_batch(spec.train.batch_size), 0);
  EXPECT_EQ(s4->stats().host_transfer_bytes, e4.host_transfer_bytes);
}

// Issue 18: a training step waits for the device a fixed number of times (the gradient norm, the
// loss), however many micro-batches it has: losses and gradients accumulate on the device, and
// nothing inside the micro-batch loop reads a result back or synchronises.
TEST(HostWaits, NonePerMicroBatch) {
  comm::Communicator& w = world();
  if (w.size() != 1) GTEST_SKIP() << "registered for one rank";
  auto device = make_cuda_device();
  SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  for (const std::string name : {"ddp", "fsdp", "offload"}) {
    SCOPED_TRACE(name);
    long waits[2] = {0, 0};
    int micro[2] = {0, 0};
    for (int variant = 0; variant < 2; ++variant) {
      parallel::StrategySpec spec;
      spec.model = tiny_model(Arch::kGpt2);
      spec.train = tiny_train();
      spec.degree = 1;
      spec.backend = DeviceKind::kCuda;
      spec.knobs =
          parallel::parse_knobs({variant == 0 ? "micro_batch_size=8" : "micro_batch_size=2"});
      MemoryPool host("host", 0, device->host_allocator());
      auto comms = comm::make_comm_pair(w, *device);
      auto s = parallel::make_strategy(name, spec);
      micro[variant] = s->estimate().micro_batches;
      s->setup(*comms, *device, host);
      data::TokenLoader loader(data::TokenArray::open(data.train(), spec.model.vocab_size),
                               spec.train.seq_len, 1);
      s->train_step(loader.next_batch(spec.train.batch_size), 0);  // first step: warm-up
      const long before = emu::host_waits().total();
      const parallel::StepResult r = s->train_step(loader.next_batch(spec.train.batch_size), 1);
      waits[variant] = emu::host_waits().total() - before;
      EXPECT_TRUE(std::isfinite(r.loss));
    }
    ASSERT_EQ(micro[0], 1);
    ASSERT_EQ(micro[1], 4);
    std::printf("[ %-8s ] host waits per step: %ld with 1 micro-batch, %ld with 4\n", name.c_str(),
                waits[0], waits[1]);
    EXPECT_EQ(waits[0], waits[1]) << "a host wait inside the micro-batch loop";
    EXPECT_GT(waits[0], 0) << "the counter saw no wait at all (the step reads its loss)";
  }
}

}  // namespace
}  // namespace saturn::testing
