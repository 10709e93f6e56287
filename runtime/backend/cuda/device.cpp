#include "runtime/backend/cuda/device.hpp"

#include <fmt/format.h>

#include <vector>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {

CudaDevice::CudaDevice(int index, std::size_t capacity) : index_(index) {
  SATURN_CUDA_CHECK(cudaSetDevice(index));
  cudaDeviceProp prop{};
  SATURN_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  if (capacity == 0) {
    std::size_t free_bytes = 0, total = 0;
    SATURN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
    capacity = free_bytes;
  }
  description_ = fmt::format("cuda:{} ({})", index, prop.name);
  allocator_ = std::make_unique<CachingDeviceAllocator>(index);
  pool_ = std::make_unique<MemoryPool>(fmt::format("cuda:{}", index), capacity, allocator_.get());
  ctx_ = std::make_unique<Context>(index, *pool_);
  allocator_->set_compute_stream(ctx_->stream());
  // A blocking stream like the compute one: work on the legacy default stream is ordered with it
  // too.
  SATURN_CUDA_CHECK(cudaStreamCreate(&copy_stream_));
  SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_mark_, cudaEventDisableTiming));
}

CudaDevice::~CudaDevice() {
  // Copies first (their buffers are pending in the allocator until they are done), then the
  // context (it returns its workspace to the pool), then the pool, then the cache.
  cudaStreamSynchronize(copy_stream_);
  for (auto& [ticket, e] : copies_) cudaEventDestroy(e);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  cudaEventDestroy(compute_mark_);
  cudaStreamDestroy(copy_stream_);
  ctx_.reset();
  pool_.reset();
  allocator_.reset();
}

const BackendTraits& CudaDevice::traits() const {
  return backend_traits(DeviceKind::kCuda);
}

void CudaDevice::upload(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  SATURN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx_->stream()));
  // The caller may reuse `src` at once; pageable copies are staged, but not necessarily done.
  ctx_->synchronize("upload to the device");
}

void CudaDevice::download(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  SATURN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()));
  ctx_->synchronize("download from the device");
}

void CudaDevice::require_pinned(const void* host, std::size_t bytes, const char* what) const {
  for (const void* p :
       {host, static_cast<const void*>(static_cast<const char*>(host) + bytes - 1)}) {
    cudaPointerAttributes a{};
    SATURN_CUDA_CHECK(cudaPointerGetAttributes(&a, p));
    if (a.type != cudaMemoryTypeHost)
      throw Error(fmt::format(
          "{}: asynchronous {} of {} bytes with host memory at {} that is not pinned: the copy "
          "would be staged by the driver and neither overlap compute nor return early; host "
          "buffers of asynchronous copies come from Device::host_allocator() (cudaHostAlloc)",
          description_, what, bytes, host));
  }
}

void CudaDevice::retire_done_copies() {
  while (!copies_.empty()) {
    const cudaError_t st = cudaEventQuery(copies_.front().second);
    if (st == cudaErrorNotReady) return;
    check_cuda(st, "asynchronous copy", __FILE__, __LINE__);
    spare_events_.push_back(copies_.front().second);
    copies_.pop_front();
  }
}

Device::CopyTicket CudaDevice::copy_async(void* dst, const void* src, std::size_t bytes,
                                          cudaMemcpyKind kind, const void* host,
                                          const void* device_side) {
  if (bytes == 0) return 0;
  require_pinned(host, bytes, kind == cudaMemcpyHostToDevice ? "upload" : "download");
  retire_done_copies();
  cudaEvent_t done = nullptr;
  if (spare_events_.empty()) {
    SATURN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = spare_events_.back();
    spare_events_.pop_back();
  }
  try {
    // The copy starts once the compute stream's work so far is done: the upload's destination
    // may be a block whose previous owner's kernels are still reading it, the download's source
    // is written by kernels enqueued before.
    SATURN_CUDA_CHECK(cudaEventRecord(compute_mark_, ctx_->stream()));
    SATURN_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, compute_mark_, 0));
    SATURN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy_stream_));
    allocator_->record_stream(device_side, copy_stream_);
    SATURN_CUDA_CHECK(cudaEventRecord(done, copy_stream_));
  } catch (...) {
    spare_events_.push_back(done);
    throw;
  }
  const CopyTicket ticket = next_ticket_++;
  copies_.emplace_back(ticket, done);
  return ticket;
}

Device::CopyTicket CudaDevice::upload_async(void* dst, const void* src, std::size_t bytes) {
  return copy_async(dst, src, bytes, cudaMemcpyHostToDevice, src, dst);
}

