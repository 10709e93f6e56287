#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/parallel.hpp"
#include "runtime/backend/cpu/vecmath.hpp"
#include "runtime/core/error.hpp"

namespace saturn::cpu {
namespace {

// p = softmax(x) over one row of V logits; returns the sum of e^(x - max) and sets *maxv.
// In place is fine (p == x): element j is read before it is written.
SATURN_CPU_MULTIVERSION double softmax_row(float* p, const float* x, int V, float* maxv) {
  const float mx = detail::max_f32(x, V);
  // V reaches 10^5: a double sum keeps log(sum) accurate.
  const double sum = detail::exp_shift_sum<double>(p, x, V, mx);
  const float inv = static_cast<float>(1.0 / sum);
#pragma omp simd
  for (int j = 0; j < V; ++j) p[j] *= inv;
  *maxv = mx;
  return sum;
}

// Checked up front: an out-of-range id would read past the row, and throwing from inside the
// parallel region is not allowed.
void check_targets(const int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    if (targets[n] >= V) {
      throw InputError("target token " + std::to_string(targets[n]) + " at row " +
                       std::to_string(n) + " is outside the vocabulary [0, " + std::to_string(V) +
                       ")");
    }
  }
}

}  // namespace

void softmax_crossentropy_forward(float* losses, float* probs, const float* logits,
                                  const int32_t* targets, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<std::size_t>(n) * V;
    const int32_t target = targets[n];
    // Read before softmax_row overwrites it when probs aliases logits.
    const float x_target = target >= 0 ? x[target] : 0.0f;
    float maxv = 0.0f;
    const double sum = softmax_row(probs + static_cast<std::size_t>(n) * V, x, V, &maxv);
    // -log_softmax(x)[target] = log(sum) - (x[target] - max), which stays finite when the
    // target's probability underflows.
    losses[n] = target >= 0 ? static_cast<float>(std::log(sum)) - (x_target - maxv) : 0.0f;
  }
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets,
                                   float dloss, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const int32_t target = targets[n];
    if (target < 0) continue;
    const float* p = probs + static_cast<std::size_t>(n) * V;
    float* d = dlogits + static_cast<std::size_t>(n) * V;
#pragma omp simd
    for (int j = 0; j < V; ++j) d[j] += dloss * p[j];
    d[target] -= dloss;
  }
}

void softmax_crossentropy_backward_inplace(float* probs, const int32_t* targets, float dloss, int N,
                                           int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const int32_t y = targets[n];
    float* row = probs + static_cast<std::size_t>(n) * V;
    const float scale = y < 0 ? 0.0f : dloss;
    for (int v = 0; v < V; ++v) row[v] *= scale;
    if (y >= 0) row[y] -= dloss;
  }
}

void crossentropy_lse_forward(float* losses, float* lse, const float* logits,
                              const int32_t* targets, int N, int V) {
  check_targets(targets, N, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + static_cast<std::size_t>(n) * V;
    const float maxv = detail::max_f32(x, V);
    double sum = 0.0;
    for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(x[j] - maxv));
    const float log_sum = static_cast<float>(std::log(sum));
    lse[n] = maxv + log_sum;
    losses[n] = targets[n] >= 0 ? log_sum - (x[targets[n]] - maxv) : 0.0f;
  }
}

void crossentropy_backward_from_lse(float* logits, const float* lse, const int32_t* targets,
                                    float dloss, int N, int V, float softcap) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const int32_t y = targets[n];
    float* row = logits + static_cast<std::size_t>(n) * V;
    const float scale = y < 0 ? 0.0f : dloss, row_lse = lse[n];
    for (int j = 0; j < V; ++j) {
      const float x = row[j];
      float d = scale * (std::exp(x - row_lse) - (j == y ? 1.0f : 0.0f));
      if (softcap > 0.0f) {
        // |x| <= softcap up to rounding: a derivative below 0 would flip the gradient's sign.
        const float t = x / softcap;
        d *= std::max(0.0f, 1.0f - t * t);
      }
      row[j] = d;
    }
  }
}

void loss_mean(float* out, const float* losses, const int32_t* targets, int N) {
  double sum = 0;
  std::size_t counted = 0;
  for (int n = 0; n < N; ++n) {
    sum += losses[n];
    if (targets[n] >= 0) ++counted;
  }
  *out = counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

}  // namespace saturn::cpu
