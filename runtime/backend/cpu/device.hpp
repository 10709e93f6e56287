// The CPU as a Device: its memory is host memory (a MemoryPool without backing), copies are
// memcpy and the vector operations are the CPU backend's kernels.
#pragma once

#include <memory>
#include <string>

#include "runtime/backend/cpu/backend.hpp"
#include "runtime/backend/device.hpp"

namespace saturn::cpu {

class CpuDevice final : public Device {
 public:
  // Owns a pool named `name` (e.g. "cpu:0") of `capacity` bytes (0: unlimited).
  CpuDevice(std::string name, std::size_t capacity);
  // Over a pool the caller owns and keeps alive (e.g. offload's host pool).
  explicit CpuDevice(MemoryPool& pool);

  const BackendTraits& traits() const override;
  std::string describe() const override { return pool_->name(); }
  MemoryPool& memory() override { return *pool_; }
  Backend::Context& context() { return ctx_; }

  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void synchronize(const char*) override {}
  CopyTicket upload_async(void* dst, const void* src, std::size_t bytes) override;
  CopyTicket download_async(void* dst, const void* src, std::size_t bytes) override;
  void wait_copy(CopyTicket) override {}
  void finish_copies(const char*) override {}
  std::unique_ptr<DeviceTimer> timer() override { return make_host_timer(); }

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
  std::unique_ptr<MemoryPool> owned_;
  MemoryPool* pool_;
  Backend::Context ctx_;
};

}  // namespace saturn::cpu
