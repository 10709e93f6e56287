// Rotary position embeddings' frequencies, one definition for every backend (the CPU ops and
// the CUDA kernels call the same function): plain RoPE (inv_freq_i = 1 / theta^(2i/hd)) and the
// two scalings Hugging Face checkpoints use that the engine computes, `linear` (every frequency
// divided by a factor) and `llama3` (Llama 3.1 and 3.2: low frequencies divided, high ones kept,
// the band between interpolated). Each step is a float32 operation in the order transformers
// 4.44 computes it (modeling_rope_utils.py), so that the angles round as PyTorch's do.
#pragma once

#if defined(__CUDACC__)
#define SATURN_HOST_DEVICE __host__ __device__
#else
#define SATURN_HOST_DEVICE
#endif

#include <cmath>

namespace saturn {

enum class RopeScalingKind : int { kNone = 0, kLinear = 1, kLlama3 = 2 };

struct RotaryParams {
  float theta = 10000.0f;
  RopeScalingKind scaling = RopeScalingKind::kNone;
  float factor = 1.0f;                     // linear and llama3
  float low_freq_factor = 1.0f;            // llama3
  float high_freq_factor = 4.0f;           // llama3
  float original_max_positions = 8192.0f;  // llama3: the context length the model was made for
};

// The inverse frequency of rotation pair i (0 <= i < hd/2).
SATURN_HOST_DEVICE inline float rotary_inv_freq(const RotaryParams& r, int i, int hd) {
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(hd);
  const float inv = 1.0f / powf(r.theta, exponent);
  if (r.scaling == RopeScalingKind::kLinear) return inv / r.factor;
  if (r.scaling != RopeScalingKind::kLlama3) return inv;
  // torch evaluates `scalar / tensor` as reciprocal(tensor) * scalar: two roundings.
  const float two_pi = 6.283185307179586f;
  const float wavelen = (1.0f / inv) * two_pi;
  const float high_wavelen = r.original_max_positions / r.high_freq_factor;
  const float low_wavelen = r.original_max_positions / r.low_freq_factor;
  if (wavelen < high_wavelen) return inv;            // high frequencies: kept
  if (wavelen > low_wavelen) return inv / r.factor;  // low frequencies: divided
  // The band between: interpolated, each product rounded before the sum as torch's separate
  // kernels round them (callers compile this without contracting into FMAs where it matters).
  const float smooth = ((1.0f / wavelen) * r.original_max_positions - r.low_freq_factor) /
                       (r.high_freq_factor - r.low_freq_factor);
  const float kept = smooth * inv;
  const float divided = (1.0f - smooth) * inv / r.factor;
  return divided + kept;
}

}  // namespace saturn
