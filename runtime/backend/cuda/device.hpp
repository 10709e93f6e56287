// One GPU as a Device (backend/device.hpp): its memory through the caching allocator, its
// stream and handles (Context), copies with the host, and the strategies' vector operations
// as kernels (vector.cu, reduce.cu, adamw.cu). Everything is ordered on the context's stream,
// except the asynchronous copies: they run on a copy stream of their own, each after an event
// of the compute stream (its device buffer's earlier users are done), and record an event the
// compute stream can wait on (wait_copy). Their host side must be pinned (host_allocator(),
// checked with cudaPointerGetAttributes), and their device buffer is recorded with the caching
// allocator as used by the copy stream, so it is not reused before the copy is done.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/backend/cuda/allocator.hpp"
#include "runtime/backend/cuda/context.hpp"
#include "runtime/backend/device.hpp"

namespace saturn::cuda {

class CudaDevice final : public Device {
 public:
  // GPU `index` with `capacity` bytes for its pool (0: what the GPU has free).
  CudaDevice(int index, std::size_t capacity);
  ~CudaDevice() override;

  const BackendTraits& traits() const override;
  std::string describe() const override { return description_; }
  int index() const { return index_; }  // the CUDA device ordinal
  MemoryPool& memory() override { return *pool_; }
  Context& context() { return *ctx_; }
  CachingDeviceAllocator& allocator() { return *allocator_; }

  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void synchronize(const char* what) override;
  // CUDA events on the compute stream.
  std::unique_ptr<DeviceTimer> timer() override;

  BackingAllocator* host_allocator() override { return &pinned_; }
  CopyTicket upload_async(void* dst, const void* src, std::size_t bytes) override;
  CopyTicket download_async(void* dst, const void* src, std::size_t bytes) override;
  void wait_copy(CopyTicket ticket) override;
  void finish_copies(const char* what) override;
  cudaStream_t copy_stream() const { return copy_stream_; }

  double sum_of_squares(const float* x, std::size_t n) override;
  void add_exact_squares(ExactSquareSum& into, const float* x, std::size_t n) override;
  void add(float* dst, const float* src, std::size_t n) override;
  void to_weights(void* weights, const float* master, std::size_t n) override;
  void adamw_update(float* master, void* weights, const float* grad, float* m, float* v,
                    std::size_t n, const AdamWStep& step, float grad_scale) override;

  void accumulate(double* acc, float* g, std::size_t n) override;
  void round_into(float* out, double* acc, std::size_t n) override;
  void widen(double* dst, const float* src, std::size_t n) override;
  void add(double* dst, const double* src, std::size_t n) override;
  void add_scaled(double* acc, const float* x, double weight) override;

 private:
  // Enqueues one copy on the copy stream behind the compute stream; returns its ticket.
  CopyTicket copy_async(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                        const void* host, const void* device_side);
  // Throws Error unless [host, host + bytes) is pinned host memory.
  void require_pinned(const void* host, std::size_t bytes, const char* what) const;
  // Returns the events of copies that are done to spare_events_.
  void retire_done_copies();

  int index_;
  std::string description_;
  PinnedHostAllocator pinned_;  // before the pools over it are made, after they are gone
  std::unique_ptr<CachingDeviceAllocator> allocator_;
  std::unique_ptr<MemoryPool> pool_;
  std::unique_ptr<Context> ctx_;
  cudaStream_t copy_stream_ = nullptr;
  cudaEvent_t compute_mark_ = nullptr;  // the compute stream's point each copy starts after
  CopyTicket next_ticket_ = 1;
  std::deque<std::pair<CopyTicket, cudaEvent_t>> copies_;  // issued, possibly not done; in order
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace saturn::cuda
