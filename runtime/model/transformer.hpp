// The model program: the GPT decoder family (gpt2, llama) written once, forward, backward and
// recomputation, over a backend's ops (runtime/backend/<backend>/backend.hpp). Each backend
// instantiates it once (transformer_cpu.cpp; the CUDA backend's provider.cpp); every other file
// sees it through the Model interface (model.hpp).
//
// A backend B provides its element types (B::Act for activations and their gradients,
// B::Weight for the weights the kernels read, B::AttnSaved for what attention keeps for
// backward), a B::Context (stream, handles) and static functions for the ops, each enqueued in
// call order. Parameter gradients, norm statistics and losses are fp32 on every backend.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/model/activations.hpp"
#include "runtime/model/model.hpp"

namespace saturn {

template <class B>
class Transformer final : public Model {
 public:
  using Act = typename B::Act;
  using Weight = typename B::Weight;
  using Ctx = typename B::Context;
  static constexpr bool kSeparateWeights = !std::is_same_v<Weight, float>;

  Transformer(const ModelConfig& config, const ModelOptions& options, Ctx& ctx, MemoryPool& pool)
      : config_(config),
        options_(options),
        traits_(backend_traits(B::kKind)),
        layout_((config.validate(), B::check_config(config), config), options.shard.tp_size,
                traits_.param_align),
        ctx_(&ctx),
        pool_(&pool) {
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
    group_weights_.assign(groups, nullptr);
    group_trained_.assign(groups, nullptr);
    group_grads_.assign(groups, nullptr);
    if (options_.storage == ParamStorage::kOwned) {
      master_ = Buffer<float>(pool, layout_.total(), "parameters");
      B::zero(*ctx_, master_.data(), master_.size());
      if constexpr (kSeparateWeights) {
        weights_ = Buffer<Weight>(pool, layout_.total(), "parameters");
        B::zero(*ctx_, weights_.data(), weights_.size());
      }
      // Gradients of the trainable tensors only (all of them but for a LoRA job's base).
      grads_ = Buffer<float>(pool, layout_.grad_total(), "gradients");
      B::zero(*ctx_, grads_.data(), grads_.size());
      for (int g = -1; g + 1 < layout_.num_groups(); ++g) {
        group_weights_[static_cast<std::size_t>(g + 1)] = owned_weights() + layout_.group_begin(g);
        group_grads_[static_cast<std::size_t>(g + 1)] = grads_.data() + layout_.grad_group_begin(g);
      }
    }
  }

  const ModelConfig& config() const override { return config_; }
  const ModelOptions& options() const override { return options_; }
  const ParameterLayout& layout() const override { return layout_; }
  const BackendTraits& traits() const override { return traits_; }
  int first_layer() const override { return first_; }
  int end_layer() const override { return end_; }

  float* master() override {
    require_owned("master");
    return master_.data();
  }
  void* weights() override {
    require_owned("weights");
    return owned_weights();
  }
  float* grads() override {
    require_owned("grads");
    return grads_.data();
  }
  void refresh_weights() override {
    require_owned("refresh_weights");
    if constexpr (kSeparateWeights)
      B::to_weights(*ctx_, weights_.data(), master_.data(), layout_.total());
  }
  void init_weights(std::uint64_t seed) override {
    require_owned("init_weights");
    const auto& local = layout_.tensors();
    std::vector<float> staging;
    generate_canonical_weights(
        config_, seed, [&](std::size_t k, const ParamTensor&, const float* values) {
          const ParamTensor& t = local[k];
          staging.resize(t.numel);
          canonical_to_local(t, options_.shard.tp_rank, values, staging.data());
          B::upload(*ctx_, master_.data() + t.offset, staging.data(), t.numel);
        });
    refresh_weights();
  }
  void zero_grads() override {
    require_owned("zero_grads");
    B::zero(*ctx_, grads_.data(), grads_.size());
  }

  void bind_group(int group, const void* weights, float* grads) override {
    if (options_.storage != ParamStorage::kBorrowed)
      throw Error("bind_group on a model that owns its parameters");
    if (group < -1 || group >= config_.n_layer + 1)
      throw Error(fmt::format("bind_group: no parameter group {}", group));
    group_weights_[static_cast<std::size_t>(group + 1)] = static_cast<const Weight*>(weights);
    group_grads_[static_cast<std::size_t>(group + 1)] = grads;
  }
  void bind_group_trained(int group, const void* trained) override {
    if (options_.storage != ParamStorage::kBorrowed)
      throw Error("bind_group_trained on a model that owns its parameters");
    if (group < -1 || group >= config_.n_layer + 1)
      throw Error(fmt::format("bind_group_trained: no parameter group {}", group));
    group_trained_[static_cast<std::size_t>(group + 1)] = static_cast<const Weight*>(trained);
  }

