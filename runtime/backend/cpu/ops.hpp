// CPU kernels, fp32, one op per file (runtime/backend/cpu/<op>.cpp). Row-major tensors.
// N = B*T rows of C channels. Every backward ACCUMULATES (+=) into its gradient outputs, as
// llm.c does: residual branches and micro-batch gradient accumulation then need no extra adds.
// A null gradient pointer means "not needed" and is skipped. Loops are OpenMP-parallel; GEMMs
// go through OpenBLAS. Results are deterministic for a fixed thread count (no atomics).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/backend/attention_params.hpp"
#include "runtime/backend/rotary.hpp"
#include "runtime/core/adamw_step.hpp"

namespace saturn::cpu {

// ---- threads.cpp -----------------------------------------------------------------------------
// Threads per rank of the kernels' OpenMP loops and of OpenBLAS. Our kernels give the same bits
// for any count; OpenBLAS's threaded GEMMs need not (1 and 3 threads differ), so reproducible
// jobs run their GEMMs on a fixed tile grid (FixedGemmGrid) instead.
int compute_threads();
void set_compute_threads(int threads);

// While one with `on` is alive (process-wide: one job trains at a time per process), the linear
// layers' GEMMs run over a grid of output tiles fixed by the product's shape, each tile one
// single-threaded OpenBLAS call, so their bits do not depend on the thread count. Reproducible
// jobs (reproducible: true) use it; it costs a little speed (docs/strategies.md). Nests; `on`
// false leaves the current mode.
class FixedGemmGrid {
 public:
  explicit FixedGemmGrid(bool on);
  ~FixedGemmGrid();
  FixedGemmGrid(const FixedGemmGrid&) = delete;
  FixedGemmGrid& operator=(const FixedGemmGrid&) = delete;
  static bool active();

 private:
  bool on_;
};

// ---- embedding.cpp ---------------------------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t],:] (+ wpe[p,:] when wpe != nullptr, GPT-2 learned positions:
// p = t, or positions[b·T + t] with packed records).
// scale: every row times it (Gemma's sqrt(d_model); 1 otherwise), applied after the lookup as
// transformers does; the backward scales the gradient likewise.
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, float scale = 1.0f, const int32_t* positions = nullptr);
// dwte += dout at each token's row, except padding_idx's (>= 0: nn.Embedding's padding_idx, a
// row the lookup leaves without gradient), dwpe += dout at each position (with packed records
// a position's rows are summed as a token's are, embedding_gradient.hpp).
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int padding_idx = -1, float scale = 1.0f,
                        const int32_t* positions = nullptr);

// ---- layernorm.cpp ---------------------------------------------------------------------------
// mean[N], rstd[N] are saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, float eps);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

// ---- rmsnorm.cpp -----------------------------------------------------------------------------
// out = (offset + weight) * (x * rstd): offset 0 is LLaMA's RMSNorm, 1 Gemma's (its weights are
// stored as the difference from one).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int N, int C,
                     float eps, float offset = 0.0f);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                      const float* weight, const float* rstd, int N, int C, float offset = 0.0f);

// ---- linear.cpp ------------------------------------------------------------------------------
// out[N,OC] = inp[N,C] · W + bias. Two weight layouts, so parameters keep Hugging Face shapes:
enum class WeightLayout {
  kOutIn,  // torch.nn.Linear (LLaMA): W is [OC, C], out = inp · Wᵀ
  kInOut,  // GPT-2 Conv1D: W is [C, OC], out = inp · W
};
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, WeightLayout layout);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, WeightLayout layout);

// ---- rotary.cpp ------------------------------------------------------------------------------
// Rotary position embedding, Hugging Face LLaMA convention (rotate_half: element i pairs with
// i + hd/2), applied per head to rows of `stride` floats: x[b,t, h*hd + i] for h < H.
// The frequencies are rotary_inv_freq (runtime/backend/rotary.hpp: theta, and the linear or
// llama3 scaling). out and inp may alias. Token [b,t] is at position t, or positions[b·T + t]
// (packed records: its position in its record) when positions is not null.
void rotary_forward(float* out, const float* inp, int B, int T, int H, int hd, int stride,
                    const RotaryParams& rot, const std::int32_t* positions = nullptr);
void rotary_backward(float* dinp, const float* dout, int B, int T, int H, int hd, int stride,
                     const RotaryParams& rot, const std::int32_t* positions = nullptr);

// ---- attention.cpp ---------------------------------------------------------------------------
// Causal multi-head attention with grouped-query attention: H query heads, Hkv key/value heads
// (Hkv divides H; query head h reads kv head h / (H / Hkv); Hkv = H is plain multi-head). q, k,
// v: rows of `stride` floats ([B,T,stride]); query head h is q[b,t, h*hd .. h*hd+hd), kv head g
// is k[b,t, g*hd ..] and v[b,t, g*hd ..] (so a packed [B,T,C + 2·KV] qkv buffer passes q=qkv,
// k=qkv+C, v=qkv+C+KV, stride=C+2·KV). att[B,H,T,T] saves the softmax probabilities (row-max
// subtracted) for backward. out is [B,T,H*hd]. params: the scores' scale, Gemma 2's
// soft-capping, and a sliding window (query t sees keys t - window < j <= t; 0: every j <= t).
void attention_forward(float* out, float* att, const float* q, const float* k, const float* v,
                       int stride, int B, int T, int H, int Hkv, int hd,
                       const AttentionParams& params);
