// The canonical initial weights (model.hpp): the same values for every backend, strategy and
// degree, streamed tensor by tensor.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/weight_cache.hpp"

namespace saturn {

namespace {

std::atomic<CanonicalWeightCache*> g_active_cache{nullptr};

// Everything the weights depend on: the seed, the depth (the residual scale), the norms' form and
// every tensor's name and shape, in order (the draws follow it).
std::string cache_key(const ModelConfig& config, std::uint64_t seed,
                      const ParameterLayout& layout) {
  std::string key = fmt::format("{}:{}:{}", seed, config.n_layer, config.norm_unit_offset);
  for (const ParamTensor& t : layout.tensors()) {
    key += fmt::format("|{}:{}", t.name, t.numel);
    for (const auto d : t.canonical_shape) key += fmt::format("x{}", d);
  }
  return key;
}

// One canonical tensor's initial values into `w`: the draws of `rng` (adapters: `adapter_rng`)
// in layout order.
void draw_canonical(const ParamTensor& t, const ModelConfig& config, double residual_scale,
                    Rng& rng, Rng& adapter_rng, std::vector<float>& w) {
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
}

}  // namespace

CanonicalWeightCache::CanonicalWeightCache(std::size_t max_bytes) : max_bytes_(max_bytes) {
  CanonicalWeightCache* none = nullptr;
  if (!g_active_cache.compare_exchange_strong(none, this))
    throw Error("CanonicalWeightCache: one exists already in this process");
}

CanonicalWeightCache::~CanonicalWeightCache() {
  g_active_cache.store(nullptr);
}

CanonicalWeightCache* CanonicalWeightCache::active() {
  return g_active_cache.load();
}

double CanonicalWeightCache::saved_s() const {
  const std::lock_guard lock(mutex_);
  return saved_s_;
}

const CanonicalWeightCache::Kept* CanonicalWeightCache::find(const std::string& key) {
  const std::lock_guard lock(mutex_);
  const auto it = kept_.find(key);
  if (it == kept_.end()) return nullptr;
  saved_s_ += it->second.seconds;
  return &it->second;
}

bool CanonicalWeightCache::fits(std::size_t bytes) const {
  const std::lock_guard lock(mutex_);
  return bytes_ + bytes <= max_bytes_;
}

void CanonicalWeightCache::keep(const std::string& key, Kept kept, std::size_t bytes) {
  const std::lock_guard lock(mutex_);
  if (bytes_ + bytes > max_bytes_ || kept_.contains(key)) return;
  bytes_ += bytes;
  kept_.emplace(key, std::move(kept));
}

void generate_canonical_weights(
    const ModelConfig& config, std::uint64_t seed,
    const std::function<void(std::size_t, const ParamTensor&, const float*)>& visit) {
  const ParameterLayout layout(config);
  CanonicalWeightCache* cache = CanonicalWeightCache::active();
  std::string key;
  bool keep = false;
  if (cache) {
    key = cache_key(config, seed, layout);
    if (const CanonicalWeightCache::Kept* kept = cache->find(key)) {
      for (std::size_t k = 0; k < layout.tensors().size(); ++k)
        visit(k, layout.tensors()[k], kept->tensors[k].data());
      return;
    }
    keep = cache->fits(layout.total() * sizeof(float));
  }
  CanonicalWeightCache::Kept generated;  // and the time the drawing took, not the visits
  Rng rng(seed);
  // Adapters draw from a stream of their own, so that a LoRA job's base starts exactly as the
  // same model's full fine-tune would (and adapters of another rank start the same base).
  Rng adapter_rng(seed ^ 0x4c6f5241ULL);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config.n_layer);
  std::vector<float> w;
  for (std::size_t k = 0; k < layout.tensors().size(); ++k) {
    const ParamTensor& t = layout.tensors()[k];
    const auto drawing = std::chrono::steady_clock::now();
    draw_canonical(t, config, residual_scale, rng, adapter_rng, w);
    generated.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - drawing).count();
    visit(k, t, w.data());
    if (keep) generated.tensors.push_back(w);
  }
  if (keep) cache->keep(key, std::move(generated), layout.total() * sizeof(float));
}

}  // namespace saturn
