// CUDA kernels, one op per file (runtime/backend/cuda/<op>.cu), mirroring the CPU backend
// (runtime/backend/cpu/ops.hpp) op for op so tests can hold each against it. All pointers are
// device pointers; every op is enqueued on ctx.stream() and returns without waiting.
//
// Precision: activations, weights and activation gradients are bf16; parameter gradients,
// master weights, optimizer moments, norm statistics, softmax statistics and losses are fp32;
// all arithmetic inside a kernel is fp32 (GEMMs accumulate in fp32 through cuBLASLt).
//
// As on the CPU, every backward ACCUMULATES (+=) into its gradient outputs and a null gradient
// pointer means "not needed". No kernel uses floating-point atomics: parameter-gradient sums over
// rows are fixed-order reductions (per-chunk partials summed in chunk order; the token embedding's
// gradient through a sort of the token ids), so every op gives the same bits run to run for the
// same inputs and shapes (tests/gpu/test_gpu_ops.cpp repeats them under shuffled block orders).
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend/attention_params.hpp"
#include "runtime/backend/cuda/context.hpp"
#include "runtime/backend/rotary.hpp"
#include "runtime/core/adamw_step.hpp"

namespace saturn::cuda {

using bf16 = __nv_bfloat16;

// ---- embedding.cu ----------------------------------------------------------------------------
// out[b,t,:] = wte[tokens[b,t],:] (+ wpe[p,:] when wpe != nullptr; p = t, or positions[b·T + t]
// with packed records). Token ids must be in range (the model checks them on the host before
// uploading). positions: device memory.
void embedding_forward(Context& ctx, bf16* out, const std::int32_t* tokens, const bf16* wte,
                       const bf16* wpe, int B, int T, int C, float scale = 1.0f,
                       const std::int32_t* positions = nullptr);
// As cpu::embedding_backward (padding_idx >= 0: that row gets no gradient; positions as there).
void embedding_backward(Context& ctx, float* dwte, float* dwpe, const bf16* dout,
                        const std::int32_t* tokens, int B, int T, int C, int padding_idx = -1,
                        float scale = 1.0f, const std::int32_t* positions = nullptr);

// ---- layernorm.cu ----------------------------------------------------------------------------
void layernorm_forward(Context& ctx, bf16* out, float* mean, float* rstd, const bf16* inp,
                       const bf16* weight, const bf16* bias, int N, int C, float eps);
// res[N, C] = a + b (as residual_forward; res may alias a or b), then out = layernorm(res) (as
// layernorm_forward of res): one kernel, the same bits, and res is not read back from memory.
void residual_layernorm_forward(Context& ctx, bf16* res, bf16* out, float* mean, float* rstd,
                                const bf16* a, const bf16* b, const bf16* weight, const bf16* bias,
                                int N, int C, float eps);
void layernorm_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                        const bf16* inp, const bf16* weight, const float* mean, const float* rstd,
                        int N, int C);

// ---- rmsnorm.cu ------------------------------------------------------------------------------
// As cpu::rmsnorm_forward: (offset + weight) * (x * rstd), offset 1 for Gemma.
void rmsnorm_forward(Context& ctx, bf16* out, float* rstd, const bf16* inp, const bf16* weight,
                     int N, int C, float eps, float offset = 0.0f);
// res = a + b, then out = rmsnorm(res), fused as residual_layernorm_forward.
void residual_rmsnorm_forward(Context& ctx, bf16* res, bf16* out, float* rstd, const bf16* a,
                              const bf16* b, const bf16* weight, int N, int C, float eps,
                              float offset = 0.0f);
void rmsnorm_backward(Context& ctx, bf16* dinp, float* dweight, const bf16* dout, const bf16* inp,
                      const bf16* weight, const float* rstd, int N, int C, float offset = 0.0f);

// ---- linear.cpp (cuBLASLt) -------------------------------------------------------------------
enum class WeightLayout {
  kOutIn,  // torch.nn.Linear: W is [OC, C], out = inp · Wᵀ
  kInOut,  // GPT-2 Conv1D: W is [C, OC], out = inp · W
};
// How a backward writes an activation gradient: add into it (the general contract), or
// overwrite it (beta = 0), which spares the zeroing of a buffer that this call writes first.
enum class GradWrite { kAccumulate, kOverwrite };
// out[N,OC] = inp[N,C] · W + bias (bias through the GEMM's epilogue).
void linear_forward(Context& ctx, bf16* out, const bf16* inp, const bf16* weight, const bf16* bias,
                    int N, int C, int OC, WeightLayout layout);
// dinp[N,C] += dout · W (or = with GradWrite::kOverwrite); dweight (fp32) += the weight gradient;
// dbias (fp32) += column sums of dout (with a weight gradient: the weight-gradient GEMM's
// BGRADA/BGRADB epilogue into scratch, then added; alone: a column-sum kernel).
void linear_backward(Context& ctx, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC, WeightLayout layout,
                     GradWrite dinp_write = GradWrite::kAccumulate);
