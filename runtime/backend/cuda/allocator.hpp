// The CUDA backend's allocators behind MemoryPool (runtime/core/memory.hpp): device buffers, and
// the pinned host memory that streams to and from the device, are counted by the same
// accounting as any other memory, so peaks and capacities read the same for the profiler and
// the solver whichever backend trains.
//
// CachingDeviceAllocator. cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, and training allocates the same sizes every step, so released blocks are kept
// and handed out again for the same rounded size. When cudaMalloc fails the cache is returned to
// the driver and the allocation tried once more; if that fails too the pool reports
// OutOfMemoryError.
//
// Streams. Every block is allocated for the compute stream (Context::stream()): work on one
// stream runs in order, so a block released there and handed out again is only touched by the
// new owner's work after the old owner's, without events. A block that another stream used (the
// device's copy stream, a NCCL stream) is different: the host releases it when it has enqueued
// that use, not when the use is done. Whoever hands a block to another stream says so with
// record_stream(ptr, stream), as PyTorch's allocator has it (CudaDevice does it for every
// asynchronous copy; a communicator does it for the buffers its stream reads or writes). On
// release, an event is recorded on each such stream and the block waits in `pending_` until
// every one of them completed (cudaEventQuery, checked at each allocation); only then is it
// cached for reuse. So a block freed while a copy or a collective still reads or writes it is
// never handed out early, whatever the host does meanwhile. When memory runs short, pending
// blocks are waited for (cudaEventSynchronize) before the cache is emptied.
//
// PinnedHostAllocator. cudaHostAlloc'd (page-locked) host memory: the GPU's copy engines read
// and write it directly, so a cudaMemcpyAsync from it is asynchronous and overlaps compute
// (from pageable memory the driver stages it and the host waits). Offload's host state
// (master weights, gradients, AdamW moments) lives there (Device::host_allocator()).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/core/memory.hpp"

namespace saturn::cuda {

class CachingDeviceAllocator final : public BackingAllocator {
 public:
  explicit CachingDeviceAllocator(int device);
  ~CachingDeviceAllocator() override;
  CachingDeviceAllocator(const CachingDeviceAllocator&) = delete;
  CachingDeviceAllocator& operator=(const CachingDeviceAllocator&) = delete;

  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) noexcept override;
  // Enqueued on the compute stream (set_compute_stream): ordered with the kernels, no host wait.
  void zero(void* ptr, std::size_t bytes) override;
  // The stream zero() enqueues on, once the device's context (which owns it) exists; until then
  // the legacy default stream, which orders with the blocking compute stream too.
  void set_compute_stream(cudaStream_t stream) { compute_stream_ = stream; }
  bool host_accessible() const override { return false; }
  const char* describe() const override { return "cudaMalloc"; }
  // The pool counts rounded sizes, so its peak matches the device memory really taken.
  std::size_t footprint(std::size_t bytes) const override { return round(bytes); }

  // `stream` (other than the compute stream) uses the live block that contains `ptr`, with work
  // enqueued up to now: when the block is released it is not reused before that work is done.
  // Throws Error when `ptr` is not inside a live block of this allocator.
  void record_stream(const void* ptr, cudaStream_t stream);

  // Bytes held from the driver: live blocks plus cached and pending ones, each rounded.
  std::size_t reserved() const;
  std::size_t peak_reserved() const;
  std::size_t cached() const;
  // Released blocks still waiting for another stream's work (not yet reusable).
  std::size_t pending() const;
  // Returns every cached block to the driver (pending ones stay until their streams are done).
  void empty_cache();
  int device() const { return device_; }
  // The block size a request of `bytes` occupies: 512-byte granules below 1 MiB, 2 MiB ones
  // above (the driver's own granularity for large allocations).
  static std::size_t round(std::size_t bytes);

 private:
  struct Pending {
    void* ptr = nullptr;
    std::size_t size = 0;
    std::vector<cudaEvent_t> events;  // one per stream that used the block
  };
  void empty_cache_locked();
  // Caches every pending block whose events all completed; with `wait`, waits for them first.
  void collect_pending_locked(bool wait);
  cudaEvent_t take_event_locked();
  int device_;
  cudaStream_t compute_stream_ = nullptr;  // legacy default stream until set
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;                    // rounded size -> cached block
  std::map<const void*, std::size_t> live_;                   // block start -> rounded size
  std::map<const void*, std::vector<cudaStream_t>> used_by_;  // live blocks other streams use
  std::vector<Pending> pending_;
  std::vector<cudaEvent_t> spare_events_;
  std::size_t reserved_ = 0, peak_reserved_ = 0, cached_ = 0, pending_bytes_ = 0;
};

class PinnedHostAllocator final : public BackingAllocator {
 public:
  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) noexcept override;
  void zero(void* ptr, std::size_t bytes) override;
  bool host_accessible() const override { return true; }
  const char* describe() const override { return "cudaHostAlloc (pinned host memory)"; }
};

}  // namespace saturn::cuda
