#include "runtime/model/lora.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <utility>

#include "runtime/core/error.hpp"
#include "runtime/model/config.hpp"

namespace saturn {

namespace {

struct TargetName {
  const char* name;
  LoraTarget target;
};
// Canonical order: the order of the linears in a block, llama's then gpt2's.
constexpr TargetName kTargets[] = {{"q", LoraTarget::kQ},   {"k", LoraTarget::kK},
                                   {"v", LoraTarget::kV},   {"qkv", LoraTarget::kQkv},
                                   {"o", LoraTarget::kO},   {"gate", LoraTarget::kGate},
                                   {"up", LoraTarget::kUp}, {"down", LoraTarget::kDown},
                                   {"fc", LoraTarget::kFc}, {"proj", LoraTarget::kProj}};

std::uint32_t bit(LoraTarget t) {
  return static_cast<std::uint32_t>(t);
}

std::string valid_names(Arch arch) {
  return arch == Arch::kGpt2 ? "qkv (c_attn), o (attn.c_proj), fc (mlp.c_fc), proj (mlp.c_proj), "
                               "all-linear"
                             : "q, k, v, qkv (all three), o, gate, up, down, all-linear";
}

}  // namespace

float LoraConfig::scale() const {
  if (rank <= 0) return 0.0f;
  const double r = rank;
  return static_cast<float>(use_rslora ? alpha / std::sqrt(r) : alpha / r);
}

void LoraConfig::validate(Arch arch) const {
  if (!enabled()) return;
  if (rank > 4096)
    throw InputError(fmt::format("lora.rank {} is out of range (valid: 1..4096)", rank));
  if (!(alpha > 0 && alpha <= 1e6))
    throw InputError(
        fmt::format("lora.alpha {} is out of range (valid: a number in (0, 1e6])", alpha));
  if (dropout != 0.0)
    throw InputError(fmt::format(
        "lora.dropout {} is not supported: Saturn trains adapters without dropout (valid: 0)",
        dropout));
  if (targets == 0)
    throw InputError(
        fmt::format("lora.targets is empty (valid: one or more of {})", valid_names(arch)));
  if ((targets & ~all_lora_targets(arch)) != 0)
    throw InputError(
        fmt::format("lora.targets {} are not linears of {} (valid: {})",
                    fmt::join(lora_target_names(targets & ~all_lora_targets(arch)), ", "),
                    arch_name(arch), valid_names(arch)));
}

std::uint32_t all_lora_targets(Arch arch) {
  if (arch == Arch::kGpt2)
    return bit(LoraTarget::kQkv) | bit(LoraTarget::kO) | bit(LoraTarget::kFc) |
           bit(LoraTarget::kProj);
  return bit(LoraTarget::kQ) | bit(LoraTarget::kK) | bit(LoraTarget::kV) | bit(LoraTarget::kO) |
         bit(LoraTarget::kGate) | bit(LoraTarget::kUp) | bit(LoraTarget::kDown);
}

std::uint32_t parse_lora_targets(const std::vector<std::string>& names, Arch arch) {
  std::uint32_t out = 0;
  for (const auto& n : names) {
    if (n == "all-linear") {
      out |= all_lora_targets(arch);
      continue;
    }
    if (n == "qkv" && arch == Arch::kLlama) {
      out |= bit(LoraTarget::kQ) | bit(LoraTarget::kK) | bit(LoraTarget::kV);
      continue;
    }
    std::uint32_t found = 0;
    for (const auto& t : kTargets)
      if (n == t.name) found = bit(t.target);
    if (found == 0 || (found & all_lora_targets(arch)) == 0) {
      const std::string why = arch == Arch::kGpt2 && (n == "q" || n == "k" || n == "v")
                                  ? " (GPT-2's q, k and v are one fused Conv1D, c_attn: target qkv)"
                                  : "";
      throw InputError(fmt::format("lora target '{}' is not a linear of {}{} (valid: {})", n,
                                   arch_name(arch), why, valid_names(arch)));
    }
    out |= found;
  }
  return out;
}

std::vector<std::string> lora_target_names(std::uint32_t targets) {
  std::vector<std::string> out;
  for (const auto& t : kTargets)
    if ((targets & bit(t.target)) != 0) out.emplace_back(t.name);
  return out;
}

std::vector<LoraLinear> lora_linears(const ModelConfig& c) {
  std::vector<LoraLinear> out;
  if (!c.lora.enabled()) return out;
  const std::int64_t C = c.d_model, Q = c.q_dim(), KV = c.kv_dim(), F = c.ffn_dim();
  auto add = [&](LoraTarget t, const char* module, std::int64_t in, std::int64_t o, bool row,
                 int parts = 1) {
    if (c.lora.targets_role(t)) out.push_back({t, module, in, o, row, parts});
  };
  if (c.arch == Arch::kGpt2) {
    add(LoraTarget::kQkv, "attn.c_attn", C, 3 * C, false, 3);
    add(LoraTarget::kO, "attn.c_proj", C, C, true);
    add(LoraTarget::kFc, "mlp.c_fc", C, F, false);
    add(LoraTarget::kProj, "mlp.c_proj", F, C, true);
  } else {
    add(LoraTarget::kQ, "self_attn.q_proj", C, Q, false);
    add(LoraTarget::kK, "self_attn.k_proj", C, KV, false);
    add(LoraTarget::kV, "self_attn.v_proj", C, KV, false);
    add(LoraTarget::kO, "self_attn.o_proj", Q, C, true);
    add(LoraTarget::kGate, "mlp.gate_proj", C, F, false);
    add(LoraTarget::kUp, "mlp.up_proj", C, F, false);
    add(LoraTarget::kDown, "mlp.down_proj", F, C, true);
  }
  return out;
}

std::string describe_lora(const LoraConfig& lora) {
  if (!lora.enabled()) return "";
  return fmt::format("r{} a{:g}{} {}", lora.rank, lora.alpha, lora.use_rslora ? " rslora" : "",
                     fmt::join(lora_target_names(lora.targets), ","));
}

}  // namespace saturn