// The MLP's first linear and its activation in one GEMM (cuBLASLt's GELU_AUX_BIAS epilogue):
// pre[N,OC] = inp · W + bias (kept for backward) and out = GELU(pre), tanh approximation,
// applied to the fp32 sum before rounding (gelu_forward rounds pre to bf16 first). When OC is
// not a multiple of 8 (cuBLASLt's rule for the aux buffer's leading dimension) it runs as
// linear_forward + gelu_forward.
void linear_gelu_forward(Context& ctx, bf16* out, bf16* pre, const bf16* inp, const bf16* weight,
                         const bf16* bias, int N, int C, int OC, WeightLayout layout);
// Backward of out = linear(GELU(pre)) with inp = GELU(pre): dpre[N,C] = (dout · W) ⊙ GELU'(pre),
// OVERWRITTEN (the DGELU epilogue; dpre's old contents are not read), dweight and dbias +=
// as in linear_backward. dact_scratch ([N,C] bf16) is used only when C is not a multiple of
// 8 (then: linear_backward into it, gelu_backward into dpre zeroed first).
void linear_dgelu_backward(Context& ctx, bf16* dpre, bf16* dact_scratch, float* dweight,
                           float* dbias, const bf16* dout, const bf16* inp, const bf16* pre,
                           const bf16* weight, int N, int C, int OC, WeightLayout layout);

// ---- rotary.cu -------------------------------------------------------------------------------
// As cpu::rotary_forward (Hugging Face rotate_half convention; out and inp may alias).
// positions: as there, in device memory (null: token [b,t] at position t).
void rotary_forward(Context& ctx, bf16* out, const bf16* inp, int B, int T, int H, int hd,
                    int stride, const RotaryParams& rot, const std::int32_t* positions = nullptr);
// dinp += rotation by -angle of dout (dinp and dout must not alias).
void rotary_backward(Context& ctx, bf16* dinp, const bf16* dout, int B, int T, int H, int hd,
                     int stride, const RotaryParams& rot, const std::int32_t* positions = nullptr);

// ---- attention.cu ----------------------------------------------------------------------------
// Causal multi-head attention, flash-style: no [T, T] matrix is ever stored. q, k, v are rows of
// `stride` elements as in cpu::attention_forward; out is [B, T, H*hd]; lse [B, H, T] (fp32)
// saves each query row's log-sum-exp of the scaled scores for backward. hd <= 128.
constexpr int kAttentionMaxHeadDim = 128;
// Grouped-query attention as cpu::attention_forward: Hkv key/value heads (dividing H), query
// head h reads kv head h / (H / Hkv).
// params: the scale, soft-capping and sliding window, as cpu::attention_forward's.
void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                       const bf16* v, int stride, int B, int T, int H, int Hkv, int hd,
                       const AttentionParams& params);
// dq, dk, dv (rows of `stride`, may share one packed buffer) += gradients; a kv head's dk, dv
// sum its group's query heads inside one block (deterministic, no atomics). out and lse are
// the forward's; delta_scratch is [B, H, T] fp32 workspace, overwritten.
void attention_backward(Context& ctx, bf16* dq, bf16* dk, bf16* dv, float* delta_scratch,
                        const bf16* dout, const bf16* out, const float* lse, const bf16* q,
                        const bf16* k, const bf16* v, int stride, int B, int T, int H, int Hkv,
                        int hd, const AttentionParams& params);

// ---- gelu.cu ---------------------------------------------------------------------------------
void gelu_forward(Context& ctx, bf16* out, const bf16* inp, std::size_t n);
void gelu_backward(Context& ctx, bf16* dinp, const bf16* inp, const bf16* dout, std::size_t n);

// ---- gated.cu: the llama MLP's gated activations ------------------------------------------
void swiglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n);
void swiglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                     const bf16* up, std::size_t n);
// As cpu::geglu_forward / geglu_backward: gelu_tanh(gate) * up (Gemma).
void geglu_forward(Context& ctx, bf16* out, const bf16* gate, const bf16* up, std::size_t n);
void geglu_backward(Context& ctx, bf16* dgate, bf16* dup, const bf16* dout, const bf16* gate,
                    const bf16* up, std::size_t n);

// ---- residual.cu -----------------------------------------------------------------------------
void residual_forward(Context& ctx, bf16* out, const bf16* a, const bf16* b, std::size_t n);
void residual_backward(Context& ctx, bf16* da, bf16* db, const bf16* dout, std::size_t n);
// out[n, :] += bias for N rows of C (tensor parallelism's row-parallel layers add their bias
// once, after the reduction).
void add_bias(Context& ctx, bf16* out, const bf16* bias, int N, int C);