  void set_tp_allreduce(std::function<void(void*, std::size_t)> f) override {
    tp_allreduce_ = std::move(f);
  }

  void reserve(int B_, int T_, int slots) override {
    if (acts_ && B_ == B_n_ && T_ == T_n_ && slots == static_cast<int>(acts_->slots.size())) return;
    if (T_ > config_.max_seq_len)
      throw InputError(fmt::format("sequence length {} exceeds the model's seq_len {}", T_,
                                   config_.max_seq_len));
    if (B_ < 1 || T_ < 1) throw InputError(fmt::format("micro-batch {}x{} is empty", B_, T_));
    if (slots < 1) throw Error(fmt::format("reserve: {} activation slots", slots));
    acts_.reset();  // release the old set before allocating the new one
    auto a = std::make_unique<Acts>();
    MemoryPool& pool = *pool_;
    build_activations<B>(*a, config_, options_, first_, end_, B_, T_, slots,
                         [&pool](auto& buf, std::size_t n, const char* tag) {
                           using Elem = std::remove_reference_t<decltype(*buf.data())>;
                           buf = Buffer<Elem>(pool, n, tag);
                         });
    acts_ = std::move(a);
    segments_.assign(static_cast<std::size_t>(slots), nullptr);
    slot_ = 0;
    B_n_ = B_;
    T_n_ = T_;
  }
  void set_slot(int slot) override {
    if (!acts_ || slot < 0 || slot >= static_cast<int>(acts_->slots.size()))
      throw Error(fmt::format("activation slot {} is not reserved", slot));
    slot_ = slot;
  }
  int slots() const override { return acts_ ? static_cast<int>(acts_->slots.size()) : 0; }
  void set_segments(const std::int32_t* segments) override {
    require_reserved();
    segments_[static_cast<std::size_t>(slot_)] = segments;
  }
  int batch() const override { return B_n_; }
  int seq() const override { return T_n_; }

  const float* loss() const override { return cur().loss.data(); }
  void* residual(int l) override { return resid(l); }
  void* dresidual() override { return acts_->dres.data(); }
  const void* logits() const override { return cur().logits.data(); }

  void embed_forward(const std::int32_t* tokens) override {
    require_reserved();
    auto& s = cur();
    B::copy(*ctx_, s.tokens.data(), tokens, static_cast<std::size_t>(B_n_) * T_n_);
    const OuterTensors o = layout_.outer();
    const Weight* wpe = o.position_embedding != nullptr ? p(*o.position_embedding) : nullptr;
    B::embedding_forward(*ctx_, resid(first_), s.tokens.data(), p(*o.token_embedding), wpe, B_n_,
                         T_n_, config_.d_model, config_.embedding_scale(), positions());
  }

  void block_forward(int l) override {
    require_reserved();
    block_forward_into(l, resid(l + 1));
  }

  void head_forward(const std::int32_t* targets) override {
    require_reserved();
    auto& s = cur();
    const int N = B_n_ * T_n_, C = config_.d_model, V = config_.vocab_size;
    const OuterTensors o = layout_.outer();
    const Act* x = resid(config_.n_layer);
    if (config_.arch == Arch::kGpt2) {
      B::layernorm_forward(*ctx_, s.lnf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), x,
                           p(*o.final_norm_weight), p(*o.final_norm_bias), N, C, config_.norm_eps);
    } else {
      B::rmsnorm_forward(*ctx_, s.lnf.data(), s.lnf_rstd.data(), x, p(*o.final_norm_weight), N, C,
                         config_.norm_eps, config_.norm_offset());
    }
    B::linear_forward(*ctx_, s.logits.data(), s.lnf.data(), p(*o.head), nullptr, N, C, V, false);
    const float softcap = config_.final_softcap;
    if (softcap > 0.0f)
      B::softcap_forward(*ctx_, s.logits.data(), static_cast<std::size_t>(N) * V, softcap);
    if (targets == nullptr) return;
    B::copy(*ctx_, s.targets.data(), targets, static_cast<std::size_t>(N));
    B::crossentropy_forward(*ctx_, s.losses.data(), s.lse.data(), s.logits.data(), s.targets.data(),
                            N, V, softcap);
    B::loss_mean(*ctx_, s.loss.data(), s.losses.data(), s.targets.data(), N);
  }

