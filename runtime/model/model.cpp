#include "runtime/model/model.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/backend/cpu/backend.hpp"
#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cuda/types.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/activations.hpp"

namespace saturn {

// Defined in transformer_cpu.cpp (the CPU instantiation of the model program).
std::unique_ptr<Model> make_cpu_model(cpu::CpuDevice& device, const ModelConfig& config,
                                      const ModelOptions& options);

void Model::forward(const std::int32_t* tokens, const std::int32_t* targets) {
  embed_forward(tokens);
  for (int l = first_layer(); l < end_layer(); ++l) block_forward(l);
  head_forward(targets);
}

void Model::backward(float dloss) {
  head_backward(dloss);
  for (int l = end_layer() - 1; l >= first_layer(); --l) block_backward(l);
  embed_backward();
}

std::unique_ptr<Model> make_model(Device& device, const ModelConfig& config,
                                  const ModelOptions& options) {
  if (device.kind() == DeviceKind::kCuda) return make_cuda_model(device, config, options);
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

void generate_canonical_weights(
    const ModelConfig& config, std::uint64_t seed,
    const std::function<void(std::size_t, const ParamTensor&, const float*)>& visit) {
  const ParameterLayout layout(config);
  Rng rng(seed);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.n_layer);
  std::vector<float> w;
  for (std::size_t k = 0; k < layout.tensors().size(); ++k) {
    const ParamTensor& t = layout.tensors()[k];
    w.resize(t.numel);
    const bool is_norm = t.name.find("ln_") != std::string::npos ||
                         t.name.find("layernorm") != std::string::npos ||
                         t.name.find("norm.weight") != std::string::npos;
    const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      std::fill(w.begin(), w.end(), 0.0f);
    } else if (is_norm) {
      std::fill(w.begin(), w.end(), 1.0f);
    } else {
      const bool residual_proj = t.name.find("c_proj.weight") != std::string::npos ||
                                 t.name.find("o_proj") != std::string::npos ||
                                 t.name.find("down_proj") != std::string::npos;
      const double std = 0.02 * (residual_proj ? residual_scale : 1.0);
      for (std::size_t i = 0; i < t.numel; ++i) w[i] = static_cast<float>(std * rng.normal());
    }
    visit(k, t, w.data());
  }
}

}  // namespace saturn
