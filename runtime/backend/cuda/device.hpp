// One GPU as a Device (backend/device.hpp): its memory through the caching allocator, its
// stream and handles (Context), copies with the host, and the strategies' vector operations
// as kernels (vector.cu, reduce.cu, adamw.cu). Everything is ordered on the context's stream.
#pragma once

#include <memory>
#include <string>

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
  int index_;
  std::string description_;
  std::unique_ptr<CachingDeviceAllocator> allocator_;
  std::unique_ptr<MemoryPool> pool_;
  std::unique_ptr<Context> ctx_;
};

}  // namespace saturn::cuda