// dq, dk, dv += gradients (null: not wanted); a kv head's dk and dv sum over its group's query
// heads, in head order (deterministic). datt_scratch: [B,H,T,T] workspace, overwritten. params:
// the forward's (products over keys and queries a window excludes are skipped; with a softcap
// the scores are recomputed for its derivative).
void attention_backward(float* dq, float* dk, float* dv, float* datt_scratch, const float* dout,
                        const float* q, const float* k, const float* v, const float* att,
                        int stride, int B, int T, int H, int Hkv, int hd,
                        const AttentionParams& params);

// ---- gelu.cpp --------------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's "gelu_new").
void gelu_forward(float* out, const float* inp, std::size_t n);
void gelu_backward(float* dinp, const float* inp, const float* dout, std::size_t n);

// ---- swiglu.cpp ------------------------------------------------------------------------------
// out = silu(gate) * up, elementwise over n.
void swiglu_forward(float* out, const float* gate, const float* up, std::size_t n);
void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate,
                     const float* up, std::size_t n);

// ---- geglu.cpp -------------------------------------------------------------------------------
// out = gelu_tanh(gate) * up (Gemma's MLP), elementwise; gelu_tanh as gelu_forward computes it.
// The backward accumulates into dgate and dup (null: not wanted).
void geglu_forward(float* out, const float* gate, const float* up, std::size_t n);
void geglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up,
                    std::size_t n);

// ---- residual.cpp ----------------------------------------------------------------------------
void residual_forward(float* out, const float* a, const float* b, std::size_t n);
// da += dout; db += dout
void residual_backward(float* da, float* db, const float* dout, std::size_t n);
// out[n, :] += bias for N rows of C (tensor parallelism's row-parallel layers add their bias
// once, after the reduction).
void add_bias(float* out, const float* bias, int N, int C);

// ---- lora.cpp --------------------------------------------------------------------------------
// dst[r, c] += scale * src[r, c] for `rows` rows of `width`, each matrix with its own row pitch
// (an adapter's output into its columns of the base linear's output).
void scaled_add_rows(float* dst, std::size_t dst_pitch, const float* src, std::size_t src_pitch,
                     std::size_t width, std::size_t rows, float scale);

// ---- crossentropy.cpp ------------------------------------------------------------------------
// Fused softmax + cross-entropy over the vocabulary. probs[N,V] is saved for backward (it may
// alias logits). losses[N] gets -log p(target). Targets < 0 are ignored (loss 0, no gradient).
void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                  const int32_t* targets, int N, int V);
// dlogits += dloss * (probs - onehot(target)); dloss is the weight of each token's loss in
// the objective (1 / tokens in the global batch for a mean).
void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                   float dloss, int N, int V);
// In place: probs becomes dloss * (probs - onehot(target)) (zero rows for ignored targets), so
// the head needs no second [N, V] buffer.
void softmax_crossentropy_backward_inplace(float* probs, const int32_t* targets, float dloss, int N,
                                           int V);
// The same loss keeping the logits: losses[N] and each row's log-sum-exp lse[N], the logits
// unchanged (Gemma 2's capped logits are needed again by the backward).
void crossentropy_lse_forward(float* losses, float* lse, const float* logits,
                              const int32_t* targets, int N, int V);
// In place: logits become dloss * (e^(logits - lse) - onehot(target)), times the soft-cap's
// derivative 1 - (logits / softcap)² when softcap > 0 (the logits being softcap_forward's
// output); zero rows for ignored targets.
void crossentropy_backward_from_lse(float* logits, const float* lse, const int32_t* targets,
                                    float dloss, int N, int V, float softcap);

// ---- softcap.cpp -----------------------------------------------------------------------------
// Gemma 2's final logit soft-capping, in place: x = softcap * tanh(x / softcap), in
// transformers' order of operations.
void softcap_forward(float* x, std::size_t n, float softcap);

// *out = the mean of losses[n] over the rows whose target is >= 0 (0 when there is none),
// summed in fp64 in row order.
void loss_mean(float* out, const float* losses, const int32_t* targets, int N);

// ---- adamw.cpp -------------------------------------------------------------------------------
using AdamWParams = AdamWStep;  // lr, beta1, beta2, eps, weight_decay, step (1-based)
// In place on param/m/v over n elements; grad_scale multiplies grads first (clipping).
void adamw_update(float* param, const float* grad, float* m, float* v, std::size_t n,
                  const AdamWParams& p, float grad_scale);

// ---- reduce.cpp ------------------------------------------------------------------------------
// Sum of squares in double (the global gradient norm is sqrt of the sum over tensors/ranks).
double sum_of_squares(const float* x, std::size_t n);

}  // namespace saturn::cpu
