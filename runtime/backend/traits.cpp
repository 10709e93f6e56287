// What each backend keeps, in which precision (backend/device.hpp): known on every machine, so
// that estimates for GPU configurations can be made where no GPU is.
#include <fmt/format.h>

#include <chrono>

#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace saturn {

namespace {

class HostTimer final : public DeviceTimer {
 public:
  void start() override {
    start_ = std::chrono::steady_clock::now();
    started_ = true;
    stopped_ = false;
  }
  void stop() override {
    if (!started_) throw Error("device timer: stop() before start()");
    stop_ = std::chrono::steady_clock::now();
    stopped_ = true;
  }
  double seconds() override {
    if (!started_ || !stopped_) throw Error("device timer: seconds() before start() and stop()");
    return std::chrono::duration<double>(stop_ - start_).count();
  }
  const char* clock() const override { return "steady_clock"; }

 private:
  std::chrono::steady_clock::time_point start_, stop_;
  bool started_ = false, stopped_ = false;
};

}  // namespace

std::unique_ptr<DeviceTimer> make_host_timer() {
  return std::make_unique<HostTimer>();
}

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "?";
}

DeviceKind parse_device_kind(const std::string& name) {
  if (name == "cpu") return DeviceKind::kCpu;
  if (name == "cuda") return DeviceKind::kCuda;
  throw InputError(fmt::format("unknown device '{}' (valid: cpu, cuda)", name));
}

std::size_t BackendTraits::footprint(std::size_t bytes) const {
  if (kind == DeviceKind::kCpu || bytes == 0) return bytes;
  // cuda::CachingDeviceAllocator::round (test_cuda_plan holds the two equal): 512-byte granules
  // below 1 MiB, 2 MiB ones above.
  constexpr std::size_t kSmall = 512, kLarge = std::size_t{2} << 20, kSplit = std::size_t{1} << 20;
  const std::size_t g = bytes < kSplit ? kSmall : kLarge;
  return (bytes + g - 1) / g * g;
}

const BackendTraits& backend_traits(DeviceKind kind) {
  // CPU: fp32 everywhere, the canonical unpadded layout. CUDA: bf16 activations and a bf16 copy
  // of the weights for the kernels; parameter groups start at 64 elements (128 bytes of bf16,
  // 256 of fp32), so every group's GEMM operands and every shard boundary of a group are
  // aligned as cuBLASLt's fast kernels and vector loads want.
  // The CUDA context's cuBLASLt workspace (32 MiB, cuda/context.cpp) and its reduction scratch
  // (513 doubles, one 512-byte granule of the caching allocator).
  static const BackendTraits cpu{DeviceKind::kCpu, DType::kFloat32, DType::kFloat32, 1, 0};
  static const BackendTraits cuda{DeviceKind::kCuda, DType::kBFloat16, DType::kBFloat16, 64,
                                  (std::size_t{32} << 20) + 4608};
  return kind == DeviceKind::kCuda ? cuda : cpu;
}

}  // namespace saturn