// ---- lora.cu ---------------------------------------------------------------------------------
// dst[r, c] += scale * src[r, c], rows of `width` with their own pitches (cpu::scaled_add_rows).
void scaled_add_rows(Context& ctx, bf16* dst, std::size_t dst_pitch, const bf16* src,
                     std::size_t src_pitch, std::size_t width, std::size_t rows, float scale);

// ---- crossentropy.cu -------------------------------------------------------------------------
// The classifier's loss, fused with the softmax: losses[N] (fp32) = -log softmax(logits)[target]
// computed in fp32 from the bf16 logits; targets < 0 give loss 0. Targets must be < V. One read
// of the logits (online softmax). When lse is not null it receives each row's log-sum-exp [N]
// (fp32), which lets crossentropy_backward skip its own statistics read.
void crossentropy_forward(Context& ctx, float* losses, const bf16* logits,
                          const std::int32_t* targets, int N, int V, float* lse = nullptr);
// Overwrites the logits with dloss * (softmax - onehot(target)) (zero rows for ignored targets),
// times the soft-cap's derivative 1 - (logit / softcap)^2 when softcap > 0 (the logits being
// softcap_forward's output); losses may be null or receive the loss again. With the forward's
// lse (same logits): one read and one write of the logits; without (lse null): two reads and
// one write.
void crossentropy_backward(Context& ctx, bf16* logits_to_dlogits, float* losses,
                           const std::int32_t* targets, float dloss, int N, int V,
                           const float* lse = nullptr, float softcap = 0.0f);

// ---- softcap.cu ------------------------------------------------------------------------------
// Gemma 2's final logit soft-capping, in place: x = softcap * tanh(x / softcap).
void softcap_forward(Context& ctx, bf16* x, std::size_t n, float softcap);
// *out = the mean of losses[n] over the rows whose target is >= 0 (0 when none), fp64 sums in a
// fixed order; stays on the device.
void loss_mean(Context& ctx, float* out, const float* losses, const std::int32_t* targets, int N);

// ---- adamw.cu --------------------------------------------------------------------------------
using AdamWParams = AdamWStep;  // lr, beta1, beta2, eps, weight_decay, step (1-based)
// As cpu::adamw_update on the fp32 master weights `param`; also writes their bf16 copy
// `param_bf16` (the weights the kernels read) when not null.
void adamw_update(Context& ctx, float* param, bf16* param_bf16, const float* grad, float* m,
                  float* v, std::size_t n, const AdamWParams& p, float grad_scale);

// ---- reduce.cu -------------------------------------------------------------------------------
// Sum of squares (fp64 accumulation, fixed reduction order: the same value every run), for the
// global gradient norm. Waits for the stream.
double sum_of_squares(Context& ctx, const float* x, std::size_t n);
// The exact sum of squares of x (runtime/core/exact_sum.hpp), on the device: the words
// ExactSquareSum::words() would give for x (4 per exponent bin, then the non-finite count), so
// the caller adds them to its own. Each block bins its squares by exponent in 64-bit integers
// (integer sums: the same bits in any order, so shared-memory integer atomics are fine), one
// block then adds the blocks' bins with carries. Waits for the stream (8 KB come back).
std::vector<std::int64_t> exact_square_sum_words(Context& ctx, const float* x, std::size_t n);
// dst[c] += sum over rows of src[n, c] (bias gradients), in a fixed order (detail::row_chunks).
void column_sum_accumulate(Context& ctx, float* dst, const bf16* src, int N, int C);
// dst[c] += the sum, in chunk order, of partial[k * C + c] over k < chunks: the second pass of
// the deterministic column sums (detail::row_chunks in common.cuh).
void add_column_partials(Context& ctx, float* dst, const float* partial, int chunks, int C);
void convert(Context& ctx, bf16* dst, const float* src, std::size_t n);
void convert(Context& ctx, float* dst, const bf16* src, std::size_t n);
// ---- vector.cu: what strategies compute on device buffers -------------------------------------
void add(Context& ctx, float* dst, const float* src, std::size_t n);     // dst += src
void add(Context& ctx, double* dst, const double* src, std::size_t n);   // dst += src
void accumulate(Context& ctx, double* acc, float* g, std::size_t n);     // acc += g; g = 0
void round_into(Context& ctx, float* out, double* acc, std::size_t n);   // out = fp32(acc); acc = 0
void widen(Context& ctx, double* dst, const float* src, std::size_t n);  // dst = src
void add_scaled(Context& ctx, double* acc, const float* x, double weight);  // device scalars

// Fills with one value (tests poison outputs with NaN to catch unwritten elements).
void fill(Context& ctx, bf16* dst, float value, std::size_t n);
void fill(Context& ctx, float* dst, float value, std::size_t n);

}  // namespace saturn::cuda
