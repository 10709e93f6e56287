// The CUDA backend as the model program (runtime/model/transformer.hpp) sees it: the element
// types of types.hpp and one static function per op, forwarding to the kernels of ops.hpp on
// the context's stream. The model stores bf16 as saturn::BFloat16 (the same bits and layout as
// __nv_bfloat16), so only this adapter converts pointer types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/context.hpp"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/backend/cuda/types.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/config.hpp"

namespace saturn::cuda {

static_assert(sizeof(BFloat16) == sizeof(bf16) && alignof(BFloat16) <= alignof(bf16));

struct Backend : BackendTypes {
  using Context = cuda::Context;

  static bf16* b(BFloat16* p) { return reinterpret_cast<bf16*>(p); }
  static const bf16* b(const BFloat16* p) { return reinterpret_cast<const bf16*>(p); }

  static void check_config(const ModelConfig& c) {
    if (c.head_dim() > kAttentionMaxHeadDim)
      throw InputError(
          "the CUDA backend supports head dimensions up to " +
          std::to_string(kAttentionMaxHeadDim) + ", got " + std::to_string(c.head_dim()) +
          (c.head_size > 0
               ? std::string(" (the model's head_dim; Gemma's 256 needs the CPU backend)")
               : " (d_model " + std::to_string(c.d_model) + " / n_head " +
                     std::to_string(c.n_head) + ")"));
  }

