#include "runtime/model/gpt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"

namespace saturn {

using cpu::WeightLayout;

// Per-layer saved activations and the scratch space the backward pass reuses layer by layer.
struct GptModel::Activations {
  struct Layer {
    Buffer<float> ln1, ln1_mean, ln1_rstd;  // gpt2 uses mean; llama only rstd
    Buffer<float> qkv;                      // [N, 3C] (llama: after rotary)
    Buffer<float> att;                      // [B, H, T, T] softmax probabilities
    Buffer<float> atty;                     // [N, C] attention output before projection
    Buffer<float> res2;                     // [N, C] residual after attention
    Buffer<float> ln2, ln2_mean, ln2_rstd;
    Buffer<float> fc;   // gpt2: [N, F] pre-GELU; llama: gate [N, F]
    Buffer<float> up;   // llama: up [N, F]
    Buffer<float> act;  // [N, F] GELU(fc) or silu(gate)*up
  };
  std::vector<Layer> layers;
  std::vector<Buffer<float>> resid;  // L+1 residual streams, [N, C]
  Buffer<float> lnf, lnf_mean, lnf_rstd;
  Buffer<float> logits;  // [N, V]; softmax probabilities after head_forward
  Buffer<float> losses;  // [N]
  Buffer<std::int32_t> tokens, targets;
  // backward scratch
  Buffer<float> dres, dln, datty, dqkv, dqkv_pre, datt, dfc, dup, dact;
};

struct GptModel::BlockParams {
  // gpt2
  const ParamTensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;
  // llama
  const ParamTensor *gatew, *upw, *downw;
};

GptModel::GptModel(const ModelConfig& config, MemoryPool& device)
    : config_(config), layout_(config), device_(&device) {
  config_.validate();
  params_ = Buffer<float>(device, layout_.total(), "parameters");
  grads_ = Buffer<float>(device, layout_.total(), "gradients");
  params_.zero();
  grads_.zero();
}

GptModel::~GptModel() = default;

GptModel::BlockParams GptModel::block_params(int l) const {
  const auto& t = layout_.tensors();
  BlockParams b{};
  if (config_.arch == Arch::kGpt2) {
    const std::size_t i = 2 + 12 * static_cast<std::size_t>(l);
    b.ln1w = &t[i];
    b.ln1b = &t[i + 1];
    b.qkvw = &t[i + 2];
    b.qkvb = &t[i + 3];
    b.projw = &t[i + 4];
    b.projb = &t[i + 5];
    b.ln2w = &t[i + 6];
    b.ln2b = &t[i + 7];
    b.fcw = &t[i + 8];
    b.fcb = &t[i + 9];
    b.fcprojw = &t[i + 10];
    b.fcprojb = &t[i + 11];
  } else {
    const std::size_t i = 1 + 9 * static_cast<std::size_t>(l);
    b.ln1w = &t[i];
    b.qkvw = &t[i + 1];  // q_proj, k_proj, v_proj adjacent: one [3C, C] weight
    b.projw = &t[i + 4];
    b.ln2w = &t[i + 5];
    b.gatew = &t[i + 6];
    b.upw = &t[i + 7];
    b.downw = &t[i + 8];
  }
  return b;
}

void GptModel::init_weights(std::uint64_t seed) {
  Rng rng(seed);
  const double residual_scale = 1.0 / std::sqrt(2.0 * config_.n_layer);
  for (const auto& t : layout_.tensors()) {
    float* w = params_.data() + t.offset;
    const bool is_norm = t.name.find("ln_") != std::string::npos ||
                         t.name.find("layernorm") != std::string::npos ||
                         t.name.find("norm.weight") != std::string::npos;
    const bool is_bias = t.name.size() > 5 && t.name.compare(t.name.size() - 5, 5, ".bias") == 0;
    if (is_bias) {
      for (std::size_t i = 0; i < t.numel; ++i) w[i] = 0.0f;
    } else if (is_norm) {
      for (std::size_t i = 0; i < t.numel; ++i) w[i] = 1.0f;
    } else {
      const bool residual_proj = t.name.find("c_proj.weight") != std::string::npos ||
                                 t.name.find("o_proj") != std::string::npos ||
                                 t.name.find("down_proj") != std::string::npos;
      const double std = 0.02 * (residual_proj ? residual_scale : 1.0);
      for (std::size_t i = 0; i < t.numel; ++i) w[i] = static_cast<float>(std * rng.normal());
    }
  }
}

void GptModel::zero_grads() {
  grads_.zero();
}

void GptModel::reserve(int B, int T) {
  if (acts_ && B == B_ && T == T_) return;
  if (T > config_.max_seq_len)
    throw InputError(
        fmt::format("sequence length {} exceeds the model's seq_len {}", T, config_.max_seq_len));
  acts_.reset();  // release the old set before allocating the new one
  auto a = std::make_unique<Activations>();
  MemoryPool& d = *device_;
  const std::size_t N = static_cast<std::size_t>(B) * T, C = config_.d_model, F = config_.ffn_dim(),
                    V = config_.vocab_size, H = config_.n_head;
  const std::size_t TT = static_cast<std::size_t>(B) * H * T * T;
  const bool gpt2 = config_.arch == Arch::kGpt2;
  const char* tag = "activations";
  a->tokens = Buffer<std::int32_t>(d, N, tag);
  a->targets = Buffer<std::int32_t>(d, N, tag);
  for (int l = 0; l <= config_.n_layer; ++l) a->resid.emplace_back(d, N * C, tag);
  a->layers.resize(config_.n_layer);
  for (auto& L : a->layers) {
    L.ln1 = Buffer<float>(d, N * C, tag);
    if (gpt2) L.ln1_mean = Buffer<float>(d, N, tag);
    L.ln1_rstd = Buffer<float>(d, N, tag);
    L.qkv = Buffer<float>(d, N * 3 * C, tag);
    L.att = Buffer<float>(d, TT, tag);
    L.atty = Buffer<float>(d, N * C, tag);
    L.res2 = Buffer<float>(d, N * C, tag);
    L.ln2 = Buffer<float>(d, N * C, tag);
    if (gpt2) L.ln2_mean = Buffer<float>(d, N, tag);
    L.ln2_rstd = Buffer<float>(d, N, tag);
    L.fc = Buffer<float>(d, N * F, tag);
    if (!gpt2) L.up = Buffer<float>(d, N * F, tag);
    L.act = Buffer<float>(d, N * F, tag);
  }
  a->lnf = Buffer<float>(d, N * C, tag);
  if (gpt2) a->lnf_mean = Buffer<float>(d, N, tag);
  a->lnf_rstd = Buffer<float>(d, N, tag);
  a->logits = Buffer<float>(d, N * V, tag);
  a->losses = Buffer<float>(d, N, tag);
  const char* stag = "backward scratch";
  a->dres = Buffer<float>(d, N * C, stag);
  a->dln = Buffer<float>(d, N * C, stag);
  a->datty = Buffer<float>(d, N * C, stag);
  a->dqkv = Buffer<float>(d, N * 3 * C, stag);
  a->datt = Buffer<float>(d, TT, stag);
  a->dfc = Buffer<float>(d, N * F, stag);
  if (!gpt2) a->dup = Buffer<float>(d, N * F, stag);
  if (!gpt2) a->dqkv_pre = Buffer<float>(d, N * 3 * C, stag);
  a->dact = Buffer<float>(d, N * F, stag);
  acts_ = std::move(a);
  B_ = B;
  T_ = T;
}

float* GptModel::residual(int l) {
  return acts_->resid[static_cast<std::size_t>(l)].data();
}
float* GptModel::dresidual() {
  return acts_->dres.data();
}
const float* GptModel::logits() const {
  return acts_->logits.data();
}

float GptModel::forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
  reserve(B, T);
  embed_forward(tokens);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(l);
  return head_forward(targets);
}

