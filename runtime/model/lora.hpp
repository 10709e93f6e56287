// Low-rank adapters (LoRA, Hu et al. 2021, as PEFT implements them): a job with `lora:` keeps
// the base model frozen and trains, beside each targeted linear y = W x, two small matrices A
// [rank, in] and B [out, rank] so that y = W x + scale · B (A x). The adapters are part of the
// model's parameter layout (ParameterLayout adds them, trainable, after each block's frozen base
// tensors), so every strategy moves, shards and checkpoints them as it does any parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saturn {

enum class Arch;
struct ModelConfig;

// The linears an adapter can sit beside, by role. GPT-2 has one fused q|k|v Conv1D (c_attn),
// so it is targeted whole (kQkv); LLaMA's q, k and v are separate nn.Linear modules.
enum class LoraTarget : std::uint32_t {
  kQ = 1u << 0,     // llama self_attn.q_proj
  kK = 1u << 1,     // llama self_attn.k_proj
  kV = 1u << 2,     // llama self_attn.v_proj
  kQkv = 1u << 3,   // gpt2 attn.c_attn
  kO = 1u << 4,     // llama self_attn.o_proj, gpt2 attn.c_proj
  kGate = 1u << 5,  // llama mlp.gate_proj
  kUp = 1u << 6,    // llama mlp.up_proj
  kDown = 1u << 7,  // llama mlp.down_proj
  kFc = 1u << 8,    // gpt2 mlp.c_fc
  kProj = 1u << 9,  // gpt2 mlp.c_proj
};

struct LoraConfig {
  int rank = 0;               // 0: no adapters (full fine-tuning)
  double alpha = 8.0;         // PEFT's lora_alpha (its default, 8)
  std::uint32_t targets = 0;  // LoraTarget bits
  bool use_rslora = false;    // scale alpha / sqrt(rank) instead of alpha / rank
  double dropout = 0.0;       // only 0 is supported (LoraConfig::validate says so)

  bool enabled() const { return rank > 0; }
  bool targets_role(LoraTarget t) const { return (targets & static_cast<std::uint32_t>(t)) != 0; }
  // The factor on B (A x), as PEFT computes it (in double, then applied to fp32 tensors).
  float scale() const;
  // InputError naming the field and what is valid for `arch`.
  void validate(Arch arch) const;
  bool operator==(const LoraConfig&) const = default;
};

// One adapted linear of a block: its role, its module's name under the block's prefix (as
// transformers and PEFT name it), its canonical widths and how tensor parallelism splits its
// base: column-parallel (outputs split: B splits its rows, A is whole on every rank) or
// row-parallel (inputs split: A splits its columns, B is whole). parts: GPT-2's fused q|k|v
// output is three equal parts, each split.
struct LoraLinear {
  LoraTarget target;
  std::string module;  // e.g. self_attn.q_proj, attn.c_attn
  std::int64_t in = 0, out = 0;
  bool row_parallel = false;
  int parts = 1;
};
// The adapted linears of every block of `config` (empty without lora), in block order.
std::vector<LoraLinear> lora_linears(const ModelConfig& config);

// Target names as the workload writes them (q, k, v, qkv, o, gate, up, down, fc, proj, and
// all-linear: every linear of a block). qkv on llama means q, k and v. InputError naming an
// unknown or foreign target and listing the valid ones for the architecture.
std::uint32_t parse_lora_targets(const std::vector<std::string>& names, Arch arch);
// The names of a target set, in canonical order (the inverse of parse_lora_targets).
std::vector<std::string> lora_target_names(std::uint32_t targets);
// Every target of an architecture (all-linear).
std::uint32_t all_lora_targets(Arch arch);
// "r8 a16 q,v" for logs and profile signatures; "" without adapters.
std::string describe_lora(const LoraConfig& lora);

}  // namespace saturn
