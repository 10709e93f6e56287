#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

// One block per row: max, then the sum of e^(x - max), in fp32 from the bf16 logits. The loss is
// log(sum) - (x[target] - max), finite even when the target's probability underflows. With
// write_grad the row is overwritten by dloss * (softmax - onehot) in the same launch, so the
// [N, V] logits are read twice and written once per step, and no probabilities are stored.
__global__ void crossentropy_kernel(float* losses, bf16* logits, const std::int32_t* targets,
                                    float dloss, int V, bool write_grad) {
  const std::size_t row = blockIdx.x;
  bf16* x = logits + row * V;
  const int target = targets[row];
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, to_f(x[j]));
  mx = block_max(mx);
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(to_f(x[j]) - mx);
  const float sum = block_sum(s);
  // Every thread has read what it needs of the row: x[target] below is read before any thread
  // writes the gradient, thanks to the barrier inside block_sum... and this one.
  const float x_target = target >= 0 ? to_f(x[target]) : 0.0f;
  __syncthreads();
  if (threadIdx.x == 0 && losses != nullptr)
    losses[row] = target >= 0 ? logf(sum) - (x_target - mx) : 0.0f;
  if (!write_grad) return;
  const float inv = 1.0f / sum;
  const float scale = target >= 0 ? dloss : 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) {
    const float p = expf(to_f(x[j]) - mx) * inv;
    x[j] = to_bf(scale * (p - (j == target ? 1.0f : 0.0f)));
  }
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
                          const std::int32_t* targets, int N, int V) {
  if (N == 0) return;
  // The kernel only writes the logits when write_grad is set.
  crossentropy_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      losses, const_cast<bf16*>(logits), targets, 0.0f, V, false);
  SATURN_CUDA_LAUNCH_CHECK("crossentropy_kernel (forward)");
}

void crossentropy_backward(Context& ctx, bf16* logits_to_dlogits, float* losses,
                           const std::int32_t* targets, float dloss, int N, int V) {
  if (N == 0) return;
  crossentropy_kernel<<<static_cast<unsigned>(N), kThreads, 0, ctx.stream()>>>(
      losses, logits_to_dlogits, targets, dloss, V, true);
  SATURN_CUDA_LAUNCH_CHECK("crossentropy_kernel (backward)");
}

}  // namespace saturn::cuda