  void head_backward(float dloss) override {
    require_reserved();
    auto& a = *acts_;
    auto& s = cur();
    const int N = B_n_ * T_n_, C = config_.d_model, V = config_.vocab_size;
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const OuterTensors o = layout_.outer();
    // The logits become their own gradient in place: a second [N, V] buffer would dominate
    // memory for large vocabularies. With a final softcap, the raw logits' gradient.
    B::crossentropy_backward(*ctx_, s.logits.data(), s.lse.data(), s.targets.data(), dloss, N, V,
                             config_.final_softcap);
    const Act* dlogits = s.logits.data();
    B::zero(*ctx_, a.dres.data(), NC);
    const Act* x = resid(config_.n_layer);
    // dln is overwritten by the head's input gradient (beta = 0): no zeroing first.
    const ParamTensor &head = *o.head, &nw = *o.final_norm_weight;
    B::linear_backward(*ctx_, a.dln.data(), g(head), nullptr, dlogits, s.lnf.data(), p(head), N, C,
                       V, false, /*overwrite_dinp=*/true);
    if (config_.arch == Arch::kGpt2) {
      const ParamTensor& nb = *o.final_norm_bias;
      B::layernorm_backward(*ctx_, a.dres.data(), g(nw), g(nb), a.dln.data(), x, p(nw),
                            s.lnf_mean.data(), s.lnf_rstd.data(), N, C);
    } else {
      B::rmsnorm_backward(*ctx_, a.dres.data(), g(nw), a.dln.data(), x, p(nw), s.lnf_rstd.data(), N,
                          C, config_.norm_offset());
    }
  }

