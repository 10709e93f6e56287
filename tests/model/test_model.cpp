// Whole-model tests: finite-difference gradients for both architectures (and a LLaMA with
// grouped-query attention and a tied head), gradient
// accumulation, bit-exact determinism, and out-of-memory as a clean error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/cpu_model.hpp"
#include "runtime/model/weight_cache.hpp"
#include "runtime/optim/adamw.hpp"

namespace saturn {
namespace {

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 16;
  c.d_ff = arch == Arch::kLlama ? 24 : 0;
  c.vocab_size = 32;
  c.max_seq_len = 8;
  return c;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  Rng r(seed);
  std::vector<std::int32_t> t(n);
  for (auto& x : t) x = static_cast<std::int32_t>(r.below(static_cast<std::uint64_t>(vocab)));
  return t;
}

// LLaMA with 4 query heads sharing 2 key/value heads, its head tied to the token embedding.
ModelConfig tiny_gqa_tied() {
  ModelConfig c = tiny(Arch::kLlama);
  c.n_head = 4;
  c.n_kv_head = 2;
  c.tie_embeddings = true;
  return c;
}

// Central differences of the loss against the analytic gradient, on a sample of every tensor.
void check_gradients(const ModelConfig& c) {
  MemoryPool pool("cpu:0");
  CpuModel model(c, pool);
  model.init_weights(3);
  // Scale weights up so activations are far from linear and every term matters.
  for (std::size_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 3.0f;
  const int B = 2, T = 8;
  auto tokens = random_tokens(B * T, c.vocab_size, 1);
  auto targets = random_tokens(B * T, c.vocab_size, 2);
  model.zero_grads();
  model.forward(tokens.data(), targets.data(), B, T);
  model.backward(1.0f / (B * T));
  std::vector<float> grad(model.grads(), model.grads() + model.num_params());

  Rng pick(5);
  const float eps = 1e-3f;
  int checked = 0;
  for (const auto& t : model.layout().tensors()) {
    for (int k = 0; k < 6; ++k) {
      const std::size_t i = t.offset + pick.below(t.numel);
      float* w = model.params() + i;
      const float saved = *w;
      *w = saved + eps;
      const double lp = model.forward(tokens.data(), targets.data(), B, T);
      *w = saved - eps;
      const double lm = model.forward(tokens.data(), targets.data(), B, T);
      *w = saved;
      const double fd = (lp - lm) / (2.0 * eps);
      const double an = grad[i];
      EXPECT_NEAR(an, fd, 2e-3 + 3e-2 * std::abs(fd)) << t.name << " element " << i - t.offset;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

class ModelGradient : public ::testing::TestWithParam<Arch> {};

TEST_P(ModelGradient, MatchesFiniteDifferences) {
  check_gradients(tiny(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(BothArchs, ModelGradient, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

// A key/value head's gradient sums its query heads'; the tied head's gradient adds to the
// embedding's.
TEST(ModelGradient, GroupedQueryAttentionAndTiedHeadMatchFiniteDifferences) {
  check_gradients(tiny_gqa_tied());
}

TEST(Model, GradientAccumulationEqualsOneBigBatch) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const ModelConfig c = tiny(arch);
    MemoryPool pool("cpu:0");
    CpuModel big(c, pool), small(c, pool);
    big.init_weights(9);
    small.init_weights(9);
    const int T = 8;
    auto tokens = random_tokens(4 * T, c.vocab_size, 11);
    auto targets = random_tokens(4 * T, c.vocab_size, 12);
    big.zero_grads();
    const float l4 = big.forward(tokens.data(), targets.data(), 4, T);
    big.backward(1.0f / (4 * T));
    small.zero_grads();
    const float la = small.forward(tokens.data(), targets.data(), 2, T);
    small.backward(1.0f / (4 * T));
    const float lb = small.forward(tokens.data() + 2 * T, targets.data() + 2 * T, 2, T);
    small.backward(1.0f / (4 * T));
    EXPECT_NEAR(l4, 0.5f * (la + lb), 1e-6f);
    double max_ref = 0, max_diff = 0;
    for (std::size_t i = 0; i < big.num_params(); ++i) {
      max_ref = std::max(max_ref, static_cast<double>(std::abs(big.grads()[i])));
      max_diff =
          std::max(max_diff, static_cast<double>(std::abs(big.grads()[i] - small.grads()[i])));
    }
    EXPECT_LE(max_diff, 1e-5 * max_ref) << arch_name(arch);
  }
}

std::vector<float> train_losses(Arch arch, int steps) {
  const ModelConfig c = tiny(arch);
  MemoryPool pool("cpu:0");
  CpuModel model(c, pool);
  model.init_weights(1234);
  OptimizerConfig oc;
  cpu::CpuDevice device(pool);
  AdamW opt(oc, model.layout(), 0, model.num_params(), device);
  std::vector<float> losses;
  const int B = 4, T = 8;
  for (int s = 0; s < steps; ++s) {
    auto tokens = random_tokens(B * T, c.vocab_size, 100 + static_cast<std::uint64_t>(s));
    auto targets = random_tokens(B * T, c.vocab_size, 200 + static_cast<std::uint64_t>(s));
    model.zero_grads();
    losses.push_back(model.forward(tokens.data(), targets.data(), B, T));
    model.backward(1.0f / (B * T));
    opt.step(model.params(), nullptr, model.grads(), 1e-3, 1.0f, s + 1);
  }
  for (std::size_t i = 0; i < model.num_params(); i += 97) losses.push_back(model.params()[i]);
  return losses;
}

TEST(Model, SameSeedGivesBitIdenticalTraining) {
  for (Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const auto a = train_losses(arch, 5);
    const auto b = train_losses(arch, 5);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << arch_name(arch);
  }
}

TEST(Model, LayoutMatchesParameterCountAndHuggingFaceNames) {
  ModelConfig g = tiny(Arch::kGpt2), l = tiny(Arch::kLlama);
  EXPECT_EQ(static_cast<std::int64_t>(ParameterLayout(g).total()), g.num_parameters());
  EXPECT_EQ(static_cast<std::int64_t>(ParameterLayout(l).total()), l.num_parameters());
  EXPECT_EQ(ParameterLayout(g).find("transformer.h.1.attn.c_attn.weight").shape,
            (std::vector<std::int64_t>{16, 48}));
  EXPECT_EQ(ParameterLayout(l).find("model.layers.0.mlp.gate_proj.weight").shape,
            (std::vector<std::int64_t>{24, 16}));
  // Each block's tensors are one contiguous range.
  ParameterLayout lay(g);
  EXPECT_EQ(lay.group_end(0), lay.group_begin(1));
  EXPECT_EQ(lay.group_begin(-1), 0u);
  EXPECT_EQ(lay.group_end(g.n_layer), lay.total());
}

TEST(Model, GroupedQueryAttentionAndTiedHeadLayout) {
  const ModelConfig c = tiny_gqa_tied();  // d_model 16, 4 heads of 4, 2 kv heads
  const ParameterLayout lay(c);
  EXPECT_EQ(static_cast<std::int64_t>(lay.total()), c.num_parameters());
  EXPECT_EQ(lay.find("model.layers.0.self_attn.q_proj.weight").shape,
            (std::vector<std::int64_t>{16, 16}));
  EXPECT_EQ(lay.find("model.layers.0.self_attn.k_proj.weight").shape,
            (std::vector<std::int64_t>{8, 16}));
  EXPECT_EQ(lay.find("model.layers.0.self_attn.v_proj.weight").shape,
            (std::vector<std::int64_t>{8, 16}));
  EXPECT_THROW(lay.find("lm_head.weight"), Error);  // tied: the head is the embedding
  EXPECT_EQ(lay.tensors().back().name, "model.norm.weight");
  // Untied: the same plus lm_head.weight.
  ModelConfig untied = c;
  untied.tie_embeddings = false;
  EXPECT_EQ(untied.num_parameters(), c.num_parameters() + 32 * 16);
  EXPECT_EQ(static_cast<std::int64_t>(ParameterLayout(untied).total()), untied.num_parameters());
  // Tensor parallelism splits the key/value heads: one per rank at degree 2.
  const ParameterLayout tp2(c, 2);
  EXPECT_EQ(tp2.find("model.layers.1.self_attn.k_proj.weight").shape,
            (std::vector<std::int64_t>{4, 16}));
  EXPECT_EQ(tp2.find("model.layers.1.self_attn.q_proj.weight").shape,
            (std::vector<std::int64_t>{8, 16}));
  // Degree 4 would split 2 key/value heads four ways.
  try {
    const ParameterLayout tp4(c, 4);
    ADD_FAILURE() << "tensor-parallel degree 4 accepted for 2 key/value heads";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("n_kv_head (2)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("degree 4"), std::string::npos) << e.what();
  }
}

TEST(Model, OutOfMemoryIsACleanErrorAtTheFirstAllocationThatExceeds) {
  const ModelConfig c = tiny(Arch::kGpt2);
  const std::size_t weights = ParameterLayout(c).total() * sizeof(float);
  // Room for parameters and gradients, not for activations.
  MemoryPool pool("cpu:0", 2 * weights + 1024);
  CpuModel model(c, pool);
  try {
    model.reserve(4, 8);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.what_for(), "activations");
    EXPECT_LE(e.in_use() + e.requested(), e.capacity() + e.requested());
    EXPECT_GT(e.in_use() + e.requested(), e.capacity());
    EXPECT_GE(e.peak(), 2 * weights);
    EXPECT_NE(std::string(e.what()).find("peak"), std::string::npos);
  }
  // The failed reservation left no activations behind.
  EXPECT_EQ(pool.in_use(), 2 * weights);
  // Not even the parameters fit: the error names them.
  MemoryPool tiny_pool("cpu:0", weights / 2);
  try {
    CpuModel m(c, tiny_pool);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    EXPECT_EQ(e.what_for(), "parameters");
  }
}

// The estimate is what reserve allocates, for any number of activation slots (it extrapolates
// from two), and a schedule of a million micro-batches of a deep model is estimated at once and
// saturates at 2^60 bytes instead of wrapping.
TEST(Model, ActivationBytesMatchReserveForAnySlotCount) {
  for (const Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const ModelConfig c = tiny(arch);
    for (const int slots : {1, 2, 3, 7}) {
      MemoryPool pool("cpu:0");
      CpuModel model(c, pool);
      const std::size_t before = pool.in_use();
      model.reserve(2, 8, slots);
      EXPECT_EQ(pool.in_use() - before,
                model_activation_bytes(DeviceKind::kCpu, c, ModelOptions{}, 2, 8, slots))
          << arch_name(arch) << " slots " << slots;
    }
  }
  ModelConfig deep = tiny(Arch::kGpt2);
  deep.n_layer = 256;
  deep.d_model = 65536;
  deep.n_head = 64;
  deep.max_seq_len = 4096;
  for (const DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kCuda})
    EXPECT_EQ(model_activation_bytes(kind, deep, ModelOptions{}, 64, 4096, 1 << 20),
              std::size_t{1} << 60)
        << device_kind_name(kind);
}

TEST(Model, InvalidShapesAreInputErrors) {
  ModelConfig c = tiny(Arch::kGpt2);
  c.n_head = 3;  // does not divide 16
  MemoryPool pool("cpu:0");
  EXPECT_THROW(CpuModel(c, pool), InputError);
  // Key/value heads must divide the query heads; gpt2 has no grouped-query attention.
  ModelConfig l = tiny_gqa_tied();
  l.n_kv_head = 3;
  EXPECT_THROW(CpuModel(l, pool), InputError);
  ModelConfig g = tiny(Arch::kGpt2);
  g.n_kv_head = 1;
  EXPECT_THROW(g.validate(), InputError);
}

// The canonical weights a trial draws once per shape on a rank: served from memory with the same
// values while a cache lives, within its budget, and drawn as before once it is gone.
TEST(CanonicalWeightCache, ServesTheSameWeightsWithinItsBudget) {
  const auto weights_of = [](const ModelConfig& c, std::uint64_t seed) {
    MemoryPool pool("cpu:0");
    CpuModel model(c, pool);
    model.init_weights(seed);
    return std::vector<float>(model.params(), model.params() + model.num_params());
  };
  const ModelConfig gpt2 = tiny(Arch::kGpt2), llama = tiny(Arch::kLlama);
  const std::vector<float> drawn = weights_of(gpt2, 7);
  {
    CanonicalWeightCache cache(std::size_t{1} << 20);
    EXPECT_EQ(CanonicalWeightCache::active(), &cache);
    EXPECT_THROW(CanonicalWeightCache(std::size_t{1} << 20), Error) << "one per process";
    EXPECT_EQ(weights_of(gpt2, 7), drawn);  // drawn and kept
    EXPECT_EQ(cache.saved_s(), 0.0);
    EXPECT_EQ(weights_of(gpt2, 7), drawn);  // served
    const double served = cache.saved_s();
    EXPECT_GT(served, 0.0);
    EXPECT_NE(weights_of(gpt2, 8), drawn);  // another seed: other weights
    EXPECT_EQ(weights_of(llama, 7), weights_of(llama, 7));
    EXPECT_GT(cache.saved_s(), served);
  }
  EXPECT_EQ(CanonicalWeightCache::active(), nullptr);
  {
    CanonicalWeightCache none_fit(16);  // bytes: no model fits, each is drawn
    EXPECT_EQ(weights_of(gpt2, 7), drawn);
    EXPECT_EQ(weights_of(gpt2, 7), drawn);
    EXPECT_EQ(none_fit.saved_s(), 0.0);
  }
}

}  // namespace
}  // namespace saturn