void GptModel::forward_logits(const std::int32_t* tokens, int B, int T) {
  reserve(B, T);
  embed_forward(tokens);
  for (int l = 0; l < config_.n_layer; ++l) block_forward(l);
  head_forward(nullptr);
}

void GptModel::backward(float dloss) {
  head_backward(dloss);
  for (int l = config_.n_layer - 1; l >= 0; --l) block_backward(l);
  embed_backward();
}

void GptModel::embed_forward(const std::int32_t* tokens) {
  auto& a = *acts_;
  const std::size_t N = static_cast<std::size_t>(B_) * T_;
  for (std::size_t i = 0; i < N; ++i) {
    if (tokens[i] < 0 || tokens[i] >= config_.vocab_size)
      throw InputError(fmt::format("token id {} at position {} is outside the vocabulary [0, {})",
                                   tokens[i], i, config_.vocab_size));
    a.tokens[i] = tokens[i];
  }
  const auto& t = layout_.tensors();
  const float* wpe = config_.arch == Arch::kGpt2 ? p(t[1]) : nullptr;
  cpu::embedding_forward(a.resid[0].data(), a.tokens.data(), p(t[0]), wpe, B_, T_, config_.d_model);
}

void GptModel::block_forward(int l) {
  auto& a = *acts_;
  auto& L = a.layers[static_cast<std::size_t>(l)];
  const BlockParams w = block_params(l);
  const int N = B_ * T_, C = config_.d_model, F = config_.ffn_dim(), H = config_.n_head,
            hd = config_.head_dim();
  const float eps = config_.norm_eps;
  const float* x = a.resid[static_cast<std::size_t>(l)].data();
  float* out = a.resid[static_cast<std::size_t>(l) + 1].data();
  if (config_.arch == Arch::kGpt2) {
    cpu::layernorm_forward(L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, p(*w.ln1w),
                           p(*w.ln1b), N, C, eps);
    cpu::linear_forward(L.qkv.data(), L.ln1.data(), p(*w.qkvw), p(*w.qkvb), N, C, 3 * C,
                        WeightLayout::kInOut);
    cpu::attention_forward(L.atty.data(), L.att.data(), L.qkv.data(), L.qkv.data() + C,
                           L.qkv.data() + 2 * C, 3 * C, B_, T_, H, hd);
    // res2 = x + proj(atty): the projection lands in res2, then x is added.
    cpu::linear_forward(L.res2.data(), L.atty.data(), p(*w.projw), p(*w.projb), N, C, C,
                        WeightLayout::kInOut);
    cpu::residual_forward(L.res2.data(), L.res2.data(), x, static_cast<std::size_t>(N) * C);
    cpu::layernorm_forward(L.ln2.data(), L.ln2_mean.data(), L.ln2_rstd.data(), L.res2.data(),
                           p(*w.ln2w), p(*w.ln2b), N, C, eps);
    cpu::linear_forward(L.fc.data(), L.ln2.data(), p(*w.fcw), p(*w.fcb), N, C, F,
                        WeightLayout::kInOut);
    cpu::gelu_forward(L.act.data(), L.fc.data(), static_cast<std::size_t>(N) * F);
    cpu::linear_forward(out, L.act.data(), p(*w.fcprojw), p(*w.fcprojb), N, F, C,
                        WeightLayout::kInOut);
  } else {
    cpu::rmsnorm_forward(L.ln1.data(), L.ln1_rstd.data(), x, p(*w.ln1w), N, C, eps);
    cpu::linear_forward(L.qkv.data(), L.ln1.data(), p(*w.qkvw), nullptr, N, C, 3 * C,
                        WeightLayout::kOutIn);
    cpu::rotary_forward(L.qkv.data(), L.qkv.data(), B_, T_, H, hd, 3 * C, config_.rope_theta);
    cpu::rotary_forward(L.qkv.data() + C, L.qkv.data() + C, B_, T_, H, hd, 3 * C,
                        config_.rope_theta);
    cpu::attention_forward(L.atty.data(), L.att.data(), L.qkv.data(), L.qkv.data() + C,
                           L.qkv.data() + 2 * C, 3 * C, B_, T_, H, hd);
    cpu::linear_forward(L.res2.data(), L.atty.data(), p(*w.projw), nullptr, N, C, C,
                        WeightLayout::kOutIn);
    cpu::residual_forward(L.res2.data(), L.res2.data(), x, static_cast<std::size_t>(N) * C);
    cpu::rmsnorm_forward(L.ln2.data(), L.ln2_rstd.data(), L.res2.data(), p(*w.ln2w), N, C, eps);
    cpu::linear_forward(L.fc.data(), L.ln2.data(), p(*w.gatew), nullptr, N, C, F,
                        WeightLayout::kOutIn);
    cpu::linear_forward(L.up.data(), L.ln2.data(), p(*w.upw), nullptr, N, C, F,
                        WeightLayout::kOutIn);
    cpu::swiglu_forward(L.act.data(), L.fc.data(), L.up.data(), static_cast<std::size_t>(N) * F);
    cpu::linear_forward(out, L.act.data(), p(*w.downw), nullptr, N, F, C, WeightLayout::kOutIn);
  }
  cpu::residual_forward(out, out, L.res2.data(), static_cast<std::size_t>(N) * C);
}