  void block_backward(int l) override {
    require_reserved();
    auto& a = *acts_;
    // Recomputation: rebuild this block's activations from its saved input first (into
    // scratch, so the saved streams, possibly still being sent, are not written).
    if (options_.recompute) block_forward_into(l, a.recompute_out.data());
    auto& L = layer_acts(l);
    const BlockTensors w = layout_.block(l);
    const int tp = options_.shard.tp_size;
    const auto [N, C, Cl, F, H, Hkv, hd, KVl, W, NC, NF, NW] = block_dims();
    const float offset = config_.norm_offset();
    const Act* x = resid(l);
    Act* dres = a.dres.data();  // holds d(out); becomes d(res2), then d(x)
    const Act* q = L.qkv.data();
    Act* dq = a.dqkv.data();
    Ctx& c = *ctx_;
    // Column-parallel inputs: each rank holds part of d(input); the sum is the whole gradient.
    auto column_parallel_done = [&](Act* dinp) {
      if (tp > 1) reduce_tp(dinp, NC);
    };
    // Activation gradients whose first writer is a GEMM are overwritten by it (beta = 0,
    // overwrite_dinp) instead of being zeroed and accumulated into; the rest are zeroed.
    if (config_.arch == Arch::kGpt2) {
      // MLP branch: out = res2 + fcproj(gelu(fc(ln2(res2)))). dfc = (dres · Wfcproj) ⊙ GELU'(fc)
      // in one GEMM (dact is scratch, used only where the backend cannot fuse).
      if (const LoraTensors& proj = w.adapter(LoraTarget::kProj); proj.present()) {
        // The adapter's part of d(act) joins before the GELU's derivative: unfused.
        B::linear_backward(c, a.dact.data(), g(*w.fcprojw), g(*w.fcprojb), dres, L.act.data(),
                           p(*w.fcprojw), N, F, C, true, /*overwrite_dinp=*/true);
        lora_backward(proj, L.act.data(), F, a.dact.data(), dres, C, 0, C, true);
        B::zero(c, a.dfc.data(), NF);
        B::gelu_backward(c, a.dfc.data(), L.fc.data(), a.dact.data(), NF);
      } else {
        B::linear_dgelu_backward(c, a.dfc.data(), a.dact.data(), g(*w.fcprojw), g(*w.fcprojb), dres,
                                 L.act.data(), L.fc.data(), p(*w.fcprojw), N, F, C, true);
      }
      B::linear_backward(c, a.dln.data(), g(*w.fcw), g(*w.fcb), a.dfc.data(), L.ln2.data(),
                         p(*w.fcw), N, C, F, true, /*overwrite_dinp=*/true);
      lora_backward(w.adapter(LoraTarget::kFc), L.ln2.data(), C, a.dln.data(), a.dfc.data(), F, 0,
                    F, false);
      column_parallel_done(a.dln.data());
      B::layernorm_backward(c, dres, g(*w.ln2w), g(*w.ln2b), a.dln.data(), L.res2.data(),
                            p(*w.ln2w), L.ln2_mean.data(), L.ln2_rstd.data(), N, C);
      // Attention branch: res2 = x + proj(attn(qkv(ln1(x))))
      B::linear_backward(c, a.datty.data(), g(*w.projw), g(*w.projb), dres, L.atty.data(),
                         p(*w.projw), N, Cl, C, true, /*overwrite_dinp=*/true);
      lora_backward(w.adapter(LoraTarget::kO), L.atty.data(), Cl, a.datty.data(), dres, C, 0, C,
                    true);
      B::zero(c, a.dqkv.data(), NW);
      B::attention_backward(c, dq, dq + Cl, dq + Cl + KVl, a.datt.data(), a.datty.data(),
                            L.atty.data(), L.att.data(), q, q + Cl, q + Cl + KVl, W, B_n_, T_n_, H,
                            Hkv, hd, attention_params(causal_attention(hd)));
      B::linear_backward(c, a.dln.data(), g(*w.qkvw), g(*w.qkvb), dq, L.ln1.data(), p(*w.qkvw), N,
                         C, W, true, /*overwrite_dinp=*/true);
      lora_backward(w.adapter(LoraTarget::kQkv), L.ln1.data(), C, a.dln.data(), dq, W, 0, W, false);
      // The key bias shifts every score of a query row by the same amount, which softmax
      // ignores: its gradient is exactly zero. Computed, it is rounding noise that Adam's
      // normalisation would turn into real steps that differ with any change of summation
      // order (strategies, thread counts), so it is kept at its exact value.
      if (float* dqkvb = g(*w.qkvb); dqkvb != nullptr)
        B::zero(c, dqkvb + Cl, static_cast<std::size_t>(Cl));
      column_parallel_done(a.dln.data());
      B::layernorm_backward(c, dres, g(*w.ln1w), g(*w.ln1b), a.dln.data(), x, p(*w.ln1w),
                            L.ln1_mean.data(), L.ln1_rstd.data(), N, C);
    } else {
      // Gemma 2's post-norms: a branch's output gradient goes through its norm first.
      const bool post = config_.post_norms;
      auto through_post_norm = [&](const ParamTensor* nw, const Act* branch_out,
                                   const float* rstd) -> const Act* {
        if (!post) return dres;
        B::zero(c, a.dpost.data(), NC);
        B::rmsnorm_backward(c, a.dpost.data(), g(*nw), dres, branch_out, p(*nw), rstd, N, C,
                            offset);
        return a.dpost.data();
      };
      const Act* dmlp = through_post_norm(w.post_mlpw, L.mlp_out.data(), L.mlp_out_rstd.data());
      B::linear_backward(c, a.dact.data(), g(*w.downw), gb(w.downb), dmlp, L.act.data(),
                         p(*w.downw), N, F, C, false, /*overwrite_dinp=*/true);
      lora_backward(w.adapter(LoraTarget::kDown), L.act.data(), F, a.dact.data(), dmlp, C, 0, C,
                    true);
      B::zero(c, a.dfc.data(), NF);  // swiglu_backward accumulates
      B::zero(c, a.dup.data(), NF);
      gated_backward(a.dfc.data(), a.dup.data(), a.dact.data(), L.fc.data(), L.up.data(), NF);
      B::linear_backward(c, a.dln.data(), g(*w.gatew), gb(w.gateb), a.dfc.data(), L.ln2.data(),
                         p(*w.gatew), N, C, F, false, /*overwrite_dinp=*/true);
      B::linear_backward(c, a.dln.data(), g(*w.upw), gb(w.upb), a.dup.data(), L.ln2.data(),
                         p(*w.upw), N, C, F, false);
      lora_backward(w.adapter(LoraTarget::kGate), L.ln2.data(), C, a.dln.data(), a.dfc.data(), F, 0,
                    F, false);
      lora_backward(w.adapter(LoraTarget::kUp), L.ln2.data(), C, a.dln.data(), a.dup.data(), F, 0,
                    F, false);
      column_parallel_done(a.dln.data());
      B::rmsnorm_backward(c, dres, g(*w.ln2w), a.dln.data(), L.res2.data(), p(*w.ln2w),
                          L.ln2_rstd.data(), N, C, offset);
      const Act* dattn = through_post_norm(w.post_attnw, L.attn_out.data(), L.attn_out_rstd.data());
      B::linear_backward(c, a.datty.data(), g(*w.projw), gb(w.projb), dattn, L.atty.data(),
                         p(*w.projw), N, Cl, C, false, /*overwrite_dinp=*/true);
      lora_backward(w.adapter(LoraTarget::kO), L.atty.data(), Cl, a.datty.data(), dattn, C, 0, C,
                    true);
      B::zero(c, a.dqkv.data(), NW);
      // Grouped-query attention: a key/value head's gradient sums over its group's query heads.
      B::attention_backward(c, dq, dq + Cl, dq + Cl + KVl, a.datt.data(), a.datty.data(),
                            L.atty.data(), L.att.data(), q, q + Cl, q + Cl + KVl, W, B_n_, T_n_, H,
                            Hkv, hd, attention_params(config_.attention(l)));
      // Rotary is linear: gradients w.r.t. the pre-rotary q and k need only the incoming
      // gradient. v has no rotary, so its part of each row is copied.
      B::zero(c, a.dqkv_pre.data(), NW);
      const RotaryParams rot = config_.rotary();
      B::rotary_backward(c, a.dqkv_pre.data(), dq, B_n_, T_n_, H, hd, W, rot, positions());
      B::rotary_backward(c, a.dqkv_pre.data() + Cl, dq + Cl, B_n_, T_n_, Hkv, hd, W, rot,
                         positions());
      const std::size_t pitch = static_cast<std::size_t>(W);
      B::copy_rows(c, a.dqkv_pre.data() + Cl + KVl, pitch, dq + Cl + KVl, pitch,
                   static_cast<std::size_t>(KVl), static_cast<std::size_t>(N));
      // With q/k/v biases (Qwen2) the key bias is rotated with each position: unlike GPT-2's,
      // its gradient is not zero.
      B::linear_backward(c, a.dln.data(), g(*w.qkvw), gb(w.qkvb), a.dqkv_pre.data(), L.ln1.data(),
                         p(*w.qkvw), N, C, W, false, /*overwrite_dinp=*/true);
      const Act* dpre = a.dqkv_pre.data();
      lora_backward(w.adapter(LoraTarget::kQ), L.ln1.data(), C, a.dln.data(), dpre, W, 0, Cl,
                    false);
      lora_backward(w.adapter(LoraTarget::kK), L.ln1.data(), C, a.dln.data(), dpre, W, Cl, KVl,
                    false);
      lora_backward(w.adapter(LoraTarget::kV), L.ln1.data(), C, a.dln.data(), dpre, W, Cl + KVl,
                    KVl, false);
      column_parallel_done(a.dln.data());
      B::rmsnorm_backward(c, dres, g(*w.ln1w), a.dln.data(), x, p(*w.ln1w), L.ln1_rstd.data(), N, C,
                          offset);
    }
  }

