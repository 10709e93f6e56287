// What causal attention computes beyond q, k and v, one definition for every backend: which keys
// a query sees (a sliding window, the records of packed data), the scores' scale, and Gemma 2's
// soft-capping of the scores.
#pragma once

#include <cmath>
#include <cstdint>

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
  // Packed records (`packing: {cross_attention: false}`): per token of the [B, T] batch, in the
  // memory of the backend that runs the op; null: each row is one sequence. positions[b·T + t]
  // is token t's position in its record, so query t sees keys from t - positions[b·T + t] on;
  // segment_end[b·T + j] is one past the last token of key j's record in the row, so key j is
  // seen by the queries before it. Both bounds combine with a window (the tighter one wins).
  const std::int32_t* positions = nullptr;
  const std::int32_t* segment_end = nullptr;
};

// Which keys query t of a row sees and which queries see key j, host and device alike: a
// window's bounds and a packed row's record bounds, the tighter of the two. pos and end point at
// the row's positions and segment ends (null: no records).
#if defined(__CUDACC__)
#define SATURN_ATTENTION_HD __host__ __device__
#else
#define SATURN_ATTENTION_HD
#endif
// The first key query t sees.
SATURN_ATTENTION_HD inline int attention_first_key(int t, int window, const std::int32_t* pos) {
  int first = window > 0 && t >= window ? t - window + 1 : 0;
  if (pos != nullptr && t - pos[t] > first) first = t - pos[t];
  return first;
}
// One past the last query that sees key j (T: every later query).
SATURN_ATTENTION_HD inline int attention_query_end(int j, int window, int T,
                                                   const std::int32_t* end) {
  int last = window > 0 && j + window < T ? j + window : T;
  if (end != nullptr && end[j] < last) last = end[j];
  return last;
}
#undef SATURN_ATTENTION_HD

// The usual scale, 1/sqrt(hd), rounded to float32 as the backends have always computed it.
inline float attention_scale(int hd) {
  return 1.0f / std::sqrt(static_cast<float>(hd));
}

// Plain causal attention with the usual scale and an optional window.
inline AttentionParams causal_attention(int hd, int window = 0) {
  return AttentionParams{window, attention_scale(hd), 0.0f, nullptr, nullptr};
}

}  // namespace saturn
