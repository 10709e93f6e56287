#include "runtime/model/gpt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"

namespace saturn {

using cpu::WeightLayout;

namespace {

// out[n, :] += bias for N rows of C (row-parallel layers add their bias once, after the
// tensor-parallel reduction).
void add_bias(float* out, const float* bias, int N, int C) {
  for (int n = 0; n < N; ++n) {
    float* row = out + static_cast<std::size_t>(n) * C;
    for (int c = 0; c < C; ++c) row[c] += bias[c];
  }
}

}  // namespace

// The activations one block saves for its backward pass.
struct GptModel::LayerActs {
  Buffer<float> ln1, ln1_mean, ln1_rstd;  // gpt2 uses mean; llama only rstd
  Buffer<float> qkv;                      // [N, 3C/tp] (llama: after rotary)
  Buffer<float> att;                      // [B, H/tp, T, T] softmax probabilities
  Buffer<float> atty;                     // [N, C/tp] attention output before projection
  Buffer<float> res2;                     // [N, C] residual after attention
  Buffer<float> ln2, ln2_mean, ln2_rstd;
  Buffer<float> fc;   // gpt2: [N, F/tp] pre-GELU; llama: gate [N, F/tp]
  Buffer<float> up;   // llama: up [N, F/tp]
  Buffer<float> act;  // [N, F/tp] GELU(fc) or silu(gate)*up
};

// One micro-batch in flight.
struct GptModel::Slot {
  std::vector<Buffer<float>> resid;  // streams entering blocks first..end, [N, C]
  std::vector<LayerActs> layers;     // blocks first..end-1 (empty with recomputation)
  Buffer<std::int32_t> tokens, targets;
  Buffer<float> lnf, lnf_mean, lnf_rstd;
  Buffer<float> logits;  // [N, V]; softmax probabilities after head_forward
  Buffer<float> losses;  // [N]
};

struct GptModel::Activations {
  std::vector<Slot> slots;
  LayerActs shared;             // recomputation: one block's activations, rebuilt per block
  Buffer<float> recompute_out;  // recomputation writes the block output here, not the stream
  // backward scratch, shared by blocks and slots
  Buffer<float> dres, dln, datty, dqkv, dqkv_pre, datt, dfc, dup, dact;
};

GptModel::GptModel(const ModelConfig& config, MemoryPool& device)
    : GptModel(config, device, ModelOptions{}) {}

GptModel::GptModel(const ModelConfig& config, MemoryPool& device, const ModelOptions& options)
    : config_(config),
      options_(options),
      layout_((config.validate(), config), options.shard.tp_size),
      device_(&device) {
  const ModelShard& s = options_.shard;
  first_ = s.first_layer;
  end_ = s.end_layer < 0 ? config_.n_layer : s.end_layer;
  if (first_ < 0 || first_ > end_ || end_ > config_.n_layer)
    throw InputError(fmt::format("model shard layers [{}, {}) are outside [0, {})", first_, end_,
                                 config_.n_layer));
  if (s.tp_rank < 0 || s.tp_rank >= s.tp_size)
    throw InputError(
        fmt::format("tensor-parallel rank {} is outside [0, {})", s.tp_rank, s.tp_size));
  const std::size_t groups = static_cast<std::size_t>(layout_.num_groups());
  group_params_.assign(groups, nullptr);
  group_grads_.assign(groups, nullptr);
  if (options_.storage == ParamStorage::kOwned) {
    params_ = Buffer<float>(device, layout_.total(), "parameters");
    grads_ = Buffer<float>(device, layout_.total(), "gradients");
    params_.zero();
    grads_.zero();
    for (int g = -1; g + 1 < layout_.num_groups(); ++g) {
      group_params_[static_cast<std::size_t>(g + 1)] = params_.data() + layout_.group_begin(g);
      group_grads_[static_cast<std::size_t>(g + 1)] = grads_.data() + layout_.group_begin(g);
    }
  }
}

GptModel::~GptModel() = default;

void GptModel::bind_group(int group, const float* params, float* grads) {
  if (options_.storage != ParamStorage::kBorrowed)
    throw Error("bind_group on a model that owns its parameters");
  if (group < -1 || group >= config_.n_layer + 1)
    throw Error(fmt::format("bind_group: no parameter group {}", group));
  group_params_[static_cast<std::size_t>(group + 1)] = params;
  group_grads_[static_cast<std::size_t>(group + 1)] = grads;
}

const float* GptModel::p(const ParamTensor& t) const {
  const float* base = group_params_[static_cast<std::size_t>(t.layer + 1)];
  if (base == nullptr)
    throw Error(fmt::format("parameters of {} (group {}) are not bound", t.name, t.layer));
  return base + (t.offset - layout_.group_begin(t.layer));
}

float* GptModel::g(const ParamTensor& t) {
  float* base = group_grads_[static_cast<std::size_t>(t.layer + 1)];
  if (base == nullptr)
    throw Error(fmt::format("gradients of {} (group {}) are not bound", t.name, t.layer));
  return base + (t.offset - layout_.group_begin(t.layer));
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

void GptModel::init_weights(std::uint64_t seed) {
  if (options_.storage != ParamStorage::kOwned)
    throw Error(
        "init_weights needs owned storage; strategies that lend storage initialise it "
        "with generate_canonical_weights");
  const auto& local = layout_.tensors();
  generate_canonical_weights(
      config_, seed, [&](std::size_t k, const ParamTensor&, const float* values) {
        const ParamTensor& t = local[k];
        canonical_to_local(t, options_.shard.tp_rank, values, params_.data() + t.offset);
      });
}

void GptModel::zero_grads() {
  grads_.zero();
}

template <typename Alloc>
void GptModel::build_activations(Activations& a, const ModelConfig& c, const ModelOptions& o,
                                 int first, int end, int B, int T, int slots, Alloc&& alloc) {
  const int tp = o.shard.tp_size;
  const std::size_t N = static_cast<std::size_t>(B) * T, C = c.d_model,
                    Cl = static_cast<std::size_t>(c.d_model / tp),
                    F = static_cast<std::size_t>(c.ffn_dim() / tp), V = c.vocab_size,
                    H = static_cast<std::size_t>(c.n_head / tp);
  const std::size_t TT = static_cast<std::size_t>(B) * H * T * T;
  const bool gpt2 = c.arch == Arch::kGpt2;
  const bool blocks = end > first;
  const char* tag = "activations";
  auto layer = [&](LayerActs& L) {
    alloc(L.ln1, N * C, tag);
    if (gpt2) alloc(L.ln1_mean, N, tag);
    alloc(L.ln1_rstd, N, tag);
    alloc(L.qkv, N * 3 * Cl, tag);
    alloc(L.att, TT, tag);
    alloc(L.atty, N * Cl, tag);
    alloc(L.res2, N * C, tag);
    alloc(L.ln2, N * C, tag);
    if (gpt2) alloc(L.ln2_mean, N, tag);
    alloc(L.ln2_rstd, N, tag);
    alloc(L.fc, N * F, tag);
    if (!gpt2) alloc(L.up, N * F, tag);
    alloc(L.act, N * F, tag);
  };
  a.slots.resize(static_cast<std::size_t>(slots));
  for (auto& s : a.slots) {
    if (o.shard.embed) alloc(s.tokens, N, tag);
    if (o.shard.head) alloc(s.targets, N, tag);
    s.resid.resize(static_cast<std::size_t>(end - first + 1));
    for (auto& r : s.resid) alloc(r, N * C, tag);
    if (!o.recompute) {
      s.layers.resize(static_cast<std::size_t>(end - first));
      for (auto& L : s.layers) layer(L);
    }
    if (o.shard.head) {
      alloc(s.lnf, N * C, tag);
      if (gpt2) alloc(s.lnf_mean, N, tag);
      alloc(s.lnf_rstd, N, tag);
      alloc(s.logits, N * V, tag);
      alloc(s.losses, N, tag);
    }
  }
  if (o.recompute && blocks) {
    layer(a.shared);
    alloc(a.recompute_out, N * C, tag);
  }
  const char* stag = "backward scratch";
  alloc(a.dres, N * C, stag);
  alloc(a.dln, N * C, stag);
  if (blocks) {
    alloc(a.datty, N * Cl, stag);
    alloc(a.dqkv, N * 3 * Cl, stag);
    alloc(a.datt, TT, stag);
    alloc(a.dfc, N * F, stag);
    if (!gpt2) alloc(a.dup, N * F, stag);
    if (!gpt2) alloc(a.dqkv_pre, N * 3 * Cl, stag);
    alloc(a.dact, N * F, stag);
  }
}

void GptModel::reserve(int B, int T, int slots) {
  if (acts_ && B == B_ && T == T_ && slots == static_cast<int>(acts_->slots.size())) return;
  if (T > config_.max_seq_len)
    throw InputError(
        fmt::format("sequence length {} exceeds the model's seq_len {}", T, config_.max_seq_len));
  if (slots < 1) throw Error(fmt::format("reserve: {} activation slots", slots));
  acts_.reset();  // release the old set before allocating the new one
  auto a = std::make_unique<Activations>();
  MemoryPool& d = *device_;
  build_activations(*a, config_, options_, first_, end_, B, T, slots,
                    [&d](auto& buf, std::size_t n, const char* tag) {
                      using Elem = std::remove_reference_t<decltype(*buf.data())>;
                      buf = Buffer<Elem>(d, n, tag);
                    });
  acts_ = std::move(a);
  slot_ = 0;
  B_ = B;
  T_ = T;
}

std::size_t GptModel::activation_bytes(const ModelConfig& config, const ModelOptions& options,
                                       int B, int T, int slots) {
  static constexpr std::size_t kCap = std::size_t{1} << 60;
  const int end = options.shard.end_layer < 0 ? config.n_layer : options.shard.end_layer;
  const auto bytes = [&](int s) {
    Activations a;
    std::size_t total = 0;
    build_activations(a, config, options, options.shard.first_layer, end, B, T, s,
                      [&total](auto& buf, std::size_t n, const char*) {
                        total = std::min(kCap, total + std::min(kCap, n * sizeof(*buf.data())));
                      });
    return total;
  };
  // Slots are alike: two are enough to extrapolate, so an estimate for a schedule that keeps
  // every micro-batch (gpipe: up to batch_size slots of every layer) builds no per-slot
  // bookkeeping (it took tens of GB for 10^5 micro-batches of 1024 layers).
  if (slots <= 2) return bytes(slots);
  const std::size_t one = bytes(1), per_slot = bytes(2) - one;
  const auto more = static_cast<std::size_t>(slots - 1);
  if (per_slot != 0 && more > (kCap - one) / per_slot) return kCap;
  return one + more * per_slot;
}

void GptModel::set_slot(int slot) {
  if (!acts_ || slot < 0 || slot >= static_cast<int>(acts_->slots.size()))
    throw Error(fmt::format("activation slot {} is not reserved", slot));
  slot_ = slot;
}

int GptModel::slots() const {
  return acts_ ? static_cast<int>(acts_->slots.size()) : 0;
}

GptModel::LayerActs& GptModel::layer_acts(int l) {
  if (options_.recompute) return acts_->shared;
  return acts_->slots[static_cast<std::size_t>(slot_)].layers[static_cast<std::size_t>(l - first_)];
}

float* GptModel::residual(int l) {
  return acts_->slots[static_cast<std::size_t>(slot_)]
      .resid[static_cast<std::size_t>(l - first_)]
      .data();
}
float* GptModel::dresidual() {
  return acts_->dres.data();
}
const float* GptModel::logits() const {
  return acts_->slots[static_cast<std::size_t>(slot_)].logits.data();
}

void GptModel::reduce_tp(float* data, std::size_t n) {
  if (!tp_allreduce_)
    throw Error("tensor-parallel model without an allreduce (set_tp_allreduce not called)");
  tp_allreduce_(data, n);
}

float GptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
  if (!acts_ || B != B_ || T != T_) reserve(B, T);
  embed_forward(tokens);
  for (int l = first_; l < end_; ++l) block_forward(l);
  return head_forward(targets);
}

void GptModel::forward_logits(const std::int32_t* tokens, int B, int T) {
  if (!acts_ || B != B_ || T != T_) reserve(B, T);
  embed_forward(tokens);
  for (int l = first_; l < end_; ++l) block_forward(l);
  head_forward(nullptr);
}

void GptModel::backward(float dloss) {
  head_backward(dloss);
  for (int l = end_ - 1; l >= first_; --l) block_backward(l);
  embed_backward();
}

void GptModel::embed_forward(const std::int32_t* tokens) {
  auto& s = acts_->slots[static_cast<std::size_t>(slot_)];
  const std::size_t N = static_cast<std::size_t>(B_) * T_;
  for (std::size_t i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw InputError(fmt::format("token id {} at position {} is outside the vocabulary [0, {})",
                                   tokens[i], i, config_.vocab_size));
    s.tokens[i] = tokens[i];
  }
  const auto& t = layout_.tensors();
  const float* wpe = config_.arch == Arch::kGpt2 ? p(t[1]) : nullptr;
  cpu::embedding_forward(s.resid[0].data(), s.tokens.data(), p(t[0]), wpe, B_, T_, config_.d_model);
}

void GptModel::block_forward(int l) {
  block_forward_into(l, residual(l + 1));
}

void GptModel::block_forward_into(int l, float* out) {
  auto& L = layer_acts(l);
  const BlockTensors w = layout_.block(l);
  const int tp = options_.shard.tp_size;
  const int N = B_ * T_, C = config_.d_model, Cl = C / tp, F = config_.ffn_dim() / tp,
            H = config_.n_head / tp, hd = config_.head_dim();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float eps = config_.norm_eps;
  const float* x = residual(l);
  float* q = L.qkv.data();
  // Row-parallel projections: partial sums on each rank, reduced, then the (replicated) bias.
  auto row_parallel_done = [&](float* y, const float* bias) {
    if (tp == 1) return;
    reduce_tp(y, NC);
    if (bias != nullptr) add_bias(y, bias, N, C);
  };
  if (config_.arch == Arch::kGpt2) {
    cpu::layernorm_forward(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, p(*w.ln1w),
                           p(*w.ln1b), N, C, eps);
    cpu::linear_forward(q, L.ln1.data(), p(*w.qkvw), p(*w.qkvb), N, C, 3 * Cl,
                        WeightLayout::kInOut);
    cpu::attention_forward(L.atty.data(), L.att.data(), q, q + Cl, q + 2 * Cl, 3 * Cl, B_, T_, H,
                           hd);
    // res2 = x + proj(atty): the projection lands in res2, then x is added.
    cpu::linear_forward(L.res2.data(), L.atty.data(), p(*w.projw), tp == 1 ? p(*w.projb) : nullptr,
                        N, Cl, C, WeightLayout::kInOut);
    row_parallel_done(L.res2.data(), p(*w.projb));
    cpu::residual_forward(L.res2.data(), L.res2.data(), x, NC);
    cpu::layernorm_forward(L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res2.data(),
                           p(*w.ln2w), p(*w.ln2b), N, C, eps);
    cpu::linear_forward(L.fc.data(), L.ln2.data(), p(*w.fcw), p(*w.fcb), N, C, F,
                        WeightLayout::kInOut);
    cpu::gelu_forward(L.act.data(), L.fc.data(), static_cast<std::size_t>(N) * F);
    cpu::linear_forward(out, L.act.data(), p(*w.fcprojw), tp == 1 ? p(*w.fcprojb) : nullptr, N, F,
                        C, WeightLayout::kInOut);
    row_parallel_done(out, p(*w.fcprojb));
  } else {
    cpu::rmsnorm_forward(L.ln1.data(), L.ln1_rstd.data(), x, p(*w.ln1w), N, C, eps);
    cpu::linear_forward(q, L.ln1.data(), p(*w.qkvw), nullptr, N, C, 3 * Cl, WeightLayout::kOutIn);
    cpu::rotary_forward(q, q, B_, T_, H, hd, 3 * Cl, config_.rope_theta);
    cpu::rotary_forward(q + Cl, q + Cl, B_, T_, H, hd, 3 * Cl, config_.rope_theta);
    cpu::attention_forward(L.atty.data(), L.att.data(), q, q + Cl, q + 2 * Cl, 3 * Cl, B_, T_, H,
                           hd);
    cpu::linear_forward(L.res2.data(), L.atty.data(), p(*w.projw), nullptr, N, Cl, C,
                        WeightLayout::kOutIn);
    row_parallel_done(L.res2.data(), nullptr);
    cpu::residual_forward(L.res2.data(), L.res2.data(), x, NC);
    cpu::rmsnorm_forward(L.ln2.data(), L.ln2_rstd.data(), L.res2.data(), p(*w.ln2w), N, C, eps);
    cpu::linear_forward(L.fc.data(), L.ln2.data(), p(*w.gatew), nullptr, N, C, F,
                        WeightLayout::kOutIn);
    cpu::linear_forward(L.up.data(), L.ln2.data(), p(*w.upw), nullptr, N, C, F,
                        WeightLayout::kOutIn);
    cpu::swiglu_forward(L.act.data(), L.fc.data(), L.up.data(), static_cast<std::size_t>(N) * F);
    cpu::linear_forward(out, L.act.data(), p(*w.downw), nullptr, N, F, C, WeightLayout::kOutIn);
    row_parallel_done(out, nullptr);
  }
  cpu::residual_forward(out, out, L.res2.data(), NC);
}

float GptModel::head_forward(const std::int32_t* targets) {
  auto& s = acts_->slots[static_cast<std::size_t>(slot_)];
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  const float* x = residual(config_.n_layer);
  const float* head_w;
  if (config_.arch == Arch::kGpt2) {
    const auto& lnw = t[t.size() - 2];
    const auto& lnb = t[t.size() - 1];
    cpu::layernorm_forward(s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x, p(lnw), p(lnb), N,
                           C, config_.norm_eps);
    head_w = p(t[0]);  // tied to the token embedding
  } else {
    cpu::rmsnorm_forward(s.lnf.data(), s.lnf_rstd.data(), x, p(t[t.size() - 2]), N, C,
                         config_.norm_eps);
    head_w = p(t[t.size() - 1]);
  }
  cpu::linear_forward(s.logits.data(), s.lnf.data(), head_w, nullptr, N, C, V,
                      WeightLayout::kOutIn);
  if (targets == nullptr) return 0.0f;
  std::size_t counted = 0;
  for (int i = 0; i < N; ++i) {
    s.targets[static_cast<std::size_t>(i)] = targets[i];
    if (targets[i] >= V)
      throw InputError(
          fmt::format("target token {} is outside the vocabulary [0, {})", targets[i], V));
    if (targets[i] >= 0) ++counted;
  }
  cpu::softmax_crossentropy_forward(s.losses.data(), s.logits.data(), s.logits.data(),
                                    s.targets.data(), N, V);
  double sum = 0;
  for (int i = 0; i < N; ++i) sum += s.losses[static_cast<std::size_t>(i)];
  return counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

void GptModel::head_backward(float dloss) {
  auto& a = *acts_;
  auto& s = a.slots[static_cast<std::size_t>(slot_)];
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  // dlogits = dloss * (probs - onehot(target)), written over the probabilities: nothing reads
  // them afterwards, and a second [N, V] buffer would dominate memory for large vocabularies.
  float* probs = s.logits.data();
  for (int i = 0; i < N; ++i) {
    const std::int32_t y = s.targets[static_cast<std::size_t>(i)];
    float* row = probs + static_cast<std::size_t>(i) * V;
    const float scale = y < 0 ? 0.0f : dloss;
    for (int v = 0; v < V; ++v) row[v] *= scale;
    if (y >= 0) row[y] -= dloss;
  }
  const float* dlogits = probs;
  float* dlnf = a.dln.data();
  a.dln.zero();
  a.dres.zero();
  const float* x = residual(config_.n_layer);
  if (config_.arch == Arch::kGpt2) {
    cpu::linear_backward(dlnf, g(t[0]), nullptr, dlogits, s.lnf.data(), p(t[0]), N, C, V,
                         WeightLayout::kOutIn);
    const auto& lnw = t[t.size() - 2];
    const auto& lnb = t[t.size() - 1];
    cpu::layernorm_backward(a.dres.data(), g(lnw), g(lnb), dlnf, x, p(lnw), s.lnf_mean.data(),
                            s.lnf_rstd.data(), N, C);
  } else {
    const auto& head = t[t.size() - 1];
    const auto& nw = t[t.size() - 2];
    cpu::linear_backward(dlnf, g(head), nullptr, dlogits, s.lnf.data(), p(head), N, C, V,
                         WeightLayout::kOutIn);
    cpu::rmsnorm_backward(a.dres.data(), g(nw), dlnf, x, p(nw), s.lnf_rstd.data(), N, C);
  }
}

void GptModel::block_backward(int l) {
  auto& a = *acts_;
  // Recomputation: rebuild this block's activations from its saved input first (into scratch,
  // so the saved streams, possibly still being sent, are not written).
  if (options_.recompute) block_forward_into(l, a.recompute_out.data());
  auto& L = layer_acts(l);
  const BlockTensors w = layout_.block(l);
  const int tp = options_.shard.tp_size;
  const int N = B_ * T_, C = config_.d_model, Cl = C / tp, F = config_.ffn_dim() / tp,
            H = config_.n_head / tp, hd = config_.head_dim();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const float* x = residual(l);
  float* dres = a.dres.data();  // holds d(out); becomes d(res2), then d(x)
  const float* q = L.qkv.data();
  float* dq = a.dqkv.data();
  // Column-parallel inputs: each rank holds part of d(input); the sum is the whole gradient.
  auto column_parallel_done = [&](float* dinp) {
    if (tp > 1) reduce_tp(dinp, NC);
  };
  a.dact.zero();
  a.dfc.zero();
  a.dln.zero();
  if (config_.arch == Arch::kGpt2) {
    // MLP branch: out = res2 + fcproj(gelu(fc(ln2(res2))))
    cpu::linear_backward(a.dact.data(), g(*w.fcprojw), g(*w.fcprojb), dres, L.act.data(),
                         p(*w.fcprojw), N, F, C, WeightLayout::kInOut);
    cpu::gelu_backward(a.dfc.data(), L.fc.data(), a.dact.data(), static_cast<std::size_t>(N) * F);
    cpu::linear_backward(a.dln.data(), g(*w.fcw), g(*w.fcb), a.dfc.data(), L.ln2.data(), p(*w.fcw),
                         N, C, F, WeightLayout::kInOut);
    column_parallel_done(a.dln.data());
    cpu::layernorm_backward(dres, g(*w.ln2w), g(*w.ln2b), a.dln.data(), L.res2.data(), p(*w.ln2w),
                            L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
    // Attention branch: res2 = x + proj(attn(qkv(ln1(x))))
    a.datty.zero();
    cpu::linear_backward(a.datty.data(), g(*w.projw), g(*w.projb), dres, L.atty.data(), p(*w.projw),
                         N, Cl, C, WeightLayout::kInOut);
    a.dqkv.zero();
    cpu::attention_backward(dq, dq + Cl, dq + 2 * Cl, a.datt.data(), a.datty.data(), q, q + Cl,
                            q + 2 * Cl, L.att.data(), 3 * Cl, B_, T_, H, hd);
    a.dln.zero();
    cpu::linear_backward(a.dln.data(), g(*w.qkvw), g(*w.qkvb), dq, L.ln1.data(), p(*w.qkvw), N, C,
                         3 * Cl, WeightLayout::kInOut);
    // The key bias shifts every score of a query row by the same amount, which softmax ignores:
    // its gradient is exactly zero. Computed, it is rounding noise that Adam's normalisation
    // would turn into real steps that differ with any change of summation order (strategies,
    // thread counts), so it is kept at its exact value.
    std::fill(g(*w.qkvb) + Cl, g(*w.qkvb) + 2 * Cl, 0.0f);
    column_parallel_done(a.dln.data());
    cpu::layernorm_backward(dres, g(*w.ln1w), g(*w.ln1b), a.dln.data(), x, p(*w.ln1w),
                            L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
  } else {
    const std::size_t NF = static_cast<std::size_t>(N) * F;
    cpu::linear_backward(a.dact.data(), g(*w.downw), nullptr, dres, L.act.data(), p(*w.downw), N, F,
                         C, WeightLayout::kOutIn);
    std::fill(a.dup.data(), a.dup.data() + NF, 0.0f);
    cpu::swiglu_backward(a.dfc.data(), a.dup.data(), a.dact.data(), L.fc.data(), L.up.data(), NF);
    cpu::linear_backward(a.dln.data(), g(*w.gatew), nullptr, a.dfc.data(), L.ln2.data(),
                         p(*w.gatew), N, C, F, WeightLayout::kOutIn);
    cpu::linear_backward(a.dln.data(), g(*w.upw), nullptr, a.dup.data(), L.ln2.data(), p(*w.upw), N,
                         C, F, WeightLayout::kOutIn);
    column_parallel_done(a.dln.data());
    cpu::rmsnorm_backward(dres, g(*w.ln2w), a.dln.data(), L.res2.data(), p(*w.ln2w),
                          L.ln2_rstd.data(), N, C);
    a.datty.zero();
    cpu::linear_backward(a.datty.data(), g(*w.projw), nullptr, dres, L.atty.data(), p(*w.projw), N,
                         Cl, C, WeightLayout::kOutIn);
    a.dqkv.zero();
    cpu::attention_backward(dq, dq + Cl, dq + 2 * Cl, a.datt.data(), a.datty.data(), q, q + Cl,
                            q + 2 * Cl, L.att.data(), 3 * Cl, B_, T_, H, hd);
    // Rotary is linear: gradients w.r.t. the pre-rotary q and k need only the incoming
    // gradient. v has no rotary, so its gradient is copied.
    a.dqkv_pre.zero();
    cpu::rotary_backward(a.dqkv_pre.data(), dq, B_, T_, H, hd, 3 * Cl, config_.rope_theta);
    cpu::rotary_backward(a.dqkv_pre.data() + Cl, dq + Cl, B_, T_, H, hd, 3 * Cl,
                         config_.rope_theta);
    const std::size_t W = 3 * static_cast<std::size_t>(Cl);
    for (std::size_t i = 0; i < static_cast<std::size_t>(N); ++i) {
      const std::size_t row = i * W + 2 * static_cast<std::size_t>(Cl);
      std::copy(dq + row, dq + row + Cl, a.dqkv_pre.data() + row);
    }
    a.dln.zero();
    cpu::linear_backward(a.dln.data(), g(*w.qkvw), nullptr, a.dqkv_pre.data(), L.ln1.data(),
                         p(*w.qkvw), N, C, 3 * Cl, WeightLayout::kOutIn);
    column_parallel_done(a.dln.data());
    cpu::rmsnorm_backward(dres, g(*w.ln1w), a.dln.data(), x, p(*w.ln1w), L.ln1_rstd.data(), N, C);
  }
}

void GptModel::embed_backward() {
  auto& a = *acts_;
  auto& s = a.slots[static_cast<std::size_t>(slot_)];
  const auto& t = layout_.tensors();
  float* dwpe = config_.arch == Arch::kGpt2 ? g(t[1]) : nullptr;
  cpu::embedding_backward(g(t[0]), dwpe, a.dres.data(), s.tokens.data(), B_, T_, config_.d_model);
}

}  // namespace saturn
