// Causal attention without a [T, T] matrix in global memory (flash-style): the forward keeps a
// running max and sum per query row (online softmax) and saves only the row's log-sum-exp; the
// backward recomputes the probabilities from it.
//
// Deliberately plain: one warp per query row (forward, dq) or per key row (dk, dv), tiles of 32
// keys or queries staged through shared memory in fp32, one lane per key/query of the tile for
// the dot products and one lane per head dimension (hd/32 each) for the accumulators. All
// arithmetic is fp32 on the CUDA cores (no tensor cores), which keeps it simple to check.
#include <fmt/format.h>

#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using namespace detail;

constexpr int kWarps = 8;  // rows per block: one per warp
constexpr int kTile = 32;  // keys (or queries) per shared-memory tile: one per lane
constexpr int kPerLane = kAttentionMaxHeadDim / 32;

// ---- forward ---------------------------------------------------------------------------------
// grid (query tiles of kWarps rows, B*H). Shared: K and V tiles [kTile][hd+1] (padded so lane j
// reading row j hits distinct banks), then the block's query rows [kWarps][hd].
__global__ __launch_bounds__(kWarps *
                             32) void attention_forward_kernel(bf16* out, float* lse, const bf16* q,
                                                               const bf16* k, const bf16* v,
                                                               int stride, int T, int H, int hd,
                                                               float scale) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * ld;
  float* Qs = Vs + kTile * ld;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kWarps;
  const int row = q0 + warp;
  const int last_row = min(T - 1, q0 + kWarps - 1);
  const std::size_t base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
  float* qrow = Qs + warp * hd;
  if (row < T)
    for (int d = lane; d < hd; d += 32)
      qrow[d] = to_f(q[base + static_cast<std::size_t>(row) * stride + d]);

  float m = -INFINITY, l = 0.0f;
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;

  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed (and qrow written, on the first pass)
    for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
      const int jj = idx / hd, d = idx % hd, j = j0 + jj;
      float kv = 0.0f, vv = 0.0f;
      if (j < T) {
        const std::size_t off = base + static_cast<std::size_t>(j) * stride + d;
        kv = to_f(k[off]);
        vv = to_f(v[off]);
      }
      Ks[jj * ld + d] = kv;
      Vs[jj * ld + d] = vv;
    }
    __syncthreads();
    if (row < T && j0 <= row) {  // uniform across the warp
      const int j = j0 + lane;
      float s = -INFINITY;
      if (j <= row) {
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot += qrow[d] * Ks[lane * ld + d];
        s = dot * scale;
      }
      const float m_new = fmaxf(m, warp_max(s));  // finite: key j0 <= row is in the tile
      const float p = j <= row ? expf(s - m_new) : 0.0f;
      const float corr = expf(m - m_new);  // 0 on the first tile (m = -inf)
      l = l * corr + warp_sum(p);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[i] *= corr;
      const int keys = min(kTile, row - j0 + 1);
      for (int jj = 0; jj < keys; ++jj) {
        const float pj = __shfl_sync(kFullMask, p, jj);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) acc[i] += pj * Vs[jj * ld + d];
        }
      }
      m = m_new;
    }
  }
  if (row < T) {
    const int C = H * hd;
    bf16* o = out + (static_cast<std::size_t>(b) * T + row) * C + static_cast<std::size_t>(h) * hd;
    const float inv = 1.0f / l;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) o[d] = to_bf(acc[i] * inv);
    }
    if (lane == 0) lse[static_cast<std::size_t>(bh) * T + row] = m + logf(l);
  }
}

// ---- backward --------------------------------------------------------------------------------
// delta[b,h,t] = sum_d dout[t,d] * out[t,d]: the row sum of P ⊙ dP that the softmax backward
// subtracts. One warp per row.
__global__ void attention_delta_kernel(float* delta, const bf16* dout, const bf16* out, int T,
                                       int H, int hd) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  if (warp >= T) return;
  const int C = H * hd;
  const std::size_t off =
      (static_cast<std::size_t>(b) * T + warp) * C + static_cast<std::size_t>(h) * hd;
  float s = 0.0f;
  for (int d = lane; d < hd; d += 32) s += to_f(dout[off + d]) * to_f(out[off + d]);
  s = warp_sum(s);
  if (lane == 0) delta[static_cast<std::size_t>(bh) * T + warp] = s;
}

