#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/error.hpp"

namespace saturn::cpu {
namespace {

// cos/sin of t * inv_freq[i] for t < T, i < hd/2, computed in float32 step by step as Hugging
// Face's LlamaRotaryEmbedding does (inv_freq from rotary_inv_freq, then t * inv_freq, then cos
// and sin), so rounding matches PyTorch rather than an exact double-precision angle.
struct RotaryTable {
  std::vector<float> cos, sin;
};

RotaryTable make_table(int T, int hd, const RotaryParams& rot) {
  if (hd <= 0 || hd % 2 != 0) {
    throw InputError("rotary embedding needs an even head dimension, got " + std::to_string(hd));
  }
  const int half = hd / 2;
  std::vector<float> inv_freq(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    inv_freq[static_cast<std::size_t>(i)] = rotary_inv_freq(rot, i, hd);
  RotaryTable table{std::vector<float>(static_cast<std::size_t>(T) * half),
                    std::vector<float>(static_cast<std::size_t>(T) * half)};
#pragma omp parallel for schedule(static) if (T * half >= 4096)
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const float angle = static_cast<float>(t) * inv_freq[static_cast<std::size_t>(i)];
      table.cos[static_cast<std::size_t>(t) * half + i] = std::cos(angle);
      table.sin[static_cast<std::size_t>(t) * half + i] = std::sin(angle);
    }
  }
  return table;
}

// Token n's position: its column in the row, or its position in its record (packed records).
std::size_t position_of(std::ptrdiff_t n, int T, const std::int32_t* positions) {
  return static_cast<std::size_t>(positions != nullptr ? positions[n] : n % T);
}

}  // namespace

void rotary_forward(float* out, const float* inp, int B, int T, int H, int hd, int stride,
                    const RotaryParams& rot, const std::int32_t* positions) {
  const RotaryTable table = make_table(T, hd, rot);
  const int half = hd / 2;
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const std::size_t t = position_of(n, T, positions);
    const float* cs = table.cos.data() + t * half;
    const float* sn = table.sin.data() + t * half;
    for (int h = 0; h < H; ++h) {
      const std::size_t base =
          static_cast<std::size_t>(n) * stride + static_cast<std::size_t>(h) * hd;
      const float* x = inp + base;
      float* o = out + base;
      // In place is safe: iteration i reads x[i] and x[i + half] before writing exactly those.
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float x1 = x[i];
        const float x2 = x[i + half];
        o[i] = x1 * cs[i] - x2 * sn[i];
        o[i + half] = x2 * cs[i] + x1 * sn[i];
      }
    }
  }
}

void rotary_backward(float* dinp, const float* dout, int B, int T, int H, int hd, int stride,
                     const RotaryParams& rot, const std::int32_t* positions) {
  const RotaryTable table = make_table(T, hd, rot);
  const int half = hd / 2;
  const std::ptrdiff_t N = static_cast<std::ptrdiff_t>(B) * T;
#pragma omp parallel for schedule(static)
  for (std::ptrdiff_t n = 0; n < N; ++n) {
    const std::size_t t = position_of(n, T, positions);
    const float* cs = table.cos.data() + t * half;
    const float* sn = table.sin.data() + t * half;
    for (int h = 0; h < H; ++h) {
      const std::size_t base =
          static_cast<std::size_t>(n) * stride + static_cast<std::size_t>(h) * hd;
      const float* g = dout + base;
      float* d = dinp + base;
      // The transpose of the rotation by the same angle.
#pragma omp simd
      for (int i = 0; i < half; ++i) {
        const float g1 = g[i];
        const float g2 = g[i + half];
        d[i] += g1 * cs[i] + g2 * sn[i];
        d[i + half] += g2 * cs[i] - g1 * sn[i];
      }
    }
  }
}

}  // namespace saturn::cpu
