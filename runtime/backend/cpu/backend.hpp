// The CPU backend as the model program (runtime/model/transformer.hpp) sees it: its element
// types and one static function per op, forwarding to the fp32 kernels of ops.hpp. The CUDA
// backend has the same shape (runtime/backend/cuda/backend.hpp); the model is written once
// against it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/model/config.hpp"

namespace saturn::cpu {

struct Backend {
  static constexpr DeviceKind kKind = DeviceKind::kCpu;
  using Act = float;     // activations and their gradients
  using Weight = float;  // what the kernels read: the fp32 master weights themselves
  // Attention keeps its [B, H, T, T] softmax probabilities for backward, and needs a scratch of
  // the same size there.
  using AttnSaved = float;
  static std::size_t attention_saved(std::size_t B, std::size_t H, std::size_t T) {
    return B * H * T * T;
  }
  static std::size_t attention_scratch(std::size_t B, std::size_t H, std::size_t T) {
    return B * H * T * T;
  }
  struct Context {};  // no stream, no handle: every op completes before it returns

  static void check_config(const ModelConfig&) {}

  template <typename T>
  static void zero(Context&, T* p, std::size_t n) {
    if (n > 0) std::memset(static_cast<void*>(p), 0, n * sizeof(T));
  }
  template <typename T>
  static void copy(Context&, T* dst, const T* src, std::size_t n) {
    if (n > 0 && dst != src) std::memcpy(static_cast<void*>(dst), src, n * sizeof(T));
  }
  // `rows` rows of `width` elements, `dst_pitch` and `src_pitch` elements apart.
  template <typename T>
  static void copy_rows(Context&, T* dst, std::size_t dst_pitch, const T* src,
                        std::size_t src_pitch, std::size_t width, std::size_t rows) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<void*>(dst + r * dst_pitch), src + r * src_pitch, width * sizeof(T));
  }
  template <typename T>
  static void upload(Context& c, T* dst, const T* host, std::size_t n) {
    copy(c, dst, host, n);
  }
  static void to_weights(Context&, Weight*, const float*, std::size_t) {}  // weights are master

  static void embedding_forward(Context&, float* out, const std::int32_t* tokens, const float* wte,
                                const float* wpe, int B, int T, int C, float scale,
                                const std::int32_t* positions) {
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C, scale, positions);
  }
  static void embedding_backward(Context&, float* dwte, float* dwpe, const float* dout,
                                 const std::int32_t* tokens, int B, int T, int C, int padding_idx,
                                 float scale, const std::int32_t* positions) {
    cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, padding_idx, scale, positions);
  }
  static void layernorm_forward(Context&, float* out, float* mean, float* rstd, const float* inp,
                                const float* w, const float* b, int N, int C, float eps) {
    cpu::layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps);
  }
  // res = a + x, then out = layernorm(res): the two ops one after the other (the CPU's numerics
  // are those of the separate ops; the CUDA backend fuses them).
  static void residual_layernorm_forward(Context&, float* res, float* out, float* mean, float* rstd,
                                         const float* a, const float* x, const float* w,
                                         const float* bias, int N, int C, float eps) {
    cpu::residual_forward(res, a, x, static_cast<std::size_t>(N) * static_cast<std::size_t>(C));
    cpu::layernorm_forward(out, mean, rstd, res, w, bias, N, C, eps);
  }
  static void layernorm_backward(Context&, float* dinp, float* dw, float* db, const float* dout,
                                 const float* inp, const float* w, const float* mean,
                                 const float* rstd, int N, int C) {
    cpu::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
  }
  static void rmsnorm_forward(Context&, float* out, float* rstd, const float* inp, const float* w,
                              int N, int C, float eps, float offset) {
    cpu::rmsnorm_forward(out, rstd, inp, w, N, C, eps, offset);
  }
  static void residual_rmsnorm_forward(Context&, float* res, float* out, float* rstd,
                                       const float* a, const float* x, const float* w, int N, int C,
                                       float eps, float offset) {
    cpu::residual_forward(res, a, x, static_cast<std::size_t>(N) * static_cast<std::size_t>(C));
    cpu::rmsnorm_forward(out, rstd, res, w, N, C, eps, offset);
  }
  static void rmsnorm_backward(Context&, float* dinp, float* dw, const float* dout,
                               const float* inp, const float* w, const float* rstd, int N, int C,
                               float offset) {
    cpu::rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C, offset);
  }
  static void linear_forward(Context&, float* out, const float* inp, const float* w,
                             const float* bias, int N, int C, int OC, bool w_in_out) {
    cpu::linear_forward(out, inp, w, bias, N, C, OC,
                        w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn);
  }
  // overwrite_dinp: dinp = dout · W instead of += (zeroed here, then accumulated: the same
  // arithmetic as the model's zero-then-accumulate).
  static void linear_backward(Context&, float* dinp, float* dw, float* db, const float* dout,
                              const float* inp, const float* w, int N, int C, int OC, bool w_in_out,
                              bool overwrite_dinp = false) {
    if (overwrite_dinp && dinp != nullptr)
      std::fill(dinp, dinp + static_cast<std::size_t>(N) * C, 0.0f);
    cpu::linear_backward(dinp, dw, db, dout, inp, w, N, C, OC,
                         w_in_out ? WeightLayout::kInOut : WeightLayout::kOutIn);
  }
  // The CUDA backend's fused MLP ops, composed from the separate ones (so the CPU's results are
  // exactly those of linear_forward + gelu_forward and linear_backward + gelu_backward).
  static void linear_gelu_forward(Context& ctx, float* out, float* pre, const float* inp,
                                  const float* w, const float* bias, int N, int C, int OC,
                                  bool w_in_out) {
    linear_forward(ctx, pre, inp, w, bias, N, C, OC, w_in_out);
    cpu::gelu_forward(out, pre, static_cast<std::size_t>(N) * OC);
  }
  static void linear_dgelu_backward(Context& ctx, float* dpre, float* dact_scratch, float* dw,
                                    float* db, const float* dout, const float* inp,
                                    const float* pre, const float* w, int N, int C, int OC,
                                    bool w_in_out) {
    const std::size_t n = static_cast<std::size_t>(N) * C;
    linear_backward(ctx, dact_scratch, dw, db, dout, inp, w, N, C, OC, w_in_out, true);
    std::fill(dpre, dpre + n, 0.0f);
    cpu::gelu_backward(dpre, pre, dact_scratch, n);
  }
  static void scaled_add_rows(Context&, float* dst, std::size_t dst_pitch, const float* src,
                              std::size_t src_pitch, std::size_t width, std::size_t rows,
                              float scale) {
    cpu::scaled_add_rows(dst, dst_pitch, src, src_pitch, width, rows, scale);
  }
  static void add_bias(Context&, float* out, const float* bias, int N, int C) {
    cpu::add_bias(out, bias, N, C);
  }
  static void rotary_forward(Context&, float* out, const float* inp, int B, int T, int H, int hd,
                             int stride, const RotaryParams& rot, const std::int32_t* positions) {
    cpu::rotary_forward(out, inp, B, T, H, hd, stride, rot, positions);
  }
  static void rotary_backward(Context&, float* dinp, const float* dout, int B, int T, int H, int hd,
                              int stride, const RotaryParams& rot, const std::int32_t* positions) {
    cpu::rotary_backward(dinp, dout, B, T, H, hd, stride, rot, positions);
  }
  static void attention_forward(Context&, float* out, AttnSaved* saved, const float* q,
                                const float* k, const float* v, int stride, int B, int T, int H,
                                int Hkv, int hd, const AttentionParams& params) {
    cpu::attention_forward(out, saved, q, k, v, stride, B, T, H, Hkv, hd, params);
  }
  static void attention_backward(Context&, float* dq, float* dk, float* dv, AttnSaved* scratch,
                                 const float* dout, const float* /*out*/, const AttnSaved* saved,
                                 const float* q, const float* k, const float* v, int stride, int B,
                                 int T, int H, int Hkv, int hd, const AttentionParams& params) {
    cpu::attention_backward(dq, dk, dv, scratch, dout, q, k, v, saved, stride, B, T, H, Hkv, hd,
                            params);
  }
  static void gelu_forward(Context&, float* out, const float* inp, std::size_t n) {
    cpu::gelu_forward(out, inp, n);
  }
  static void gelu_backward(Context&, float* dinp, const float* inp, const float* dout,
                            std::size_t n) {
    cpu::gelu_backward(dinp, inp, dout, n);
  }
  static void swiglu_forward(Context&, float* out, const float* gate, const float* up,
                             std::size_t n) {
    cpu::swiglu_forward(out, gate, up, n);
  }
  static void swiglu_backward(Context&, float* dgate, float* dup, const float* dout,
                              const float* gate, const float* up, std::size_t n) {
    cpu::swiglu_backward(dgate, dup, dout, gate, up, n);
  }
  static void geglu_forward(Context&, float* out, const float* gate, const float* up,
                            std::size_t n) {
    cpu::geglu_forward(out, gate, up, n);
  }
  static void geglu_backward(Context&, float* dgate, float* dup, const float* dout,
                             const float* gate, const float* up, std::size_t n) {
    cpu::geglu_backward(dgate, dup, dout, gate, up, n);
  }
  static void residual_forward(Context&, float* out, const float* a, const float* b,
                               std::size_t n) {
    cpu::residual_forward(out, a, b, n);
  }
  // Gemma 2's final logit soft-capping, in place.
  static void softcap_forward(Context&, float* x, std::size_t n, float softcap) {
    cpu::softcap_forward(x, n, softcap);
  }
  // Each row's loss. Without a softcap the logits become softmax probabilities in place (the
  // backward needs nothing else, and `lse` is not written); with one (the logits being
  // softcap_forward's output) they are kept, with their log-sum-exp, for the cap's derivative.
  static void crossentropy_forward(Context&, float* losses, float* lse, float* logits,
                                   const std::int32_t* targets, int N, int V, float softcap) {
    if (softcap > 0.0f)
      cpu::crossentropy_lse_forward(losses, lse, logits, targets, N, V);
    else
      cpu::softmax_crossentropy_forward(losses, logits, logits, targets, N, V);
  }
  // What crossentropy_forward left becomes the gradient of the raw logits: dloss * (p -
  // onehot(target)), times the soft-cap's derivative when there is one.
  static void crossentropy_backward(Context&, float* logits, const float* lse,
                                    const std::int32_t* targets, float dloss, int N, int V,
                                    float softcap) {
    if (softcap > 0.0f)
      cpu::crossentropy_backward_from_lse(logits, lse, targets, dloss, N, V, softcap);
    else
      cpu::softmax_crossentropy_backward_inplace(logits, targets, dloss, N, V);
  }
  static void loss_mean(Context&, float* out, const float* losses, const std::int32_t* targets,
                        int N) {
    cpu::loss_mean(out, losses, targets, N);
  }
};

}  // namespace saturn::cpu
