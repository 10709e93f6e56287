#include "runtime/model/parameters.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace saturn {

ParameterLayout::ParameterLayout(const ModelConfig& c) {
  const std::int64_t C = c.d_model, V = c.vocab_size, F = c.ffn_dim(), L = c.n_layer;
  group_begin_.push_back(0);
  if (c.arch == Arch::kGpt2) {
    add("transformer.wte.weight", {V, C}, true, -1);
    add("transformer.wpe.weight", {c.max_seq_len, C}, true, -1);
    for (int l = 0; l < L; ++l) {
      group_begin_.push_back(total_);
      const std::string p = fmt::format("transformer.h.{}.", l);
      add(p + "ln_1.weight", {C}, false, l);
      add(p + "ln_1.bias", {C}, false, l);
      add(p + "attn.c_attn.weight", {C, 3 * C}, true, l);  // Conv1D: [in, out]
      add(p + "attn.c_attn.bias", {3 * C}, false, l);
      add(p + "attn.c_proj.weight", {C, C}, true, l);
      add(p + "attn.c_proj.bias", {C}, false, l);
      add(p + "ln_2.weight", {C}, false, l);
      add(p + "ln_2.bias", {C}, false, l);
      add(p + "mlp.c_fc.weight", {C, F}, true, l);
      add(p + "mlp.c_fc.bias", {F}, false, l);
      add(p + "mlp.c_proj.weight", {F, C}, true, l);
      add(p + "mlp.c_proj.bias", {C}, false, l);
    }
    group_begin_.push_back(total_);
    add("transformer.ln_f.weight", {C}, false, static_cast<int>(L));
    add("transformer.ln_f.bias", {C}, false, static_cast<int>(L));
    // lm_head is tied to transformer.wte.weight (not a separate tensor, as in Hugging Face).
  } else {
    add("model.embed_tokens.weight", {V, C}, true, -1);
    for (int l = 0; l < L; ++l) {
      group_begin_.push_back(total_);
      const std::string p = fmt::format("model.layers.{}.", l);
      add(p + "input_layernorm.weight", {C}, false, l);
      // q, k, v are adjacent: together they are one [3C, C] nn.Linear weight (one GEMM).
      add(p + "self_attn.q_proj.weight", {C, C}, true, l);
      add(p + "self_attn.k_proj.weight", {C, C}, true, l);
      add(p + "self_attn.v_proj.weight", {C, C}, true, l);
      add(p + "self_attn.o_proj.weight", {C, C}, true, l);
      add(p + "post_attention_layernorm.weight", {C}, false, l);
      add(p + "mlp.gate_proj.weight", {F, C}, true, l);
      add(p + "mlp.up_proj.weight", {F, C}, true, l);
      add(p + "mlp.down_proj.weight", {C, F}, true, l);
    }
    group_begin_.push_back(total_);
    add("model.norm.weight", {C}, false, static_cast<int>(L));
    add("lm_head.weight", {V, C}, true, static_cast<int>(L));
  }
  group_begin_.push_back(total_);
}

void ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, bool decay,
                          int layer) {
  ParamTensor t;
  t.name = std::move(name);
  t.numel = 1;
  for (auto d : shape) t.numel *= static_cast<std::size_t>(d);
  t.shape = std::move(shape);
  t.offset = total_;
  t.decay = decay;
  t.layer = layer;
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

const ParamTensor& ParameterLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw Error(fmt::format("no parameter named '{}' in this model", name));
}

}  // namespace saturn
