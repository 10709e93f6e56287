#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// One block per row. The softmax statistics come from one read of the row: each thread keeps
// a running maximum m and the sum s of e^(x - m) over its elements (rescaled when m grows: the
// online softmax), then the block combines them. The loss is lse - x[target] with
// lse = max + log(sum), finite even when the target's probability underflows. Rows whose
// length is a multiple of 8 (and aligned) are read 8 bf16 per 128-bit access.
struct RowStats {
  float lse;
  float x_target;  // 0 for an ignored row
};

__device__ __forceinline__ void online_add(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.0f;  // e^-inf = 0 before the first element
    m = x;
  } else {
    s += expf(x - m);
  }
}

__device__ RowStats row_stats(const bf16* x, int V, int target, bool vec) {
  float m = -INFINITY, s = 0.0f;
  if (vec) {
    for (int j = threadIdx.x * kBf16Width; j < V; j += blockDim.x * kBf16Width) {
      const Vec128<bf16> v = load128(x + j);
#pragma unroll
      for (int k = 0; k < kBf16Width; ++k) online_add(m, s, to_f(v.v[k]));
    }
  } else {
    for (int j = threadIdx.x; j < V; j += blockDim.x) online_add(m, s, to_f(x[j]));
  }
  const float mx = block_max(m);
  const float sum = block_sum(m == -INFINITY ? 0.0f : s * expf(m - mx));
  RowStats r;
  r.lse = mx + logf(sum);
  r.x_target = target >= 0 ? to_f(x[target]) : 0.0f;
  return r;
}

// One logit's gradient: scale * (e^(x - lse) - onehot), times the soft-cap's derivative
// 1 - (x / softcap)^2 when softcap > 0 (x being the capped logit).
__device__ __forceinline__ float logit_grad(float x, bool is_target, float lse, float scale,
                                            float softcap) {
  float d = scale * (expf(x - lse) - (is_target ? 1.0f : 0.0f));
  if (softcap > 0.0f) {
    // The capped logit is bf16: rounded, |x| may exceed the cap (0.2 is 0.2002 in bf16), where
    // 1 - t^2 < 0 would flip the gradient's sign.
    const float t = x / softcap;
    d *= fmaxf(0.0f, 1.0f - t * t);
  }
  return d;
}

// The row's gradient in place (logit_grad). Every thread must have read what it needs of the
// row (x[target]) before the first write: the caller's barrier.
__device__ void write_row_grad(bf16* x, int V, int target, float lse, float scale, float softcap,
                               bool vec) {
  if (vec) {
    for (int j = threadIdx.x * kBf16Width; j < V; j += blockDim.x * kBf16Width) {
      Vec128<bf16> v = load128(x + j);
#pragma unroll
      for (int k = 0; k < kBf16Width; ++k)
        v.v[k] = to_bf(logit_grad(to_f(v.v[k]), j + k == target, lse, scale, softcap));
      store128(x + j, v);
    }
  } else {
    for (int j = threadIdx.x; j < V; j += blockDim.x)
      x[j] = to_bf(logit_grad(to_f(x[j]), j == target, lse, scale, softcap));
  }
}

// The loss (and, when lse_out is not null, each row's log-sum-exp for the backward): one read.
__global__ void crossentropy_forward_kernel(float* losses, float* lse_out, const bf16* logits,
                                            const std::int32_t* targets, int V, bool vec) {
  const std::size_t row = blockIdx.x;
  const int target = targets[row];
  const RowStats r = row_stats(logits + row * V, V, target, vec);
  if (threadIdx.x == 0) {
    if (losses != nullptr) losses[row] = target >= 0 ? r.lse - r.x_target : 0.0f;
    if (lse_out != nullptr) lse_out[row] = r.lse;
  }
}

// The gradient in place. With the forward's log-sum-exp (lse != null): one read and one write of
// the row; without it, a statistics read first. losses (may be null) receive the loss again.
__global__ void crossentropy_backward_kernel(float* losses, bf16* logits, const float* lse,
                                             const std::int32_t* targets, float dloss, int V,
                                             float softcap, bool vec) {
  const std::size_t row = blockIdx.x;
  bf16* x = logits + row * V;
  const int target = targets[row];
  RowStats r;
  if (lse != nullptr) {
    r.lse = lse[row];
    r.x_target = target >= 0 ? to_f(x[target]) : 0.0f;
  } else {
    r = row_stats(x, V, target, vec);
  }
  __syncthreads();  // x[target] is read (by every thread) before any thread writes the row
  if (threadIdx.x == 0 && losses != nullptr) losses[row] = target >= 0 ? r.lse - r.x_target : 0.0f;
  write_row_grad(x, V, target, r.lse, target >= 0 ? dloss : 0.0f, softcap, vec);
}

// One block: the row losses summed in fp64 in a fixed order (thread-strided partials, then
// the block's fixed tree), divided by the count of rows whose target is >= 0.
__global__ void loss_mean_kernel(float* out, const float* losses, const std::int32_t* targets,
                                 int N) {
  double s = 0.0, counted = 0.0;
  for (int n = threadIdx.x; n < N; n += blockDim.x) {
    s += static_cast<double>(losses[n]);
    if (targets[n] >= 0) counted += 1.0;
  }
  s = block_sum(s);
  counted = block_sum(counted);
  if (threadIdx.x == 0) *out = counted == 0.0 ? 0.0f : static_cast<float>(s / counted);
}

}  // namespace

void loss_mean(Context& ctx, float* out, const float* losses, const std::int32_t* targets, int N) {
  loss_mean_kernel<<<1, kThreads, 0, ctx.stream()>>>(out, losses, targets, N);
  SATURN_CUDA_LAUNCH_CHECK("loss_mean_kernel");
}

void crossentropy_forward(Context& ctx, float* losses, const bf16* logits,
                          const std::int32_t* targets, int N, int V, float* lse) {
  if (N == 0) return;
  const bool vec = V % kBf16Width == 0 && aligned16(logits);
  crossentropy_forward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      losses, lse, logits, targets, V, vec);
  SATURN_CUDA_LAUNCH_CHECK("crossentropy_forward_kernel");
}

void crossentropy_backward(Context& ctx, bf16* logits_to_dlogits, float* losses,
                           const std::int32_t* targets, float dloss, int N, int V, const float* lse,
                           float softcap) {
  if (N == 0) return;
  const bool vec = V % kBf16Width == 0 && aligned16(logits_to_dlogits);
  crossentropy_backward_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      losses, logits_to_dlogits, lse, targets, dloss, V, softcap, vec);
  SATURN_CUDA_LAUNCH_CHECK("crossentropy_backward_kernel");
}

}  // namespace saturn::cuda