// dq[i] += scale * sum_{j<=i} P_ij (dO_i·V_j - delta_i) K_j. grid and shared memory as the
// forward, plus the block's dO rows [kWarps][hd].
__global__ __launch_bounds__(kWarps * 32) void attention_dq_kernel(
    bf16* dq, const bf16* dout, const float* lse, const float* delta, const bf16* q, const bf16* k,
    const bf16* v, int stride, int T, int H, int hd, float scale) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * ld;
  float* Qs = Vs + kTile * ld;
  float* dOs = Qs + kWarps * hd;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.x * kWarps;
  const int row = q0 + warp;
  const int last_row = min(T - 1, q0 + kWarps - 1);
  const int C = H * hd;
  const std::size_t base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
  float* qrow = Qs + warp * hd;
  float* dorow = dOs + warp * hd;
  float row_lse = 0.0f, row_delta = 0.0f;
  if (row < T) {
    const std::size_t ooff =
        (static_cast<std::size_t>(b) * T + row) * C + static_cast<std::size_t>(h) * hd;
    for (int d = lane; d < hd; d += 32) {
      qrow[d] = to_f(q[base + static_cast<std::size_t>(row) * stride + d]);
      dorow[d] = to_f(dout[ooff + d]);
    }
    row_lse = lse[static_cast<std::size_t>(bh) * T + row];
    row_delta = delta[static_cast<std::size_t>(bh) * T + row];
  }
  float acc[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc[i] = 0.0f;

  for (int j0 = 0; j0 <= last_row; j0 += kTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
      const int jj = idx / hd, d = idx % hd, j = j0 + jj;
      float kv = 0.0f, vv = 0.0f;
      if (j < T) {
        const std::size_t off = base + static_cast<std::size_t>(j) * stride + d;
        kv = to_f(k[off]);
        vv = to_f(v[off]);
      }
      Ks[jj * ld + d] = kv;
      Vs[jj * ld + d] = vv;
    }
    __syncthreads();
    if (row < T && j0 <= row) {
      const int j = j0 + lane;
      float ds = 0.0f;
      if (j <= row) {
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < hd; ++d) {
          qk += qrow[d] * Ks[lane * ld + d];
          dp += dorow[d] * Vs[lane * ld + d];
        }
        const float p = expf(qk * scale - row_lse);
        ds = p * (dp - row_delta) * scale;
      }
      const int keys = min(kTile, row - j0 + 1);
      for (int jj = 0; jj < keys; ++jj) {
        const float dsj = __shfl_sync(kFullMask, ds, jj);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int d = lane + 32 * i;
          if (d < hd) acc[i] += dsj * Ks[jj * ld + d];
        }
      }
    }
  }
  if (row < T) {
    bf16* o = dq + base + static_cast<std::size_t>(row) * stride;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = lane + 32 * i;
      if (d < hd) o[d] = to_bf(to_f(o[d]) + acc[i]);
    }
  }
}

// dv[j] += sum_{i>=j} P_ij dO_i; dk[j] += scale * sum_{i>=j} P_ij (dO_i·V_j - delta_i) Q_i.
// grid (key tiles of kWarps rows, B*H). Shared: Q and dO tiles [kTile][hd+1], the block's K and
// V rows [kWarps][hd], and the tile's lse and delta [kTile].
__global__ __launch_bounds__(kWarps * 32) void attention_dkv_kernel(
    bf16* dk, bf16* dv, const bf16* dout, const float* lse, const float* delta, const bf16* q,
    const bf16* k, const bf16* v, int stride, int T, int H, int hd, float scale) {
  extern __shared__ float smem[];
  const int ld = hd + 1;
  float* Qt = smem;
  float* dOt = Qt + kTile * ld;
  float* Kr = dOt + kTile * ld;
  float* Vr = Kr + kWarps * hd;
  float* lse_t = Vr + kWarps * hd;
  float* delta_t = lse_t + kTile;
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.x * kWarps;
  const int col = k0 + warp;  // this warp's key
  const int C = H * hd;
  const std::size_t base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
  const std::size_t obase = static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hd;
  float* krow = Kr + warp * hd;
  float* vrow = Vr + warp * hd;
  if (col < T)
    for (int d = lane; d < hd; d += 32) {
      krow[d] = to_f(k[base + static_cast<std::size_t>(col) * stride + d]);
      vrow[d] = to_f(v[base + static_cast<std::size_t>(col) * stride + d]);
    }
  float acc_k[kPerLane], acc_v[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) acc_k[i] = acc_v[i] = 0.0f;

  // Queries i >= k0 see at least one of this block's keys.
  for (int i0 = k0; i0 < T; i0 += kTile) {
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * hd; idx += blockDim.x) {
      const int ii = idx / hd, d = idx % hd, i = i0 + ii;
      float qv = 0.0f, gv = 0.0f;
      if (i < T) {
        qv = to_f(q[base + static_cast<std::size_t>(i) * stride + d]);
        gv = to_f(dout[obase + static_cast<std::size_t>(i) * C + d]);
      }
      Qt[ii * ld + d] = qv;
      dOt[ii * ld + d] = gv;
    }
    if (threadIdx.x < kTile) {
      const int i = i0 + threadIdx.x;
      lse_t[threadIdx.x] = i < T ? lse[static_cast<std::size_t>(bh) * T + i] : 0.0f;
      delta_t[threadIdx.x] = i < T ? delta[static_cast<std::size_t>(bh) * T + i] : 0.0f;
    }
    __syncthreads();
    if (col < T && i0 + kTile - 1 >= col) {  // uniform across the warp
      const int i = i0 + lane;
      float p = 0.0f, ds = 0.0f;
      if (i >= col && i < T) {
        float qk = 0.0f, dp = 0.0f;
        for (int d = 0; d < hd; ++d) {
          qk += Qt[lane * ld + d] * krow[d];
          dp += dOt[lane * ld + d] * vrow[d];
        }
        p = expf(qk * scale - lse_t[lane]);
        ds = p * (dp - delta_t[lane]) * scale;
      }
      for (int ii = 0; ii < kTile; ++ii) {
        const float pi = __shfl_sync(kFullMask, p, ii);
        const float dsi = __shfl_sync(kFullMask, ds, ii);
#pragma unroll
        for (int r = 0; r < kPerLane; ++r) {
          const int d = lane + 32 * r;
          if (d < hd) {
            acc_v[r] += pi * dOt[ii * ld + d];
            acc_k[r] += dsi * Qt[ii * ld + d];
          }
        }
      }
    }
  }
  if (col < T) {
    const std::size_t off = base + static_cast<std::size_t>(col) * stride;
#pragma unroll
    for (int r = 0; r < kPerLane; ++r) {
      const int d = lane + 32 * r;
      if (d < hd) {
        if (dk != nullptr) dk[off + d] = to_bf(to_f(dk[off + d]) + acc_k[r]);
        if (dv != nullptr) dv[off + d] = to_bf(to_f(dv[off + d]) + acc_v[r]);
      }
    }
  }
}

