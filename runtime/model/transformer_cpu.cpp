// The model program on the CPU backend.
#include "runtime/backend/cpu/backend.hpp"
#include "runtime/backend/cpu/device.hpp"
#include "runtime/model/transformer.hpp"

namespace saturn {

template class Transformer<cpu::Backend>;

std::unique_ptr<Model> make_cpu_model(cpu::CpuDevice& device, const ModelConfig& config,
                                      const ModelOptions& options) {
  return std::make_unique<Transformer<cpu::Backend>>(config, options, device.context(),
                                                     device.memory());
}

}  // namespace saturn