  void embed_backward() override {
    require_reserved();
    const OuterTensors o = layout_.outer();
    float* dwpe = o.position_embedding != nullptr ? g(*o.position_embedding) : nullptr;
    if (g(*o.token_embedding) == nullptr && dwpe == nullptr) return;  // frozen (LoRA)
    B::embedding_backward(*ctx_, g(*o.token_embedding), dwpe, acts_->dres.data(),
                          cur().tokens.data(), B_n_, T_n_, config_.d_model, config_.padding_idx,
                          config_.embedding_scale(), positions());
  }

 private:
  using Acts = TransformerActivations<B>;

  Weight* owned_weights() {
    if constexpr (kSeparateWeights)
      return weights_.data();
    else
      return master_.data();
  }
  void require_owned(const char* what) const {
    if (options_.storage != ParamStorage::kOwned)
      throw Error(
          fmt::format("{} needs owned parameter storage (this model borrows its groups)", what));
  }
  void require_reserved() const {
    if (!acts_) throw Error("model pass before reserve(): no activations allocated");
  }
  typename Acts::Slot& cur() { return acts_->slots[static_cast<std::size_t>(slot_)]; }
  // Packed records: the current slot's positions and segment ends (set_segments), or null.
  const std::int32_t* positions() const { return segments_[static_cast<std::size_t>(slot_)]; }
  const std::int32_t* segment_ends() const {
    const std::int32_t* s = positions();
    return s != nullptr ? s + static_cast<std::size_t>(B_n_) * T_n_ : nullptr;
  }
  // A layer's attention with the slot's record bounds.
  AttentionParams attention_params(AttentionParams params) const {
    params.positions = positions();
    params.segment_end = segment_ends();
    return params;
  }
  const typename Acts::Slot& cur() const {
    if (!acts_) throw Error("model pass before reserve(): no activations allocated");
    return acts_->slots[static_cast<std::size_t>(slot_)];
  }
  typename Acts::Layer& layer_acts(int l) {
    if (options_.recompute) return acts_->shared;
    return cur().layers[static_cast<std::size_t>(l - first_)];
  }
  Act* resid(int l) { return cur().resid[static_cast<std::size_t>(l - first_)].data(); }

