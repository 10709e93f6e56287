#include "runtime/model/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"

namespace saturn {

const char* arch_name(Arch a) {
  return a == Arch::kGpt2 ? "gpt2" : "llama";
}

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::kGpt2;
  if (name == "llama") return Arch::kLlama;
  throw InputError(fmt::format("unknown arch '{}' (valid: gpt2, llama)", name));
}

const char* rope_scaling_name(RopeScalingKind k) {
  switch (k) {
    case RopeScalingKind::kLinear:
      return "linear";
    case RopeScalingKind::kLlama3:
      return "llama3";
    case RopeScalingKind::kNone:
      break;
  }
  return "none";
}

RopeScalingKind parse_rope_scaling(const std::string& name) {
  if (name == "none") return RopeScalingKind::kNone;
  if (name == "linear") return RopeScalingKind::kLinear;
  if (name == "llama3") return RopeScalingKind::kLlama3;
  throw InputError(fmt::format("unknown rope scaling '{}' (valid: none, linear, llama3)", name));
}

float ModelConfig::embedding_scale() const {
  return scale_embeddings ? static_cast<float>(std::sqrt(static_cast<double>(d_model))) : 1.0f;
}

RotaryParams ModelConfig::rotary() const {
  RotaryParams r;
  r.theta = rope_theta;
  r.scaling = rope_scaling;
  r.factor = rope_factor;
  r.low_freq_factor = rope_low_freq_factor;
  r.high_freq_factor = rope_high_freq_factor;
  r.original_max_positions = static_cast<float>(rope_original_max_positions);
  return r;
}

AttentionParams ModelConfig::attention(int layer) const {
  AttentionParams a;
  a.window = window(layer);
  // transformers multiplies the float32 scores by the Python float query_pre_attn_scalar**-0.5.
  a.scale = query_pre_attn_scalar > 0
                ? static_cast<float>(std::pow(static_cast<double>(query_pre_attn_scalar), -0.5))
                : attention_scale(head_dim());
  a.softcap = attn_softcap;
  return a;
}

int ModelConfig::ffn_dim() const {
  if (d_ff > 0) return d_ff;
  if (arch == Arch::kGpt2) return 4 * d_model;
  // LLaMA's rule: 2/3 of 4*d_model, rounded up to a multiple of 8.
  const int f = (8 * d_model / 3 + 7) / 8 * 8;
  return f;
}

