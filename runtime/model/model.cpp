#include "runtime/model/model.hpp"

#include <fmt/format.h>

#include "runtime/backend/cpu/backend.hpp"
#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cuda/types.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/activations.hpp"

namespace saturn {

// Defined in transformer_cpu.cpp (the CPU instantiation of the model program).
std::unique_ptr<Model> make_cpu_model(cpu::CpuDevice& device, const ModelConfig& config,
                                      const ModelOptions& options);

std::unique_ptr<Model> make_model(Device& device, const ModelConfig& config,
                                  const ModelOptions& options) {
  if (device.kind() == DeviceKind::kCuda)
    return cuda_provider().make_model(device, config, options);
  auto* cpu_device = dynamic_cast<cpu::CpuDevice*>(&device);
  if (cpu_device == nullptr)
    throw Error(fmt::format("make_model: {} is not a CPU device", device.describe()));
  return make_cpu_model(*cpu_device, config, options);
}

std::size_t model_activation_bytes(DeviceKind backend, const ModelConfig& config,
                                   const ModelOptions& options, int B, int T, int slots) {
  if (backend == DeviceKind::kCuda)
    return count_activation_bytes<cuda::BackendTypes>(config, options, B, T, slots);
  return count_activation_bytes<cpu::Backend>(config, options, B, T, slots);
}

}  // namespace saturn
