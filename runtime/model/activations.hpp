// What the model program keeps per micro-batch, in a backend's element types: one definition
// that both allocates (Transformer::reserve) and counts bytes for estimates
// (model_activation_bytes), so the two cannot drift apart. Only the backend's types are used
// here (B::Act, B::AttnSaved, B::attention_saved/scratch), never its ops.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/model.hpp"

namespace saturn {

template <class B>
struct TransformerActivations {
  using Act = typename B::Act;
  using Saved = typename B::AttnSaved;
  // The activations one block saves for its backward pass.
  struct Layer {
    Buffer<Act> ln1;
    Buffer<float> ln1_mean, ln1_rstd;  // gpt2 uses mean; llama only rstd
    Buffer<Act> qkv;                   // [N, (C + 2·KV)/tp] (llama: after rotary)
    Buffer<Saved> att;                 // what attention keeps (B::attention_saved)
    Buffer<Act> atty;                  // [N, C/tp] attention output before projection
    Buffer<Act> res2;                  // [N, C] residual after attention
    Buffer<Act> ln2;
    Buffer<float> ln2_mean, ln2_rstd;
    Buffer<Act> fc;   // gpt2: [N, F/tp] pre-GELU; llama: gate [N, F/tp]
    Buffer<Act> up;   // llama: up [N, F/tp]
    Buffer<Act> act;  // [N, F/tp] GELU(fc) or silu(gate)*up
    // post_norms (Gemma 2): the attention and MLP outputs [N, C] before their norms, and the
    // norms' statistics
    Buffer<Act> attn_out, mlp_out;
    Buffer<float> attn_out_rstd, mlp_out_rstd;
  };
  // One micro-batch in flight.
  struct Slot {
    std::vector<Buffer<Act>> resid;  // streams entering blocks first..end, [N, C]
    std::vector<Layer> layers;       // blocks first..end-1 (empty with recomputation)
    Buffer<std::int32_t> tokens, targets;
    Buffer<Act> lnf;
    Buffer<float> lnf_mean, lnf_rstd;
    Buffer<Act> logits;    // [N, V]; after head_forward: whatever the loss kernel left there
    Buffer<float> losses;  // [N]
    Buffer<float> lse;     // [N] each logits row's log-sum-exp, for the backward (CUDA)
    Buffer<float> loss;    // [1] mean over the counted targets
  };
  std::vector<Slot> slots;
  Layer shared;               // recomputation: one block's activations, rebuilt per block
  Buffer<Act> recompute_out;  // recomputation writes the block output here, not the stream
  // backward scratch, shared by blocks and slots
  Buffer<Act> dres, dln, datty, dqkv, dqkv_pre, dfc, dup, dact;
  Buffer<Act> dpost;  // post_norms: the gradient of a branch's output before its norm
  // LoRA scratch, forward and backward: an adapter's A x [N, rank] (recomputed in the backward
  // instead of kept per layer), its gradient, and its output or output gradient [N, out].
  Buffer<Act> lora_u, lora_du, lora_v;

  Buffer<Saved> datt;  // attention's backward scratch (B::attention_scratch)
};

// Allocates (or counts, depending on `alloc`) the activations of blocks [first, end) and of the
// embedding/head the shard runs, for micro-batches of B x T tokens, `slots` in flight. alloc is
// called as alloc(buffer, count, tag).
template <class B, typename Alloc>
void build_activations(TransformerActivations<B>& a, const ModelConfig& c, const ModelOptions& o,
                       int first, int end, int Bsz, int T, int slots, Alloc&& alloc) {
  const int tp = o.shard.tp_size;
  const std::size_t N = static_cast<std::size_t>(Bsz) * T, C = c.d_model,
                    Cl = static_cast<std::size_t>(c.q_dim() / tp),
                    F = static_cast<std::size_t>(c.ffn_dim() / tp), V = c.vocab_size,
                    H = static_cast<std::size_t>(c.n_head / tp),
                    W = Cl + 2 * static_cast<std::size_t>(c.kv_dim() / tp);  // a row of q|k|v
  const std::size_t saved =
      B::attention_saved(static_cast<std::size_t>(Bsz), H, static_cast<std::size_t>(T));
  const std::size_t scratch =
      B::attention_scratch(static_cast<std::size_t>(Bsz), H, static_cast<std::size_t>(T));
  const bool gpt2 = c.arch == Arch::kGpt2;
  const bool blocks = end > first;
  const char* tag = "activations";
  using Layer = typename TransformerActivations<B>::Layer;
  auto layer = [&](Layer& L) {
    alloc(L.ln1, N * C, tag);
    if (gpt2) alloc(L.ln1_mean, N, tag);
    alloc(L.ln1_rstd, N, tag);
    alloc(L.qkv, N * W, tag);
    alloc(L.att, saved, tag);
    alloc(L.atty, N * Cl, tag);
    alloc(L.res2, N * C, tag);
    alloc(L.ln2, N * C, tag);
    if (gpt2) alloc(L.ln2_mean, N, tag);
    alloc(L.ln2_rstd, N, tag);
    alloc(L.fc, N * F, tag);
    if (!gpt2) alloc(L.up, N * F, tag);
    alloc(L.act, N * F, tag);
    if (c.post_norms) {
      alloc(L.attn_out, N * C, tag);
      alloc(L.attn_out_rstd, N, tag);
      alloc(L.mlp_out, N * C, tag);
      alloc(L.mlp_out_rstd, N, tag);
    }
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
      alloc(s.lse, N, tag);
      alloc(s.loss, 1, tag);
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
    alloc(a.dqkv, N * W, stag);
    alloc(a.datt, scratch, stag);
    alloc(a.dfc, N * F, stag);
    if (!gpt2) alloc(a.dup, N * F, stag);
    if (!gpt2) alloc(a.dqkv_pre, N * W, stag);
    alloc(a.dact, N * F, stag);
    if (c.post_norms) alloc(a.dpost, N * C, stag);
  }
  if (blocks && c.lora.enabled()) {
    const auto r = static_cast<std::size_t>(c.lora.rank);
    alloc(a.lora_u, N * r, stag);
    alloc(a.lora_du, N * r, stag);
    alloc(a.lora_v, N * std::max({W, C, F}), stag);
  }
}

// Bytes build_activations allocates for backend B (as its pool counts them, each buffer at its
// allocator footprint), counted without allocating; at most 2^60 (more than any device holds),
// so sums of a few estimates cannot wrap.
template <class B>
std::size_t count_activation_bytes(const ModelConfig& c, const ModelOptions& o, int Bsz, int T,
                                   int slots) {
  static constexpr std::size_t kCap = std::size_t{1} << 60;
  const int end = o.shard.end_layer < 0 ? c.n_layer : o.shard.end_layer;
  const BackendTraits& traits = backend_traits(B::kKind);
  const auto bytes = [&](int s) {
    TransformerActivations<B> a;
    std::size_t total = 0;
    build_activations<B>(a, c, o, o.shard.first_layer, end, Bsz, T, s,
                         [&](auto& buf, std::size_t n, const char*) {
                           const std::size_t elem = sizeof(*buf.data());
                           const std::size_t raw = n > kCap / elem ? kCap : n * elem;
                           total = std::min(kCap, total + std::min(kCap, traits.footprint(raw)));
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

}  // namespace saturn
