#include <string>

#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// cos/sin of t * inv_freq[i] (t: the token's column, or its position in its record)
// (rotary_inv_freq: theta and the scaling), in fp32 step by step as the CPU backend (and Hugging
// Face) compute them.
__device__ __forceinline__ void angle_cos_sin(int t, int i, int hd, const RotaryParams& rot,
                                              float* c, float* s) {
  const float inv_freq = rotary_inv_freq(rot, i, hd);
  const float angle = static_cast<float>(t) * inv_freq;
  *c = cosf(angle);
  *s = sinf(angle);
}

// One thread per (row, head, pair i): reads x[i] and x[i + hd/2] before writing them, so out may
// alias inp.
__global__ void rotary_forward_kernel(bf16* out, const bf16* inp, std::size_t pairs, int T, int H,
                                      int hd, int stride, RotaryParams rot,
                                      const std::int32_t* positions) {
  const int half = hd / 2;
  for (std::size_t idx = global_index(); idx < pairs; idx += global_stride()) {
    const int i = static_cast<int>(idx % half);
    const int h = static_cast<int>(idx / half % H);
    const std::size_t n = idx / (static_cast<std::size_t>(half) * H);
    const int t = positions != nullptr ? positions[n] : static_cast<int>(n % T);
    float c, s;
    angle_cos_sin(t, i, hd, rot, &c, &s);
    const std::size_t base = n * stride + static_cast<std::size_t>(h) * hd;
    const float x1 = to_f(inp[base + i]), x2 = to_f(inp[base + i + half]);
    out[base + i] = to_bf(x1 * c - x2 * s);
    out[base + i + half] = to_bf(x2 * c + x1 * s);
  }
}

__global__ void rotary_backward_kernel(bf16* dinp, const bf16* dout, std::size_t pairs, int T,
                                       int H, int hd, int stride, RotaryParams rot,
                                       const std::int32_t* positions) {
  const int half = hd / 2;
  for (std::size_t idx = global_index(); idx < pairs; idx += global_stride()) {
    const int i = static_cast<int>(idx % half);
    const int h = static_cast<int>(idx / half % H);
    const std::size_t n = idx / (static_cast<std::size_t>(half) * H);
    const int t = positions != nullptr ? positions[n] : static_cast<int>(n % T);
    float c, s;
    angle_cos_sin(t, i, hd, rot, &c, &s);
    const std::size_t base = n * stride + static_cast<std::size_t>(h) * hd;
    const float g1 = to_f(dout[base + i]), g2 = to_f(dout[base + i + half]);
    dinp[base + i] = to_bf(to_f(dinp[base + i]) + g1 * c + g2 * s);
    dinp[base + i + half] = to_bf(to_f(dinp[base + i + half]) + g2 * c - g1 * s);
  }
}

void check_head_dim(int hd) {
  if (hd <= 0 || hd % 2 != 0)
    throw InputError("rotary embedding needs an even head dimension, got " + std::to_string(hd));
}

}  // namespace

void rotary_forward(Context& ctx, bf16* out, const bf16* inp, int B, int T, int H, int hd,
                    int stride, const RotaryParams& rot, const std::int32_t* positions) {
  check_head_dim(hd);
  const std::size_t pairs = static_cast<std::size_t>(B) * T * H * (hd / 2);
  if (pairs == 0) return;
  // clang-format off
  rotary_forward_kernel<<<grid_for(pairs), kThreads, 0, ctx.stream()>>>(out, inp, pairs, T, H, hd, stride, rot, positions);
  // clang-format on
  SATURN_CUDA_LAUNCH_CHECK("rotary_forward_kernel");
}

void rotary_backward(Context& ctx, bf16* dinp, const bf16* dout, int B, int T, int H, int hd,
                     int stride, const RotaryParams& rot, const std::int32_t* positions) {
  check_head_dim(hd);
  const std::size_t pairs = static_cast<std::size_t>(B) * T * H * (hd / 2);
  if (pairs == 0) return;
  // clang-format off
  rotary_backward_kernel<<<grid_for(pairs), kThreads, 0, ctx.stream()>>>(dinp, dout, pairs, T, H, hd, stride, rot, positions);
  // clang-format on
  SATURN_CUDA_LAUNCH_CHECK("rotary_backward_kernel");
}

}  // namespace saturn::cuda