  const Weight* p(const ParamTensor& t) const {
    if (t.trainable)
      if (const Weight* trained = group_trained_[static_cast<std::size_t>(t.layer + 1)])
        return trained + (t.offset - layout_.trainable_begin(t.layer));
    const Weight* base = group_weights_[static_cast<std::size_t>(t.layer + 1)];
    if (base == nullptr)
      throw Error(fmt::format("parameters of {} (group {}) are not bound", t.name, t.layer));
    return base + (t.offset - layout_.group_begin(t.layer));
  }
  // The llama MLP's gate: SwiGLU, or Gemma's GeGLU.
  void gated_forward(Act* out, const Act* gate, const Act* up, std::size_t n) {
    if (config_.mlp_activation == GatedActivation::kGeluTanh)
      B::geglu_forward(*ctx_, out, gate, up, n);
    else
      B::swiglu_forward(*ctx_, out, gate, up, n);
  }
  void gated_backward(Act* dgate, Act* dup, const Act* dout, const Act* gate, const Act* up,
                      std::size_t n) {
    if (config_.mlp_activation == GatedActivation::kGeluTanh)
      B::geglu_backward(*ctx_, dgate, dup, dout, gate, up, n);
    else
      B::swiglu_backward(*ctx_, dgate, dup, dout, gate, up, n);
  }
  // An optional tensor's weights or gradients (nullptr when the model lacks it).
  const Weight* pb(const ParamTensor* t) const { return t != nullptr ? p(*t) : nullptr; }
  float* gb(const ParamTensor* t) { return t != nullptr ? g(*t) : nullptr; }
  // A tensor's gradient in its group's gradient storage; null for a frozen tensor, whose
  // weight-gradient GEMM the ops then skip.
  float* g(const ParamTensor& t) {
    if (!t.trainable) return nullptr;
    float* base = group_grads_[static_cast<std::size_t>(t.layer + 1)];
    if (base == nullptr)
      throw Error(fmt::format("gradients of {} (group {}) are not bound", t.name, t.layer));
    return base + (t.grad_offset - layout_.grad_group_begin(t.layer));
  }
  void reduce_tp(Act* data, std::size_t n) {
    if (!tp_allreduce_)
      throw Error("tensor-parallel model without an allreduce (set_tp_allreduce not called)");
    tp_allreduce_(data, n);
  }

  // ---- LoRA (model/lora.hpp): an adapter adds scale · B (A x) to its linear's output columns
  // [col, col + out) (rows of pitch ldy). x is the linear's input on this rank (in wide).
  // Row-parallel linears see part of the input: A x is summed over the tensor-parallel group,
  // and the adapter's output, whole on every rank, is added after the base's reduction.
  const Act* adapter_input(const LoraTensors& ad, const Act* x, int in, bool row_parallel) {
    const int N = B_n_ * T_n_, r = config_.lora.rank;
    Act* u = acts_->lora_u.data();
    B::linear_forward(*ctx_, u, x, p(*ad.a), nullptr, N, in, r, false);
    if (row_parallel && options_.shard.tp_size > 1)
      reduce_tp(u, static_cast<std::size_t>(N) * static_cast<std::size_t>(r));
    return u;
  }
  void lora_forward(const LoraTensors& ad, const Act* x, int in, Act* y, int ldy, int col, int out,
                    bool row_parallel) {
    if (!ad.present()) return;
    const int N = B_n_ * T_n_, r = config_.lora.rank;
    const Act* u = adapter_input(ad, x, in, row_parallel);
    Act* v = acts_->lora_v.data();
    B::linear_forward(*ctx_, v, u, p(*ad.b), nullptr, N, r, out, false);
    const auto n = static_cast<std::size_t>(out);
    B::scaled_add_rows(*ctx_, y + col, static_cast<std::size_t>(ldy), v, n, n,
                       static_cast<std::size_t>(N), config_.lora.scale());
  }
  // The backward of lora_forward: B's and A's gradients from dy's columns, and the adapter's
  // part of dx added (for a column-parallel linear, to this rank's partial sum, which is
  // reduced with the base's). A x is recomputed rather than kept per layer.
  void lora_backward(const LoraTensors& ad, const Act* x, int in, Act* dx, const Act* dy, int ldy,
                     int col, int out, bool row_parallel) {
    if (!ad.present()) return;
    Ctx& c = *ctx_;
    const int N = B_n_ * T_n_, r = config_.lora.rank;
    const auto n = static_cast<std::size_t>(out), rows = static_cast<std::size_t>(N);
    const Act* u = adapter_input(ad, x, in, row_parallel);
    Act* dv = acts_->lora_v.data();
    Act* du = acts_->lora_du.data();
    B::zero(c, dv, rows * n);
    B::scaled_add_rows(c, dv, n, dy + col, static_cast<std::size_t>(ldy), n, rows,
                       config_.lora.scale());
    B::linear_backward(c, du, g(*ad.b), nullptr, dv, u, p(*ad.b), N, r, out, false,
                       /*overwrite_dinp=*/true);
    if (!row_parallel && options_.shard.tp_size > 1) {
      // du sums over this rank's outputs only: its share of dx joins the partial sum, and A's
      // gradient needs the whole of it.
      B::linear_backward(c, dx, nullptr, nullptr, du, x, p(*ad.a), N, in, r, false);
      reduce_tp(du, rows * static_cast<std::size_t>(r));
      B::linear_backward(c, nullptr, g(*ad.a), nullptr, du, x, p(*ad.a), N, in, r, false);
    } else {
      B::linear_backward(c, dx, g(*ad.a), nullptr, du, x, p(*ad.a), N, in, r, false);
    }
  }