Device::CopyTicket CudaDevice::download_async(void* dst, const void* src, std::size_t bytes) {
  return copy_async(dst, src, bytes, cudaMemcpyDeviceToHost, dst, src);
}

void CudaDevice::wait_copy(CopyTicket ticket) {
  // Tickets retire in order: one no longer listed is done.
  for (const auto& [t, e] : copies_) {
    if (t == ticket) {
      SATURN_CUDA_CHECK(cudaStreamWaitEvent(ctx_->stream(), e, 0));
      return;
    }
    if (t > ticket) return;
  }
}

void CudaDevice::finish_copies(const char* what) {
  check_cuda(cudaStreamSynchronize(copy_stream_), what, __FILE__, __LINE__);
  for (auto& [t, e] : copies_) spare_events_.push_back(e);
  copies_.clear();
}

void CudaDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  SATURN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_->stream()));
}

void CudaDevice::zero(void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  SATURN_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, ctx_->stream()));
}

void CudaDevice::synchronize(const char* what) {
  ctx_->synchronize(what);
}

namespace {

// Two events on the compute stream: the time between them is what the stream took, whatever
// the host did meanwhile (it returns from launches long before the work is done).
class EventTimer final : public DeviceTimer {
 public:
  explicit EventTimer(Context& ctx) : ctx_(ctx) {
    SATURN_CUDA_CHECK(cudaSetDevice(ctx.device()));
    SATURN_CUDA_CHECK(cudaEventCreate(&start_));
    const cudaError_t e = cudaEventCreate(&stop_);
    if (e != cudaSuccess) {
      cudaEventDestroy(start_);
      check_cuda(e, "cudaEventCreate(&stop_)", __FILE__, __LINE__);
    }
  }
  ~EventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start() override {
    SATURN_CUDA_CHECK(cudaEventRecord(start_, ctx_.stream()));
    started_ = true;
    stopped_ = false;
  }
  void stop() override {
    if (!started_) throw Error("device timer: stop() before start()");
    SATURN_CUDA_CHECK(cudaEventRecord(stop_, ctx_.stream()));
    stopped_ = true;
  }
  double seconds() override {
    if (!started_ || !stopped_) throw Error("device timer: seconds() before start() and stop()");
    SATURN_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    SATURN_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) * 1e-3;
  }
  const char* clock() const override { return "cuda events"; }

 private:
  Context& ctx_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  bool started_ = false, stopped_ = false;
};

}  // namespace

std::unique_ptr<DeviceTimer> CudaDevice::timer() {
  return std::make_unique<EventTimer>(*ctx_);
}

double CudaDevice::sum_of_squares(const float* x, std::size_t n) {
  return cuda::sum_of_squares(*ctx_, x, n);
}

void CudaDevice::add_exact_squares(ExactSquareSum& into, const float* x, std::size_t n) {
  // Binned on the device (reduce.cu); the words of two exact sums add elementwise (no
  // overflow: each is below 2^33) and from_summed_words propagates the carries.
  std::vector<std::int64_t> w = into.words();
  const std::vector<std::int64_t> part = cuda::exact_square_sum_words(*ctx_, x, n);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] += part[i];
  into.from_summed_words(w);
}

void CudaDevice::add(float* dst, const float* src, std::size_t n) {
  cuda::add(*ctx_, dst, src, n);
}

void CudaDevice::to_weights(void* weights, const float* master, std::size_t n) {
  if (weights == static_cast<const void*>(master)) return;
  convert(*ctx_, static_cast<bf16*>(weights), master, n);
}

void CudaDevice::adamw_update(float* master, void* weights, const float* grad, float* m, float* v,
                              std::size_t n, const AdamWStep& s, float grad_scale) {
  cuda::adamw_update(*ctx_, master, static_cast<bf16*>(weights), grad, m, v, n, s, grad_scale);
}

void CudaDevice::accumulate(double* acc, float* g, std::size_t n) {
  cuda::accumulate(*ctx_, acc, g, n);
}

void CudaDevice::round_into(float* out, double* acc, std::size_t n) {
  cuda::round_into(*ctx_, out, acc, n);
}

void CudaDevice::widen(double* dst, const float* src, std::size_t n) {
  cuda::widen(*ctx_, dst, src, n);
}

void CudaDevice::add(double* dst, const double* src, std::size_t n) {
  cuda::add(*ctx_, dst, src, n);
}

void CudaDevice::add_scaled(double* acc, const float* x, double weight) {
  cuda::add_scaled(*ctx_, acc, x, weight);
}

}  // namespace saturn::cuda