void check_shape(int B, int H, int hd) {
  if (hd <= 0 || hd > kAttentionMaxHeadDim)
    throw InputError(fmt::format("CUDA attention supports head dimensions 1..{}, got {}",
                                 kAttentionMaxHeadDim, hd));
  if (static_cast<long long>(B) * H > 65535)
    throw InputError(fmt::format("CUDA attention: batch*heads {}*{} exceeds 65535", B, H));
}

std::size_t forward_smem(int hd) {
  return sizeof(float) * (2 * kTile * (hd + 1) + kWarps * hd);
}
std::size_t dq_smem(int hd) {
  return sizeof(float) * (2 * kTile * (hd + 1) + 2 * kWarps * hd);
}
std::size_t dkv_smem(int hd) {
  return sizeof(float) * (2 * kTile * (hd + 1) + 2 * kWarps * hd + 2 * kTile);
}

// Raises a kernel's dynamic shared-memory limit when it needs more than the default 48 KiB
// (never, up to hd = 128; kept so a larger kAttentionMaxHeadDim fails loudly, not silently).
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    SATURN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

}  // namespace

void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                       const bf16* v, int stride, int B, int T, int H, int hd) {
  check_shape(B, H, hd);
  if (B == 0 || T == 0 || H == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const dim3 grid((T + kWarps - 1) / kWarps, B * H);
  const std::size_t smem = forward_smem(hd);
  allow_smem(attention_forward_kernel, smem);
  attention_forward_kernel<<<grid, kWarps * 32, smem, ctx.stream()>>>(out, lse, q, k, v, stride, T,
                                                                      H, hd, scale);
  SATURN_CUDA_LAUNCH_CHECK("attention_forward_kernel");
}

void attention_backward(Context& ctx, bf16* dq, bf16* dk, bf16* dv, float* delta_scratch,
                        const bf16* dout, const bf16* out, const float* lse, const bf16* q,
                        const bf16* k, const bf16* v, int stride, int B, int T, int H, int hd) {
  check_shape(B, H, hd);
  if (B == 0 || T == 0 || H == 0) return;
  const float scale = 1.0f / sqrtf(static_cast<float>(hd));
  const dim3 grid((T + kWarps - 1) / kWarps, B * H);
  attention_delta_kernel<<<grid, kWarps * 32, 0, ctx.stream()>>>(delta_scratch, dout, out, T, H,
                                                                 hd);
  SATURN_CUDA_LAUNCH_CHECK("attention_delta_kernel");
  if (dq != nullptr) {
    const std::size_t smem = dq_smem(hd);
    allow_smem(attention_dq_kernel, smem);
    attention_dq_kernel<<<grid, kWarps * 32, smem, ctx.stream()>>>(dq, dout, lse, delta_scratch, q,
                                                                   k, v, stride, T, H, hd, scale);
    SATURN_CUDA_LAUNCH_CHECK("attention_dq_kernel");
  }
  if (dk != nullptr || dv != nullptr) {
    const std::size_t smem = dkv_smem(hd);
    allow_smem(attention_dkv_kernel, smem);
    attention_dkv_kernel<<<grid, kWarps * 32, smem, ctx.stream()>>>(
        dk, dv, dout, lse, delta_scratch, q, k, v, stride, T, H, hd, scale);
    SATURN_CUDA_LAUNCH_CHECK("attention_dkv_kernel");
  }
}

}  // namespace saturn::cuda