  // One block's widths on this rank: N rows of the micro-batch, the model width C, the local
  // widths of q and the attention output (Cl) and of the MLP (F), the local query and key/value
  // heads and a head's width; a row of qkv holds the local query heads (Cl), then key and value
  // heads (KVl each), W in all; and the element counts of [N, C], [N, F] and [N, W] buffers.
  struct BlockDims {
    int N, C, Cl, F, H, Hkv, hd, KVl, W;
    std::size_t NC, NF, NW;
  };
  BlockDims block_dims() const {
    const int tp = options_.shard.tp_size;
    BlockDims d{};
    d.N = B_n_ * T_n_;
    d.C = config_.d_model;
    d.Cl = config_.q_dim() / tp;
    d.F = config_.ffn_dim() / tp;
    d.H = config_.n_head / tp;
    d.Hkv = config_.kv_heads() / tp;
    d.hd = config_.head_dim();
    d.KVl = d.Hkv * d.hd;
    d.W = d.Cl + 2 * d.KVl;
    const auto rows = static_cast<std::size_t>(d.N);
    d.NC = rows * static_cast<std::size_t>(d.C);
    d.NF = rows * static_cast<std::size_t>(d.F);
    d.NW = rows * static_cast<std::size_t>(d.W);
    return d;
  }

