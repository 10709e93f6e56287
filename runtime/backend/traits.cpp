// What each backend keeps, in which precision (backend/device.hpp): known on every machine, so
// that estimates for GPU configurations can be made where no GPU is.
#include <fmt/format.h>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/core/error.hpp"

namespace saturn {

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

namespace {

constexpr const char* kNotInstalled =
    "no CUDA provider is installed in this program (its main() must call "
    "install_cuda_provider(); a build error)";

int not_installed_count(std::string* why) {
  if (why != nullptr) *why = kNotInstalled;
  return 0;
}
std::unique_ptr<Device> not_installed_device(int, std::size_t) {
  throw Error(kNotInstalled);
}
std::unique_ptr<Model> not_installed_model(Device&, const ModelConfig&, const ModelOptions&) {
  throw Error(kNotInstalled);
}

const CudaProvider kNone{"none", &not_installed_count, &not_installed_device,
                         &not_installed_model};
const CudaProvider* g_provider = &kNone;

}  // namespace

const CudaProvider& cuda_provider() {
  return *g_provider;
}

void set_cuda_provider(const CudaProvider& provider) {
  g_provider = &provider;
}

}  // namespace saturn
