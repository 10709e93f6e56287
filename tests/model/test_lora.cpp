// LoRA in the engine (model/lora.hpp): the layout (a frozen base, trainable adapters in a
// gradient layout of their own), the adapters' gradients against finite differences, and the
// adapted model against the base with its weights merged (W + scale · B A), on every target of
// both architectures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/cpu_model.hpp"

namespace saturn {
namespace {

ModelConfig tiny(Arch arch, std::uint32_t targets, int rank = 4) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::kLlama ? 2 : 0;  // grouped-query attention on llama
  c.d_model = 16;
  c.d_ff = arch == Arch::kLlama ? 24 : 0;
  c.vocab_size = 32;
  c.max_seq_len = 8;
  c.lora.rank = rank;
  c.lora.alpha = 8;
  c.lora.targets = targets;
  return c;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  Rng r(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(r.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// B starts at zero (the adapted model is the base): give every adapter values so that both of
// its matrices matter.
void randomize_adapters(CpuModel& m, std::uint64_t seed) {
  Rng r(seed);
  for (const auto& t : m.layout().tensors())
    if (t.trainable)
      for (std::size_t i = 0; i < t.numel; ++i)
        m.params()[t.offset + i] = static_cast<float>(0.3 * r.normal());
}

TEST(LoraLayout, BaseFrozenAdaptersTrainableInTheirOwnGradientLayout) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const ModelConfig c = tiny(arch, all_lora_targets(arch));
    const ParameterLayout layout(c);
    ModelConfig base = c;
    base.lora = {};
    EXPECT_EQ(layout.total(),
              static_cast<std::size_t>(base.num_parameters() + c.adapter_parameters()));
    EXPECT_EQ(layout.grad_total(), static_cast<std::size_t>(c.adapter_parameters()));
    EXPECT_TRUE(layout.has_frozen());
    std::size_t adapters = 0;
    for (const auto& t : layout.tensors()) {
      const bool adapter = t.name.find(".lora_") != std::string::npos;
      EXPECT_EQ(t.trainable, adapter) << t.name;
      if (!adapter) continue;
      ++adapters;
      // Parameters [trainable_begin, group_end) map onto the group's gradients by a shift.
      EXPECT_EQ(t.offset - layout.trainable_begin(t.layer),
                t.grad_offset - layout.grad_group_begin(t.layer))
          << t.name;
    }
    EXPECT_EQ(adapters, 2 * lora_linears(c).size() * static_cast<std::size_t>(c.n_layer));
    EXPECT_EQ(layout.grad_group_size(-1), 0u);
    EXPECT_EQ(layout.grad_group_size(c.n_layer), 0u);
    // PEFT's names and shapes: A [rank, in], B [out, rank].
    const std::string a = arch == Arch::kGpt2 ? "transformer.h.1.attn.c_attn.lora_A.weight"
                                              : "model.layers.1.self_attn.k_proj.lora_A.weight";
    const std::string b = arch == Arch::kGpt2 ? "transformer.h.1.attn.c_attn.lora_B.weight"
                                              : "model.layers.1.self_attn.k_proj.lora_B.weight";
    EXPECT_EQ(layout.find(a).shape, (std::vector<std::int64_t>{4, 16}));
    EXPECT_EQ(layout.find(b).shape, (std::vector<std::int64_t>{arch == Arch::kGpt2 ? 48 : 8, 4}));
    // Without adapters the gradient layout is the parameter layout.
    const ParameterLayout full(base);
    EXPECT_FALSE(full.has_frozen());
    EXPECT_EQ(full.grad_total(), full.total());
    for (const auto& t : full.tensors()) EXPECT_EQ(t.grad_offset, t.offset);
  }
}

TEST(LoraLayout, TensorParallelSplitsAdaptersWithTheirBase) {
  const ModelConfig c = tiny(Arch::kLlama, all_lora_targets(Arch::kLlama));
  const ParameterLayout layout(c, 2);
  // Column-parallel q: B's rows split, A whole. Row-parallel o: A's columns split, B whole.
  EXPECT_EQ(layout.find("model.layers.0.self_attn.q_proj.lora_A.weight").split_dim, -1);
  EXPECT_EQ(layout.find("model.layers.0.self_attn.q_proj.lora_B.weight").shape,
            (std::vector<std::int64_t>{8, 4}));
  EXPECT_EQ(layout.find("model.layers.0.self_attn.o_proj.lora_A.weight").shape,
            (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(layout.find("model.layers.0.self_attn.o_proj.lora_B.weight").split_dim, -1);
}

TEST(LoraConfig, TargetsAndScale) {
  EXPECT_EQ(parse_lora_targets({"qkv"}, Arch::kLlama),
            parse_lora_targets({"q", "k", "v"}, Arch::kLlama));
  EXPECT_THROW(parse_lora_targets({"q"}, Arch::kGpt2), InputError);
  EXPECT_THROW(parse_lora_targets({"fc"}, Arch::kLlama), InputError);
  EXPECT_THROW(parse_lora_targets({"query"}, Arch::kLlama), InputError);
  LoraConfig l;
  l.rank = 16;
  l.alpha = 32;
  EXPECT_FLOAT_EQ(l.scale(), 2.0f);
  l.use_rslora = true;
  EXPECT_FLOAT_EQ(l.scale(), 8.0f);
  l.targets = all_lora_targets(Arch::kLlama);
  l.dropout = 0.1;
  EXPECT_THROW(l.validate(Arch::kLlama), InputError);
}

// Every adapter element's gradient equals central differences of the loss; the base gets none.
void check_adapter_gradients(const ModelConfig& c) {
  MemoryPool pool("cpu:0");
  CpuModel model(c, pool);
  model.init_weights(3);
  for (const auto& t : model.layout().tensors())
    if (!t.trainable)
      for (std::size_t i = 0; i < t.numel; ++i) model.params()[t.offset + i] *= 3.0f;
  randomize_adapters(model, 4);
  const int B = 2, T = 8;
  auto tokens = random_tokens(B * T, c.vocab_size, 1);
  auto targets = random_tokens(B * T, c.vocab_size, 2);
  model.zero_grads();
  model.forward(tokens.data(), targets.data(), B, T);
  model.backward(1.0f / (B * T));
  const ParameterLayout& layout = model.layout();
  std::vector<float> grad(model.grads(), model.grads() + layout.grad_total());
  Rng pick(5);
  const float eps = 1e-3f;
  int checked = 0;
  for (const auto& t : layout.tensors()) {
    if (!t.trainable) continue;
    for (int k = 0; k < 4; ++k) {
      const std::size_t j = pick.below(t.numel);
      float* w = model.params() + t.offset + j;
      const float saved = *w;
      *w = saved + eps;
      const double lp = model.forward(tokens.data(), targets.data(), B, T);
      *w = saved - eps;
      const double lm = model.forward(tokens.data(), targets.data(), B, T);
      *w = saved;
      const double fd = (lp - lm) / (2.0 * eps);
      EXPECT_NEAR(grad[t.grad_offset + j], fd, 2e-3 + 3e-2 * std::abs(fd))
          << t.name << " element " << j;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(LoraGradient, Gpt2AllLinearsMatchFiniteDifferences) {
  check_adapter_gradients(tiny(Arch::kGpt2, all_lora_targets(Arch::kGpt2)));
}

TEST(LoraGradient, LlamaAllLinearsMatchFiniteDifferences) {
  check_adapter_gradients(tiny(Arch::kLlama, all_lora_targets(Arch::kLlama)));
}

TEST(LoraGradient, LlamaQkvBiasAndRsLoraMatchFiniteDifferences) {
  ModelConfig c = tiny(Arch::kLlama, parse_lora_targets({"q", "v", "down"}, Arch::kLlama), 3);
  c.qkv_bias = true;
  c.lora.use_rslora = true;
  check_adapter_gradients(c);
}

// The adapted model computes the base model with W + scale · B A in place of W.
void check_merged(const ModelConfig& c) {
  MemoryPool pool("cpu:0");
  CpuModel adapted(c, pool);
  adapted.init_weights(7);
  // Weights far from the initial scale, so that every adapter (k's too) moves the loss.
  for (std::size_t i = 0; i < adapted.num_params(); ++i) adapted.params()[i] *= 10.0f;
  randomize_adapters(adapted, 8);
  ModelConfig base_config = c;
  base_config.lora = {};
  CpuModel merged(base_config, pool);
  const ParameterLayout& la = adapted.layout();
  const float scale = c.lora.scale();
  for (const auto& t : merged.layout().tensors()) {
    const ParamTensor& src = la.find(t.name);
    std::copy(adapted.params() + src.offset, adapted.params() + src.offset + t.numel,
              merged.params() + t.offset);
  }
  const bool gpt2 = c.arch == Arch::kGpt2;
  const std::string prefix = gpt2 ? "transformer.h." : "model.layers.";
  for (int l = 0; l < c.n_layer; ++l)
    for (const auto& x : lora_linears(c)) {
      const std::string m = prefix + std::to_string(l) + "." + x.module;
      const ParamTensor &a = la.find(m + ".lora_A.weight"), &b = la.find(m + ".lora_B.weight");
      const ParamTensor* w = &merged.layout().find(m + ".weight");
      const float* A = adapted.params() + a.offset;
      const float* Bm = adapted.params() + b.offset;
      for (std::int64_t o = 0; o < x.out; ++o)
        for (std::int64_t i = 0; i < x.in; ++i) {
          double d = 0;
          for (int r = 0; r < c.lora.rank; ++r)
            d += static_cast<double>(Bm[o * c.lora.rank + r]) * A[r * x.in + i];
          // Conv1D (gpt2) weights are [in, out]; nn.Linear's [out, in].
          const std::size_t at = gpt2 ? static_cast<std::size_t>(i * x.out + o)
                                      : static_cast<std::size_t>(o * x.in + i);
          merged.params()[w->offset + at] += static_cast<float>(scale * d);
        }
    }
  const int B = 2, T = 8;
  auto tokens = random_tokens(B * T, c.vocab_size, 21);
  auto targets = random_tokens(B * T, c.vocab_size, 22);
  const float la_loss = adapted.forward(tokens.data(), targets.data(), B, T);
  const float lm_loss = merged.forward(tokens.data(), targets.data(), B, T);
  EXPECT_NEAR(la_loss, lm_loss, 2e-5 * std::abs(lm_loss)) << describe_lora(c.lora);
  EXPECT_GT(std::abs(la_loss -
                     [&] {
                       CpuModel plain(base_config, pool);
                       for (const auto& t : plain.layout().tensors()) {
                         const ParamTensor& src = la.find(t.name);
                         std::copy(adapted.params() + src.offset,
                                   adapted.params() + src.offset + t.numel,
                                   plain.params() + t.offset);
                       }
                       return plain.forward(tokens.data(), targets.data(), B, T);
                     }()),
            1e-3)
      << describe_lora(c.lora) << ": the adapters change nothing, the test would pass without them";
}

// Activation recomputation rebuilds each block (adapters included) in the backward: the same
// gradients, bit for bit.
TEST(LoraGradient, RecomputationGivesTheSameGradients) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const ModelConfig c = tiny(arch, all_lora_targets(arch));
    MemoryPool pool("cpu:0");
    ModelOptions recompute;
    recompute.recompute = true;
    CpuModel plain(c, pool), again(c, pool, recompute);
    plain.init_weights(11);
    randomize_adapters(plain, 12);
    std::copy(plain.params(), plain.params() + plain.num_params(), again.params());
    const int B = 2, T = 8;
    auto tokens = random_tokens(B * T, c.vocab_size, 13);
    auto targets = random_tokens(B * T, c.vocab_size, 14);
    for (CpuModel* m : {&plain, &again}) {
      m->zero_grads();
      m->forward(tokens.data(), targets.data(), B, T);
      m->backward(1.0f / (B * T));
    }
    const std::size_t n = plain.layout().grad_total();
    EXPECT_TRUE(std::equal(plain.grads(), plain.grads() + n, again.grads())) << arch_name(arch);
    double norm = 0;
    for (std::size_t i = 0; i < n; ++i) norm += std::abs(plain.grads()[i]);
    EXPECT_GT(norm, 0.0);
  }
}

TEST(LoraForward, EqualsTheMergedModelOnEveryTarget) {
  check_merged(tiny(Arch::kGpt2, all_lora_targets(Arch::kGpt2)));
  check_merged(tiny(Arch::kLlama, all_lora_targets(Arch::kLlama)));
  for (const char* t : {"qkv", "o", "fc", "proj"})
    check_merged(tiny(Arch::kGpt2, parse_lora_targets({t}, Arch::kGpt2)));
  for (const char* t : {"q", "k", "v", "o", "gate", "up", "down"})
    check_merged(tiny(Arch::kLlama, parse_lora_targets({t}, Arch::kLlama)));
}

}  // namespace
}  // namespace saturn
