// What causal attention computes beyond q, k and v, one definition for every backend: which keys
// a query sees (a sliding window), the scores' scale, and Gemma 2's soft-capping of the scores.
#pragma once

#include <cmath>

namespace saturn {

struct AttentionParams {
  // > 0: query i sees keys i - window < j <= i (Mistral; Gemma 2's even layers). 0: every
  // earlier key.
  int window = 0;
  // The scores are scale * q·k: 1/sqrt(head_dim) (attention_scale), or Gemma 2's
  // query_pre_attn_scalar^-0.5. Always given: the ops refuse a scale that is not > 0.
  float scale = 0.0f;
  // > 0: the scaled scores become softcap * tanh(score / softcap) before the causal mask and the
  // softmax (Gemma 2's attn_logit_softcapping). 0: none.
  float softcap = 0.0f;
};

// The usual scale, 1/sqrt(hd), rounded to float32 as the backends have always computed it.
inline float attention_scale(int hd) {
  return 1.0f / std::sqrt(static_cast<float>(hd));
}

// Plain causal attention with the usual scale and an optional window.
inline AttentionParams causal_attention(int hd, int window = 0) {
  return AttentionParams{window, attention_scale(hd), 0.0f};
}

}  // namespace saturn