float GptModel::head_forward(const std::int32_t* targets) {
  auto& a = *acts_;
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  const float* x = a.resid[static_cast<std::size_t>(config_.n_layer)].data();
  const float* head_w;
  if (config_.arch == Arch::kGpt2) {
    const auto& lnw = t[t.size() - 2];
    const auto& lnb = t[t.size() - 1];
    cpu::layernorm_forward(a.lnf.data(), a.lnf_mean.data(), a.lnf_rstd.data(), x, p(lnw), p(lnb), N,
                           C, config_.norm_eps);
    head_w = p(t[0]);  // tied to the token embedding
  } else {
    cpu::rmsnorm_forward(a.lnf.data(), a.lnf_rstd.data(), x, p(t[t.size() - 2]), N, C,
                         config_.norm_eps);
    head_w = p(t[t.size() - 1]);
  }
  cpu::linear_forward(a.logits.data(), a.lnf.data(), head_w, nullptr, N, C, V,
                      WeightLayout::kOutIn);
  if (targets == nullptr) return 0.0f;
  std::size_t counted = 0;
  for (int i = 0; i < N; ++i) {
    a.targets[static_cast<std::size_t>(i)] = targets[i];
    if (targets[i] >= V)
      throw InputError(
          fmt::format("target token {} is outside the vocabulary [0, {})", targets[i], V));
    if (targets[i] >= 0) ++counted;
  }
  cpu::softmax_crossentropy_forward(a.losses.data(), a.logits.data(), a.logits.data(),
                                    a.targets.data(), N, V);
  double sum = 0;
  for (int i = 0; i < N; ++i) sum += a.losses[static_cast<std::size_t>(i)];
  return counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

void GptModel::head_backward(float dloss) {
  auto& a = *acts_;
  const int N = B_ * T_, C = config_.d_model, V = config_.vocab_size;
  const auto& t = layout_.tensors();
  // dlogits = dloss * (probs - onehot(target)), written over the probabilities: nothing reads
  // them afterwards, and a second [N, V] buffer would dominate memory for large vocabularies.
  float* probs = a.logits.data();
  for (int i = 0; i < N; ++i) {
    const std::int32_t y = a.targets[static_cast<std::size_t>(i)];
    float* row = probs + static_cast<std::size_t>(i) * V;
    const float scale = y < 0 ? 0.0f : dloss;
    for (int v = 0; v < V; ++v) row[v] *= scale;
    if (y >= 0) row[y] -= dloss;
  }
  const float* dlogits = probs;
  float* dlnf = a.dln.data();
  a.dln.zero();
  a.dres.zero();
  const float* x = a.resid[static_cast<std::size_t>(config_.n_layer)].data();
  if (config_.arch == Arch::kGpt2) {
    cpu::linear_backward(dlnf, g(t[0]), nullptr, dlogits, a.lnf.data(), p(t[0]), N, C, V,
                         WeightLayout::kOutIn);
    const auto& lnw = t[t.size() - 2];
    const auto& lnb = t[t.size() - 1];
    cpu::layernorm_backward(a.dres.data(), g(lnw), g(lnb), dlnf, x, p(lnw), a.lnf_mean.data(),
                            a.lnf_rstd.data(), N, C);
  } else {
    const auto& head = t[t.size() - 1];
    const auto& nw = t[t.size() - 2];
    cpu::linear_backward(dlnf, g(head), nullptr, dlogits, a.lnf.data(), p(head), N, C, V,
                         WeightLayout::kOutIn);
    cpu::rmsnorm_backward(a.dres.data(), g(nw), dlnf, x, p(nw), a.lnf_rstd.data(), N, C);
  }
}

void GptModel::block_backward(int l) {
  auto& a = *acts_;
  auto& L = a.layers[static_cast<std::size_t>(l)];
  const BlockParams w = block_params(l);
  const int N = B_ * T_, C = config_.d_model, F = config_.ffn_dim(), H = config_.n_head,
            hd = config_.head_dim();
  const float* x = a.resid[static_cast<std::size_t>(l)].data();
  float* dres = a.dres.data();  // holds d(out); becomes d(res2), then d(x)
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
    cpu::layernorm_backward(dres, g(*w.ln2w), g(*w.ln2b), a.dln.data(), L.res2.data(), p(*w.ln2w),
                            L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
    // Attention branch: res2 = x + proj(attn(qkv(ln1(x))))
    a.datty.zero();
    cpu::linear_backward(a.datty.data(), g(*w.projw), g(*w.projb), dres, L.atty.data(), p(*w.projw),
                         N, C, C, WeightLayout::kInOut);
    a.dqkv.zero();
    cpu::attention_backward(a.dqkv.data(), a.dqkv.data() + C, a.dqkv.data() + 2 * C, a.datt.data(),
                            a.datty.data(), L.qkv.data(), L.qkv.data() + C, L.qkv.data() + 2 * C,
                            L.att.data(), 3 * C, B_, T_, H, hd);
    a.dln.zero();
    cpu::linear_backward(a.dln.data(), g(*w.qkvw), g(*w.qkvb), a.dqkv.data(), L.ln1.data(),
                         p(*w.qkvw), N, C, 3 * C, WeightLayout::kInOut);
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
    cpu::rmsnorm_backward(dres, g(*w.ln2w), a.dln.data(), L.res2.data(), p(*w.ln2w),
                          L.ln2_rstd.data(), N, C);
    a.datty.zero();
    cpu::linear_backward(a.datty.data(), g(*w.projw), nullptr, dres, L.atty.data(), p(*w.projw), N,
                         C, C, WeightLayout::kOutIn);
    a.dqkv.zero();
    cpu::attention_backward(a.dqkv.data(), a.dqkv.data() + C, a.dqkv.data() + 2 * C, a.datt.data(),
                            a.datty.data(), L.qkv.data(), L.qkv.data() + C, L.qkv.data() + 2 * C,
                            L.att.data(), 3 * C, B_, T_, H, hd);
    // Rotary is linear: gradients w.r.t. the pre-rotary q and k need only the incoming
    // gradient. v has no rotary, so its gradient is copied.
    a.dqkv_pre.zero();
    cpu::rotary_backward(a.dqkv_pre.data(), a.dqkv.data(), B_, T_, H, hd, 3 * C,
                         config_.rope_theta);
    cpu::rotary_backward(a.dqkv_pre.data() + C, a.dqkv.data() + C, B_, T_, H, hd, 3 * C,
                         config_.rope_theta);
    for (std::size_t i = 0; i < static_cast<std::size_t>(N); ++i) {
      const std::size_t row = i * 3 * static_cast<std::size_t>(C) + 2 * static_cast<std::size_t>(C);
      std::copy(a.dqkv.data() + row, a.dqkv.data() + row + C, a.dqkv_pre.data() + row);
    }
    a.dln.zero();
    cpu::linear_backward(a.dln.data(), g(*w.qkvw), nullptr, a.dqkv_pre.data(), L.ln1.data(),
                         p(*w.qkvw), N, C, 3 * C, WeightLayout::kOutIn);
    cpu::rmsnorm_backward(dres, g(*w.ln1w), a.dln.data(), x, p(*w.ln1w), L.ln1_rstd.data(), N, C);
  }
}

void GptModel::embed_backward() {
  auto& a = *acts_;
  const auto& t = layout_.tensors();
  float* dwpe = config_.arch == Arch::kGpt2 ? g(t[1]) : nullptr;
  cpu::embedding_backward(g(t[0]), dwpe, a.dres.data(), a.tokens.data(), B_, T_, config_.d_model);
}

}  // namespace saturn
