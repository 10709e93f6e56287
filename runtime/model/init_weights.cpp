// The canonical initial weights (model.hpp): the same values for every backend, strategy and
// degree, streamed tensor by tensor.
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/rng.hpp"
#include "runtime/model/model.hpp"

namespace saturn {

void generate_canonical_weights(
    const ModelConfig& config, std::uint64_t seed,
    const std::function<void(std::size_t, const ParamTensor&, const float*)>& visit) {
  const ParameterLayout layout(config);
  Rng rng(seed);
  // Adapters draw from a stream of their own, so that a LoRA job's base starts exactly as the
  // same model's full fine-tune would (and adapters of another rank start the same base).
  Rng adapter_rng(seed ^ 0x4c6f5241ULL);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.n_layer);
  std::vector<float> w;
  for (std::size_t k = 0; k < layout.tensors().size(); ++k) {
    const ParamTensor& t = layout.tensors()[k];
    w.resize(t.numel);
    const bool is_norm = t.name.find("ln_") != std::string::npos ||
                         t.name.find("layernorm") != std::string::npos ||
                         t.name.find("norm.weight") != std::string::npos;
    const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
    const bool lora_a = t.name.find(".lora_A.") != std::string::npos;
    const bool lora_b = t.name.find(".lora_B.") != std::string::npos;
    if (lora_a) {
      // PEFT's A: kaiming_uniform_(a = sqrt(5)), i.e. uniform in +-1/sqrt(fan_in).
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.canonical_shape[1]));
      for (std::size_t i = 0; i < t.numel; ++i)
        w[i] = static_cast<float>(bound * (2.0 * adapter_rng.uniform() - 1.0));
    } else if (lora_b) {
      std::fill(w.begin(), w.end(), 0.0f);  // the adapted model starts as the base
    } else if (is_bias) {
      std::fill(w.begin(), w.end(), 0.0f);
    } else if (is_norm) {
      // A norm starts as the identity scale: w = 1, or w = 0 where it is applied as (1 + w)
      // (Gemma's, which transformers initialises to zeros).
      std::fill(w.begin(), w.end(), config.norm_unit_offset ? 0.0f : 1.0f);
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
