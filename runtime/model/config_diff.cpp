#include "runtime/model/config_diff.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace saturn {

std::optional<ModelDifference> first_difference(const ModelConfig& a, const ModelConfig& b) {
  std::optional<ModelDifference> found;
  const auto compare = [&](const char* field, const auto& x, const auto& y) {
    if (!found && !(x == y))
      found = ModelDifference{field, fmt::format("{}", x), fmt::format("{}", y)};
  };
  const auto activation = [](const ModelConfig& m) {
    return std::string(m.mlp_activation == GatedActivation::kGeluTanh ? "geglu" : "swiglu");
  };
  // The shape, then what the same tensors compute.
  compare("arch", std::string(arch_name(a.arch)), std::string(arch_name(b.arch)));
  compare("vocab_size", a.vocab_size, b.vocab_size);
  compare("d_model", a.d_model, b.d_model);
  compare("n_layer", a.n_layer, b.n_layer);
  compare("n_head", a.n_head, b.n_head);
  compare("n_kv_head", a.kv_heads(), b.kv_heads());
  compare("d_ff", a.ffn_dim(), b.ffn_dim());
  compare("max_seq_len", a.max_seq_len, b.max_seq_len);
  compare("tie_embeddings", a.tied(), b.tied());
  compare("head_dim", a.head_dim(), b.head_dim());
  compare("qkv_bias", a.qkv_bias, b.qkv_bias);
  compare("o_bias", a.o_bias, b.o_bias);
  compare("mlp_bias", a.mlp_bias, b.mlp_bias);
  compare("post_norms", a.post_norms, b.post_norms);
  compare("sliding_window", a.sliding_window, b.sliding_window);
  compare("alternate_window", a.alternate_window, b.alternate_window);
  compare("query_pre_attn_scalar", a.query_pre_attn_scalar, b.query_pre_attn_scalar);
  compare("attn_softcap", a.attn_softcap, b.attn_softcap);
  compare("final_softcap", a.final_softcap, b.final_softcap);
  compare("rope_theta", a.rope_theta, b.rope_theta);
  compare("rope_scaling", std::string(rope_scaling_name(a.rope_scaling)),
          std::string(rope_scaling_name(b.rope_scaling)));
  if (a.rope_scaling != RopeScalingKind::kNone && a.rope_scaling == b.rope_scaling) {
    compare("rope_scaling.factor", a.rope_factor, b.rope_factor);
    compare("rope_scaling.low_freq_factor", a.rope_low_freq_factor, b.rope_low_freq_factor);
    compare("rope_scaling.high_freq_factor", a.rope_high_freq_factor, b.rope_high_freq_factor);
    compare("rope_scaling.original_max_position_embeddings", a.rope_original_max_positions,
            b.rope_original_max_positions);
  }
  compare("norm_eps", a.norm_eps, b.norm_eps);
  compare("norm_unit_offset", a.norm_unit_offset, b.norm_unit_offset);
  compare("scale_embeddings", a.scale_embeddings, b.scale_embeddings);
  compare("mlp_activation", activation(a), activation(b));
  compare("padding_idx", a.padding_idx, b.padding_idx);
  // The adapters: which tensors are trained, and what they compute.
  compare("lora.rank", a.lora.rank, b.lora.rank);
  if (a.lora.enabled() && b.lora.enabled()) {
    compare("lora.targets", fmt::format("{}", fmt::join(lora_target_names(a.lora.targets), ",")),
            fmt::format("{}", fmt::join(lora_target_names(b.lora.targets), ",")));
    compare("lora.alpha", a.lora.alpha, b.lora.alpha);
    compare("lora.use_rslora", a.lora.use_rslora, b.lora.use_rslora);
  }
  return found;
}

}  // namespace saturn