void ModelConfig::validate() const {
  auto bad = [](const std::string& m) { throw InputError(m); };
  // The limits first: every check below, and whoever sizes anything from the shape, may then
  // compute in int without overflow.
  const auto within = [&](const char* field, std::int64_t value, std::int64_t hi) {
    if (value > hi)
      bad(fmt::format("{} = {} exceeds Saturn's limit of {} (valid: 1..{})", field, value, hi, hi));
  };
  within("n_layer", n_layer, model_limits::kLayers);
  within("n_head", n_head, model_limits::kDModel);
  within("n_kv_head", n_kv_head, model_limits::kDModel);
  within("d_model", d_model, model_limits::kDModel);
  within("d_ff", d_ff, model_limits::kDff);
  within("vocab_size", vocab_size, model_limits::kVocab);
  within("max_seq_len", max_seq_len, model_limits::kPositions);
  if (n_layer < 1) bad(fmt::format("n_layer must be >= 1 (got {})", n_layer));
  if (n_head < 1) bad(fmt::format("n_head must be >= 1 (got {})", n_head));
  if (d_model < 1) bad(fmt::format("d_model must be >= 1 (got {})", d_model));
  if (head_size < 0 || head_size > model_limits::kDModel)
    bad(fmt::format("head_dim {} is out of range (valid: 1..{}, or 0 for d_model / n_head)",
                    head_size, model_limits::kDModel));
  if (head_size == 0 && d_model % n_head != 0)
    bad(fmt::format("n_head ({}) must divide d_model ({}); valid n_head values divide {}", n_head,
                    d_model, d_model));
  if (static_cast<std::int64_t>(n_head) * head_dim() > model_limits::kDModel)
    bad(fmt::format("n_head x head_dim = {} exceeds Saturn's limit of {}",
                    static_cast<std::int64_t>(n_head) * head_dim(), model_limits::kDModel));
  if (arch == Arch::kLlama && head_dim() % 2 != 0)
    bad(fmt::format("llama needs an even head dimension for rotary positions (head_dim = {})",
                    head_dim()));
  if (n_kv_head < 0)
    bad(fmt::format("n_kv_head must be >= 1, or 0 for n_head (got {})", n_kv_head));
  if (n_head % kv_heads() != 0)
    bad(
        fmt::format("n_kv_head ({}) must divide n_head ({}): each key/value head serves an equal "
                    "group of query heads",
                    kv_heads(), n_head));
  if (arch == Arch::kGpt2 && kv_heads() != n_head)
    bad(
        fmt::format("gpt2 has as many key/value heads as query heads (n_kv_head {} != n_head {}); "
                    "grouped-query attention is llama's",
                    kv_heads(), n_head));
  if (d_ff < 0) bad(fmt::format("d_ff must be > 0 (got {})", d_ff));
  if (vocab_size < 2) bad(fmt::format("vocab_size must be >= 2 (got {})", vocab_size));
  if (max_seq_len < 1) bad(fmt::format("seq_len must be >= 1 (got {})", max_seq_len));
  if (!(norm_eps > 0)) bad("norm_eps must be > 0");
  if (d_model >= 1) within("d_ff (resolved from d_model)", ffn_dim(), model_limits::kDff);
  if (arch == Arch::kGpt2 &&
      (qkv_bias || o_bias || mlp_bias || sliding_window != 0 ||
       rope_scaling != RopeScalingKind::kNone || head_size != 0 || norm_unit_offset ||
       scale_embeddings || mlp_activation != GatedActivation::kSilu))
    bad("gpt2 has its own biases, full causal attention, learned positions, LayerNorm and GELU: "
        "qkv_bias, o_bias, mlp_bias, sliding_window, rope_scaling, head_dim, GeGLU, the norm "
        "offset and the embedding scale are llama's");
  if (arch == Arch::kGpt2 && (alternate_window || query_pre_attn_scalar != 0 || attn_softcap != 0 ||
                              final_softcap != 0 || post_norms))
    bad("gpt2 has none of Gemma 2's alternating window, query_pre_attn_scalar, soft-capping or "
        "post-norms (they are llama's)");
  if (alternate_window && sliding_window == 0)
    bad("alternate_window (the sliding window on even layers only) needs a sliding_window > 0");
  const auto nonnegative = [&](const char* field, float v) {
    if (!(v >= 0.0f && v <= 1e6f))
      bad(fmt::format("{} {} is out of range (valid: 0 for none, or a number up to 1e6)", field,
                      v));
  };
  nonnegative("query_pre_attn_scalar", query_pre_attn_scalar);
  nonnegative("attn_softcap (attn_logit_softcapping)", attn_softcap);
  nonnegative("final_softcap (final_logit_softcapping)", final_softcap);
  if (padding_idx < -1 || padding_idx >= vocab_size)
    bad(fmt::format(
        "padding_idx {} is not a token of the vocabulary (valid: 0..{}, or -1 for none)",
        padding_idx, vocab_size - 1));
  if (arch == Arch::kGpt2 && padding_idx >= 0)
    bad("gpt2's embedding has no padding_idx (transformers gives it none)");
  if (sliding_window < 0 || sliding_window > model_limits::kPositions)
    bad(
        fmt::format("sliding_window {} is out of range (valid: 1..{}, or 0 for full causal "
                    "attention)",
                    sliding_window, model_limits::kPositions));
  if (rope_scaling != RopeScalingKind::kNone && !(rope_factor >= 1.0f && rope_factor <= 1e6f))
    bad(fmt::format("rope_scaling factor {} is out of range (valid: 1..1e6)", rope_factor));
  if (rope_scaling == RopeScalingKind::kLlama3) {
    if (!(rope_low_freq_factor > 0 && rope_high_freq_factor > rope_low_freq_factor &&
          rope_high_freq_factor < 1e6f))
      bad(
          fmt::format("rope_scaling llama3 needs 0 < low_freq_factor < high_freq_factor (got {} "
                      "and {})",
                      rope_low_freq_factor, rope_high_freq_factor));
    if (rope_original_max_positions < 1 || rope_original_max_positions > model_limits::kPositions)
      bad(
          fmt::format("rope_scaling original_max_position_embeddings {} is out of range (valid: "
                      "1..{})",
                      rope_original_max_positions, model_limits::kPositions));
  }
  lora.validate(arch);
}

std::int64_t ModelConfig::adapter_parameters() const {
  std::int64_t per_layer = 0;
  for (const auto& l : lora_linears(*this)) per_layer += lora.rank * (l.in + l.out);
  return per_layer * n_layer;
}

void ModelConfig::check_parameters() const {
  if (static_cast<double>(num_parameters()) > model_limits::kParameters)
    throw InputError(
        fmt::format("the model has {:.3g} parameters, more than Saturn's limit of {:g}",
                    static_cast<double>(num_parameters()), model_limits::kParameters));
}

std::int64_t canonical_micro_batch(const TrainConfig& train) {
  if (train.micro_batch_size > 0) return train.micro_batch_size;
  for (std::int64_t m = std::min<std::int64_t>(8, train.batch_size / 8); m >= 1; --m)
    if (train.batch_size % m == 0) return m;
  return 1;
}

std::int64_t eval_rows(const TrainConfig& train) {
  std::int64_t micro = train.micro_batch_size;
  if (micro <= 0)
    for (micro = std::min<std::int64_t>(8, train.batch_size); micro > 1; --micro)
      if (train.batch_size % micro == 0) break;
  return std::max<std::int64_t>(train.eval_batches, 1) * std::max<std::int64_t>(micro, 1);
}

std::int64_t ModelConfig::num_parameters() const {
  const std::int64_t C = d_model, V = vocab_size, F = ffn_dim(), L = n_layer;
  if (arch == Arch::kGpt2) {
    const std::int64_t per_layer =
        2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * F + F) + (F * C + C);
    return V * C + static_cast<std::int64_t>(max_seq_len) * C + L * per_layer + 2 * C;
  }
  const std::int64_t KV = kv_dim(), Q = q_dim();
  const std::int64_t biases =
      (qkv_bias ? Q + 2 * KV : 0) + (o_bias ? C : 0) + (mlp_bias ? 2 * F + C : 0);
  const std::int64_t per_layer =
      C + 2 * C * Q + 2 * C * KV + C + 3 * C * F + biases + (post_norms ? 2 * C : 0);
  return V * C + L * per_layer + C + (tied() ? 0 : V * C);
}

}  // namespace saturn