  template <typename T>
  static void zero(Context& ctx, T* p, std::size_t n) {
    if (n > 0) SATURN_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(T), ctx.stream()));
  }
  template <typename T>
  static void copy(Context& ctx, T* dst, const T* src, std::size_t n) {
    if (n > 0 && dst != src)
      SATURN_CUDA_CHECK(
          cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, ctx.stream()));
  }
  template <typename T>
  static void copy_rows(Context& ctx, T* dst, std::size_t dst_pitch, const T* src,
                        std::size_t src_pitch, std::size_t width, std::size_t rows) {
    if (rows == 0 || width == 0) return;
    SATURN_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch * sizeof(T), src, src_pitch * sizeof(T),
                                        width * sizeof(T), rows, cudaMemcpyDeviceToDevice,
                                        ctx.stream()));
  }
  // From host memory the caller reuses on return: the copy is complete before it does.
  template <typename T>
  static void upload(Context& ctx, T* dst, const T* host, std::size_t n) {
    if (n == 0) return;
    SATURN_CUDA_CHECK(
        cudaMemcpyAsync(dst, host, n * sizeof(T), cudaMemcpyHostToDevice, ctx.stream()));
    ctx.synchronize("upload");
  }
  static void to_weights(Context& ctx, Weight* weights, const float* master, std::size_t n) {
    convert(ctx, b(weights), master, n);
  }

  static void embedding_forward(Context& ctx, Act* out, const std::int32_t* tokens,
                                const Weight* wte, const Weight* wpe, int B, int T, int C,
                                float scale, const std::int32_t* positions) {
    cuda::embedding_forward(ctx, b(out), tokens, b(wte), b(wpe), B, T, C, scale, positions);
  }
  static void embedding_backward(Context& ctx, float* dwte, float* dwpe, const Act* dout,
                                 const std::int32_t* tokens, int B, int T, int C, int padding_idx,
                                 float scale, const std::int32_t* positions) {
    cuda::embedding_backward(ctx, dwte, dwpe, b(dout), tokens, B, T, C, padding_idx, scale,
                             positions);
  }
  static void layernorm_forward(Context& ctx, Act* out, float* mean, float* rstd, const Act* inp,
                                const Weight* w, const Weight* bias, int N, int C, float eps) {
    cuda::layernorm_forward(ctx, b(out), mean, rstd, b(inp), b(w), b(bias), N, C, eps);
  }
  // res = a + x, then out = layernorm(res): one fused kernel (res is not read back).
  static void residual_layernorm_forward(Context& ctx, Act* res, Act* out, float* mean, float* rstd,
                                         const Act* a, const Act* x, const Weight* w,
                                         const Weight* bias, int N, int C, float eps) {
    cuda::residual_layernorm_forward(ctx, b(res), b(out), mean, rstd, b(a), b(x), b(w), b(bias), N,
                                     C, eps);
  }
  static void layernorm_backward(Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                                 const Act* inp, const Weight* w, const float* mean,
                                 const float* rstd, int N, int C) {
    cuda::layernorm_backward(ctx, b(dinp), dw, db, b(dout), b(inp), b(w), mean, rstd, N, C);
  }
  static void rmsnorm_forward(Context& ctx, Act* out, float* rstd, const Act* inp, const Weight* w,
                              int N, int C, float eps, float offset) {
    cuda::rmsnorm_forward(ctx, b(out), rstd, b(inp), b(w), N, C, eps, offset);
  }
  static void residual_rmsnorm_forward(Context& ctx, Act* res, Act* out, float* rstd, const Act* a,
                                       const Act* x, const Weight* w, int N, int C, float eps,
                                       float offset) {
    cuda::residual_rmsnorm_forward(ctx, b(res), b(out), rstd, b(a), b(x), b(w), N, C, eps, offset);
  }
  static void rmsnorm_backward(Context& ctx, Act* dinp, float* dw, const Act* dout, const Act* inp,
                               const Weight* w, const float* rstd, int N, int C, float offset) {
    cuda::rmsnorm_backward(ctx, b(dinp), dw, b(dout), b(inp), b(w), rstd, N, C, offset);
  }
  static void linear_forward(Context& ctx, Act* out, const Act* inp, const Weight* w,
                             const Weight* bias, int N, int C, int OC, bool w_in_out) {
    cuda::linear_forward(ctx, b(out), b(inp), b(w), b(bias), N, C, OC,
                         w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn);
  }
  // overwrite_dinp: dinp = dout · W (beta = 0) instead of +=, sparing its zeroing.
  static void linear_backward(Context& ctx, Act* dinp, float* dw, float* db, const Act* dout,
                              const Act* inp, const Weight* w, int N, int C, int OC, bool w_in_out,
                              bool overwrite_dinp = false) {
    cuda::linear_backward(ctx, b(dinp), dw, db, b(dout), b(inp), b(w), N, C, OC,
                          w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn,
                          overwrite_dinp ? GradWrite::kOverwrite : GradWrite::kAccumulate);
  }
  // pre = inp · W + bias, out = GELU(pre), in one GEMM (ops.hpp).
  static void linear_gelu_forward(Context& ctx, Act* out, Act* pre, const Act* inp, const Weight* w,
                                  const Weight* bias, int N, int C, int OC, bool w_in_out) {
    cuda::linear_gelu_forward(ctx, b(out), b(pre), b(inp), b(w), b(bias), N, C, OC,
                              w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn);
  }
  // Backward of linear(GELU(pre)): dpre OVERWRITTEN with (dout · W) ⊙ GELU'(pre); dw, db +=.
  static void linear_dgelu_backward(Context& ctx, Act* dpre, Act* dact_scratch, float* dw,
                                    float* db, const Act* dout, const Act* inp, const Act* pre,
                                    const Weight* w, int N, int C, int OC, bool w_in_out) {
    cuda::linear_dgelu_backward(ctx, b(dpre), b(dact_scratch), dw, db, b(dout), b(inp), b(pre),
                                b(w), N, C, OC,
                                w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn);
  }
  static void scaled_add_rows(Context& ctx, Act* dst, std::size_t dst_pitch, const Act* src,
                              std::size_t src_pitch, std::size_t width, std::size_t rows,
                              float scale) {
    cuda::scaled_add_rows(ctx, b(dst), dst_pitch, b(src), src_pitch, width, rows, scale);
  }
  static void add_bias(Context& ctx, Act* out, const Weight* bias, int N, int C) {
    cuda::add_bias(ctx, b(out), b(bias), N, C);
  }
  static void rotary_forward(Context& ctx, Act* out, const Act* inp, int B, int T, int H, int hd,
                             int stride, const RotaryParams& rot, const std::int32_t* positions) {
    cuda::rotary_forward(ctx, b(out), b(inp), B, T, H, hd, stride, rot, positions);
  }
  static void rotary_backward(Context& ctx, Act* dinp, const Act* dout, int B, int T, int H, int hd,
                              int stride, const RotaryParams& rot, const std::int32_t* positions) {
    cuda::rotary_backward(ctx, b(dinp), b(dout), B, T, H, hd, stride, rot, positions);
  }
  static void attention_forward(Context& ctx, Act* out, AttnSaved* lse, const Act* q, const Act* k,
                                const Act* v, int stride, int B, int T, int H, int Hkv, int hd,
                                const AttentionParams& params) {
    cuda::attention_forward(ctx, b(out), lse, b(q), b(k), b(v), stride, B, T, H, Hkv, hd, params);
  }
  static void attention_backward(Context& ctx, Act* dq, Act* dk, Act* dv, AttnSaved* delta,
                                 const Act* dout, const Act* out, const AttnSaved* lse,
                                 const Act* q, const Act* k, const Act* v, int stride, int B, int T,
                                 int H, int Hkv, int hd, const AttentionParams& params) {
    cuda::attention_backward(ctx, b(dq), b(dk), b(dv), delta, b(dout), b(out), lse, b(q), b(k),
                             b(v), stride, B, T, H, Hkv, hd, params);
  }
  static void gelu_forward(Context& ctx, Act* out, const Act* inp, std::size_t n) {
    cuda::gelu_forward(ctx, b(out), b(inp), n);
  }
  static void gelu_backward(Context& ctx, Act* dinp, const Act* inp, const Act* dout,
                            std::size_t n) {
    cuda::gelu_backward(ctx, b(dinp), b(inp), b(dout), n);
  }
  static void swiglu_forward(Context& ctx, Act* out, const Act* gate, const Act* up,
                             std::size_t n) {
    cuda::swiglu_forward(ctx, b(out), b(gate), b(up), n);
  }
  static void swiglu_backward(Context& ctx, Act* dgate, Act* dup, const Act* dout, const Act* gate,
                              const Act* up, std::size_t n) {
    cuda::swiglu_backward(ctx, b(dgate), b(dup), b(dout), b(gate), b(up), n);
  }
  static void geglu_forward(Context& ctx, Act* out, const Act* gate, const Act* up, std::size_t n) {
    cuda::geglu_forward(ctx, b(out), b(gate), b(up), n);
  }
  static void geglu_backward(Context& ctx, Act* dgate, Act* dup, const Act* dout, const Act* gate,
                             const Act* up, std::size_t n) {
    cuda::geglu_backward(ctx, b(dgate), b(dup), b(dout), b(gate), b(up), n);
  }
  static void residual_forward(Context& ctx, Act* out, const Act* a, const Act* x, std::size_t n) {
    cuda::residual_forward(ctx, b(out), b(a), b(x), n);
  }
  // The logits stay as they are; lse [N] keeps each row's log-sum-exp, so that the backward
  // reads the logits once more (to write their gradient) and never recomputes the statistics.
  // softcap: the logits are softcap_forward's output (nothing changes here; the backward
  // applies the cap's derivative).
  static void crossentropy_forward(Context& ctx, float* losses, float* lse, Act* logits,
                                   const std::int32_t* targets, int N, int V, float /*softcap*/) {
    cuda::crossentropy_forward(ctx, losses, b(logits), targets, N, V, lse);
  }
  // lse: what crossentropy_forward saved for these logits. The gradient is the raw logits'
  // (through the soft-cap when softcap > 0).
  static void crossentropy_backward(Context& ctx, Act* logits, const float* lse,
                                    const std::int32_t* targets, float dloss, int N, int V,
                                    float softcap) {
    cuda::crossentropy_backward(ctx, b(logits), nullptr, targets, dloss, N, V, lse, softcap);
  }
  // Gemma 2's final logit soft-capping, in place.
  static void softcap_forward(Context& ctx, Act* x, std::size_t n, float softcap) {
    cuda::softcap_forward(ctx, b(x), n, softcap);
  }
  static void loss_mean(Context& ctx, float* out, const float* losses, const std::int32_t* targets,
                        int N) {
    cuda::loss_mean(ctx, out, losses, targets, N);
  }
};

}  // namespace saturn::cuda