  void block_forward_into(int l, Act* out) {
    auto& L = layer_acts(l);
    const BlockTensors w = layout_.block(l);
    const int tp = options_.shard.tp_size;
    const auto [N, C, Cl, F, H, Hkv, hd, KVl, W, NC, NF, NW] = block_dims();
    const float eps = config_.norm_eps, offset = config_.norm_offset();
    const Act* x = resid(l);
    Act* q = L.qkv.data();
    Ctx& c = *ctx_;
    // Row-parallel projections: partial sums on each rank, reduced, then the (replicated)
    // bias.
    auto row_parallel_done = [&](Act* y, const Weight* bias) {
      if (tp == 1) return;
      reduce_tp(y, NC);
      if (bias != nullptr) B::add_bias(c, y, bias, N, C);
    };
    if (config_.arch == Arch::kGpt2) {
      B::layernorm_forward(c, L.ln1.data(), L.ln1_mean.data(), L.ln1_rstd.data(), x, p(*w.ln1w),
                           p(*w.ln1b), N, C, eps);
      B::linear_forward(c, q, L.ln1.data(), p(*w.qkvw), p(*w.qkvb), N, C, W, true);
      lora_forward(w.adapter(LoraTarget::kQkv), L.ln1.data(), C, q, W, 0, W, false);
      B::attention_forward(c, L.atty.data(), L.att.data(), q, q + Cl, q + Cl + KVl, W, B_n_, T_n_,
                           H, Hkv, hd, attention_params(causal_attention(hd)));
      // res2 = x + proj(atty): the projection lands in res2, then x is added.
      B::linear_forward(c, L.res2.data(), L.atty.data(), p(*w.projw),
                        tp == 1 ? p(*w.projb) : nullptr, N, Cl, C, true);
      row_parallel_done(L.res2.data(), p(*w.projb));
      lora_forward(w.adapter(LoraTarget::kO), L.atty.data(), Cl, L.res2.data(), C, 0, C, true);
      // res2 += x, then ln2 = layernorm(res2): one pass on CUDA.
      B::residual_layernorm_forward(c, L.res2.data(), L.ln2.data(), L.ln2_mean.data(),
                                    L.ln2_rstd.data(), L.res2.data(), x, p(*w.ln2w), p(*w.ln2b), N,
                                    C, eps);
      // act = GELU(fc), fc = ln2 · Wfc + bfc kept for backward: one GEMM with its epilogue.
      // An adapter on c_fc adds to fc before the GELU: the GEMM and the GELU then run apart.
      if (const LoraTensors& fc = w.adapter(LoraTarget::kFc); fc.present()) {
        B::linear_forward(c, L.fc.data(), L.ln2.data(), p(*w.fcw), p(*w.fcb), N, C, F, true);
        lora_forward(fc, L.ln2.data(), C, L.fc.data(), F, 0, F, false);
        B::gelu_forward(c, L.act.data(), L.fc.data(), NF);
      } else {
        B::linear_gelu_forward(c, L.act.data(), L.fc.data(), L.ln2.data(), p(*w.fcw), p(*w.fcb), N,
                               C, F, true);
      }
      B::linear_forward(c, out, L.act.data(), p(*w.fcprojw), tp == 1 ? p(*w.fcprojb) : nullptr, N,
                        F, C, true);
      row_parallel_done(out, p(*w.fcprojb));
      lora_forward(w.adapter(LoraTarget::kProj), L.act.data(), F, out, C, 0, C, true);
    } else {
      B::rmsnorm_forward(c, L.ln1.data(), L.ln1_rstd.data(), x, p(*w.ln1w), N, C, eps, offset);
      B::linear_forward(c, q, L.ln1.data(), p(*w.qkvw), pb(w.qkvb), N, C, W, false);
      lora_forward(w.adapter(LoraTarget::kQ), L.ln1.data(), C, q, W, 0, Cl, false);
      lora_forward(w.adapter(LoraTarget::kK), L.ln1.data(), C, q, W, Cl, KVl, false);
      lora_forward(w.adapter(LoraTarget::kV), L.ln1.data(), C, q, W, Cl + KVl, KVl, false);
      const RotaryParams rot = config_.rotary();
      B::rotary_forward(c, q, q, B_n_, T_n_, H, hd, W, rot, positions());
      B::rotary_forward(c, q + Cl, q + Cl, B_n_, T_n_, Hkv, hd, W, rot, positions());
      B::attention_forward(c, L.atty.data(), L.att.data(), q, q + Cl, q + Cl + KVl, W, B_n_, T_n_,
                           H, Hkv, hd, attention_params(config_.attention(l)));
      // Gemma 2's post-norms: a branch's output is kept and normed into where it was headed.
      const bool post = config_.post_norms;
      Act* attn_out = post ? L.attn_out.data() : L.res2.data();
      B::linear_forward(c, attn_out, L.atty.data(), p(*w.projw), tp == 1 ? pb(w.projb) : nullptr, N,
                        Cl, C, false);
      row_parallel_done(attn_out, pb(w.projb));
      lora_forward(w.adapter(LoraTarget::kO), L.atty.data(), Cl, attn_out, C, 0, C, true);
      if (post)
        B::rmsnorm_forward(c, L.res2.data(), L.attn_out_rstd.data(), attn_out, p(*w.post_attnw), N,
                           C, eps, offset);
      B::residual_rmsnorm_forward(c, L.res2.data(), L.ln2.data(), L.ln2_rstd.data(), L.res2.data(),
                                  x, p(*w.ln2w), N, C, eps, offset);
      B::linear_forward(c, L.fc.data(), L.ln2.data(), p(*w.gatew), pb(w.gateb), N, C, F, false);
      lora_forward(w.adapter(LoraTarget::kGate), L.ln2.data(), C, L.fc.data(), F, 0, F, false);
      B::linear_forward(c, L.up.data(), L.ln2.data(), p(*w.upw), pb(w.upb), N, C, F, false);
      lora_forward(w.adapter(LoraTarget::kUp), L.ln2.data(), C, L.up.data(), F, 0, F, false);
      gated_forward(L.act.data(), L.fc.data(), L.up.data(), NF);
      Act* mlp_out = post ? L.mlp_out.data() : out;
      B::linear_forward(c, mlp_out, L.act.data(), p(*w.downw), tp == 1 ? pb(w.downb) : nullptr, N,
                        F, C, false);
      row_parallel_done(mlp_out, pb(w.downb));
      lora_forward(w.adapter(LoraTarget::kDown), L.act.data(), F, mlp_out, C, 0, C, true);
      if (post)
        B::rmsnorm_forward(c, out, L.mlp_out_rstd.data(), mlp_out, p(*w.post_mlpw), N, C, eps,
                           offset);
    }
    B::residual_forward(c, out, out, L.res2.data(), NC);
  }

  ModelConfig config_;
  ModelOptions options_;
  const BackendTraits& traits_;
  ParameterLayout layout_;
  Ctx* ctx_;
  MemoryPool* pool_;
  int first_ = 0, end_ = 0;
  Buffer<float> master_;
  Buffer<Weight> weights_;  // separate kernel copy only (kSeparateWeights)
  Buffer<float> grads_;
  std::vector<const Weight*> group_weights_;  // per group g at [g + 1]
  std::vector<const Weight*> group_trained_;  // its trained tensors apart (bind_group_trained)
  std::vector<float*> group_grads_;
  std::function<void(void*, std::size_t)> tp_allreduce_;
  std::unique_ptr<Acts> acts_;
  std::vector<const std::int32_t*> segments_;  // per slot: set_segments's, null when not packed
  int slot_ = 0;
  int B_n_ = 0, T_n_ = 0;
};

}  // namespace saturn
