// Causal attention on tensor cores, flash-style (FlashAttention-2's algorithm): no [T, T] matrix
// in global memory. The forward keeps a running max and sum per query row (online softmax) and
// saves only the row's log-sum-exp; the backward recomputes the probabilities from it.
//
// Tiling: a block of kWarps = 4 warps owns kTile = 64 rows (queries in the forward and dq, keys
// in dk/dv), 16 per warp (one WMMA tile high), and walks the other side in tiles of 64, staged in
// shared memory as bf16 [64][hd_pad + 8] (hd_pad = hd rounded up to 16, zero-padded, so any
// hd <= 128 works; rows past T are zeros and masked). Products run as bf16 m16n16k16 WMMA with
// fp32 accumulation (tensor_core.cuh); a warp only ever touches its own 16 rows of the staging
// buffers, so between its steps a __syncwarp suffices. Causal masking skips whole tiles and
// 16-wide chunks that no row of a warp can see.
//
// Sliding window (window > 0, Mistral): query i sees keys i - window < j <= i. The same masks
// with a lower bound, and the same skipping at both ends: the forward and dq kernels start at
// the first key tile the block's first query sees, the dk/dv kernel stops after the last query
// tile that sees the block's last key, and warps skip tiles and chunks outside their rows'
// windows. A window >= T is plain causal attention (the launches pass 0). Tests can count the
// (query tile, key tile) pairs each kernel computes (Context::enable_attention_tile_count).
//
// Packed records (AttentionParams::positions and segment_end): query i sees only the keys of its
// own record, from i - positions[i] on, and key j only the queries before segment_end[j]. These
// bounds only grow along a row, as a window's do, so they combine with the window's (the tighter
// wins) and the same skipping applies: tiles wholly before a block's first record, or after the
// last query of its last key's record, are never computed.
//
// Scores are scale * q·k (AttentionParams: 1/sqrt(hd), or Gemma 2's query_pre_attn_scalar^-0.5),
// soft-capped as softcap * tanh(score / softcap) when softcap > 0 (Gemma 2): the forward caps
// the visible scores before the online softmax, and the backward recomputes them with the cap's
// derivative 1 - tanh², which multiplies P in dS = P (dP - delta).
//
// WMMA's accumulator layout is opaque (which lane holds which element is unspecified), and the
// softmax works on rows: the scores S are stored to shared fp32 [16][64 + 4] per warp for the
// row-wise softmax. The forward keeps each warp's Q rows and its output accumulator O in
// fragments; the online softmax's per-row rescale of O needs the rows, so it goes through a
// 16x16 shared stage, and only when a row's max grows by more than kRescaleThreshold (below it
// the stale max stays the reference: the same softmax, exactly), i.e. rarely after the first
// tile. The backward's dq, dk, dv are plain sums in fragments; Q and dO (dq kernel), K and V
// (dk/dv kernel, hd <= 64) rows stay in fragments too. P (forward, dv) and dS (dq, dk) are
// rounded to bf16 for their tensor-core products, as in FlashAttention-2. mma.sync with its
// documented register layout would save the S round trip: a later step, once a GPU can check a
// hand-coded layout (the emulator proves these kernels do not depend on any).
//
// Deterministic: no atomics. dq is owned by query tiles (attention_dq_kernel), dk and dv by key
// tiles (attention_dkv_kernel), each element written once by one warp.
//
// Grouped-query attention: H query heads share Hkv key/value heads in groups of H / Hkv (query
// head h reads kv head h / group). The forward and dq kernels run per query head and read their
// group's K and V; the dk/dv kernel runs per key/value head and walks the query tiles of each of
// its group's query heads in turn, accumulating in the same fragments: a kv head's gradient is
// the sum over its query heads, still written once, by one warp, in a fixed order.
#include <fmt/format.h>

#include <cmath>

#include "runtime/backend/cuda/common.cuh"
#include "runtime/backend/cuda/ops.hpp"
#include "runtime/backend/cuda/tensor_core.cuh"

namespace saturn::cuda {
namespace {

using namespace detail;

constexpr int kWarps = 4;
constexpr int kThreadsPerBlock = kWarps * 32;
constexpr int kRows = kMma;            // rows per warp
constexpr int kTile = kWarps * kRows;  // rows per block, and keys (queries) per staged tile
constexpr int kChunks = kTile / kMma;  // 16-wide chunks of a tile
constexpr int kLdS = kTile + 4;        // fp32 score staging [rows][kLdS]
constexpr int kLdP = kTile + 8;        // bf16 P / dS [rows][kLdP]
constexpr int kPerLane = kTile / 2;    // score columns per lane: two lanes per row
constexpr int kMaxHdChunks = kAttentionMaxHeadDim / kMma;

__host__ __device__ inline int padded_head_dim(int hd) {
  return (hd + kMma - 1) / kMma * kMma;
}
// bf16 tiles [kTile][hd_pad + 8]: the padding keeps ldm a multiple of 8 (WMMA) and moves each
// row by 16 bytes across the banks.
__host__ __device__ inline int bf16_ld(int hd) {
  return padded_head_dim(hd) + 8;
}

// Query i sees key j when attention_first_key(i) <= j <= i (attention_params.hpp: the window's
// and the record's bounds): key j is seen by the queries [j, attention_query_end(j)). The masks
// test these ranges as column bounds computed once per row and tile (a per-element test of the
// window costs registers: the forward spilled on sm_80). pos and end: the row's positions and
// segment ends (null without packed records); rows and keys past T take the window's bounds only
// (they see and are seen by nothing).
__host__ __device__ inline int first_key(int i, int window, int T, const std::int32_t* pos) {
  return attention_first_key(i, window, i < T ? pos : nullptr);
}
__host__ __device__ inline int query_end(int j, int window, int T, const std::int32_t* end) {
  return attention_query_end(j, window, T, j < T ? end : nullptr);
}
// Row b's part of a per-token array of the [B, T] batch (null stays null).
__device__ inline const std::int32_t* row_of(const std::int32_t* per_token, int b, int T) {
  return per_token != nullptr ? per_token + static_cast<std::size_t>(b) * T : nullptr;
}
// A score as the softmax sees it: scale * q·k, soft-capped (softcap * tanh(z / softcap), Gemma
// 2) when softcap > 0. *dcap receives the cap's derivative 1 - tanh², 1 without a cap.
__device__ __forceinline__ float capped_score(float qk, float scale, float softcap, float* dcap) {
  const float z = qk * scale;
  if (softcap <= 0.0f) {
    *dcap = 1.0f;
    return z;
  }
  const float t = tanhf(z / softcap);
  *dcap = 1.0f - t * t;
  return t * softcap;
}

// Counts one (query tile, key tile) pair the block computes, when a test asked for it: one
// integer atomic per block and tile (not float data: the results stay deterministic).
__device__ inline void count_tile(unsigned long long* tiles) {
  if (tiles != nullptr && threadIdx.x == 0) atomicAdd(tiles, 1ull);
}

// Carves the dynamic shared memory into regions, each 128-byte aligned (WMMA needs 32); the
// host runs the same sequence without memory (null base: null regions) to size the launch.
// Pointer arithmetic, not integers, on the device: the compiler keeps knowing the regions are
// shared memory (shared loads rather than generic ones).
class Carver {
 public:
  __host__ __device__ explicit Carver(char* base) : base_(base) {}
  template <typename T>
  __host__ __device__ T* take(std::size_t count) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + 127) / 128 * 128;
    return p;
  }
  __host__ __device__ std::size_t used() const { return used_; }

 private:
  char* base_;
  std::size_t used_ = 0;
};

// The forward: Q (read once into fragments), K and V tiles, the scores' staging, P (whose rows
// double as each warp's 16x16 fp32 stage: kRows * kLdP bf16 >= 16 * 16 floats).
struct ForwardShared {
  bf16 *q, *k, *v, *p;
  float* s;
  int ld;
  __host__ __device__ ForwardShared(char* base, int hd, std::size_t* bytes = nullptr) {
    ld = bf16_ld(hd);
    Carver c(base);
    q = c.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    k = c.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    v = c.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    s = c.take<float>(static_cast<std::size_t>(kTile) * kLdS);
    p = c.take<bf16>(static_cast<std::size_t>(kTile) * kLdP);
    if (bytes != nullptr) *bytes = c.used();
  }
};
static_assert(kRows * kLdP * 2 >= kMma * kMma * 4 && kRows * kLdP * 2 % 32 == 0,
              "a warp's P rows hold its 16x16 fp32 stage, 32-byte aligned");

// The backward kernels: the block's own rows (a, b: q and dO for dq, k and v for dk/dv), the
// walked tile's (c, d), the scores/dP staging, P and dS, a 16x16 fp32 epilogue stage per warp,
// and the lse and delta of 64 query rows.
struct BackwardShared {
  bf16 *a, *b, *c, *d, *p, *ds;
  float *sd, *stage, *lse, *delta;
  int ld;
  __host__ __device__ BackwardShared(char* base, int hd, std::size_t* bytes = nullptr) {
    ld = bf16_ld(hd);
    Carver cv(base);
    a = cv.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    b = cv.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    c = cv.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    d = cv.take<bf16>(static_cast<std::size_t>(kTile) * ld);
    sd = cv.take<float>(static_cast<std::size_t>(kTile) * kLdS);
    p = cv.take<bf16>(static_cast<std::size_t>(kTile) * kLdP);
    ds = cv.take<bf16>(static_cast<std::size_t>(kTile) * kLdP);
    stage = cv.take<float>(static_cast<std::size_t>(kWarps) * kMma * kMma);
    lse = cv.take<float>(kTile);
    delta = cv.take<float>(kTile);
    if (bytes != nullptr) *bytes = cv.used();
  }
};

// Rows [row0, row0 + kTile) of a [T, *] bf16 matrix (row pitch `pitch`, starting at src) into a
// bf16 tile [kTile][ld]: zeros past T and in the columns [hd, hd_pad). The whole block calls.
// 16-byte loads (8 elements) when every row starts 16-byte aligned and hd is a multiple of 8
// (the models' head dims), else element by element; the condition is the same for every thread.
__device__ void load_tile(bf16* tile, int ld, const bf16* src, std::size_t pitch, int row0, int T,
                          int hd) {
  const int hd_pad = padded_head_dim(hd);
  if (hd % 8 == 0 && pitch % 8 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0) {
    const int vectors = hd_pad / 8;  // per row, the zero padding included
    for (int idx = threadIdx.x; idx < kTile * vectors; idx += blockDim.x) {
      const int r = idx / vectors, d = idx % vectors * 8, row = row0 + r;
      uint4 x{0u, 0u, 0u, 0u};
      if (row < T && d < hd)
        x = *reinterpret_cast<const uint4*>(src + static_cast<std::size_t>(row) * pitch + d);
      *reinterpret_cast<uint4*>(tile + r * ld + d) = x;
    }
    return;
  }
  const bf16 zero = to_bf(0.0f);
  for (int idx = threadIdx.x; idx < kTile * hd_pad; idx += blockDim.x) {
    const int r = idx / hd_pad, d = idx % hd_pad, row = row0 + r;
    tile[r * ld + d] = row < T && d < hd ? src[static_cast<std::size_t>(row) * pitch + d] : zero;
  }
}

// rows [16][n_end * 16) = A (16 x hd) · Bᵀ, A as the warp's fragments of its 16 rows (a[c]: head
// dims [16c, 16c + 16)), B given as rows (keys or queries) [n * 16 + ..][hd] (ldb): chunks
// [n_begin, n_end) only, stored to out (fp32, kLdS). The warp calls.
template <int kHdChunks>
__device__ void scores(float* out, const FragA (&a)[kHdChunks], const bf16* B, int ldb,
                       int hd_chunks, int n_begin, int n_end) {
  for (int n = n_begin; n < n_end; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int c = 0; c < kHdChunks; ++c) {
      if (c >= hd_chunks) break;
      FragBCol fb;  // Bᵀ[d][j] = B[j][d]: B's rows read as a column-major matrix
      wmma::load_matrix_sync(fb, B + n * kMma * ldb + c * kMma, ldb);
      wmma::mma_sync(acc, a[c], fb, acc);
    }
    wmma::store_matrix_sync(out + n * kMma, acc, kLdS, wmma::mem_row_major);
  }
}

// The same with A read from shared memory (lda) chunk by chunk: fewer registers.
__device__ void scores(float* out, const bf16* A, int lda, const bf16* B, int ldb, int hd_chunks,
                       int n_begin, int n_end) {
  for (int n = n_begin; n < n_end; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int c = 0; c < hd_chunks; ++c) {
      FragA fa;
      FragBCol fb;
      wmma::load_matrix_sync(fa, A + c * kMma, lda);
      wmma::load_matrix_sync(fb, B + n * kMma * ldb + c * kMma, ldb);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    wmma::store_matrix_sync(out + n * kMma, acc, kLdS, wmma::mem_row_major);
  }
}

// The warp's 16 rows of a bf16 tile (lda) as fragments, one per 16 head dims. The warp calls.
template <int kHdChunks>
__device__ void load_rows(FragA (&a)[kHdChunks], const bf16* A, int lda, int hd_chunks) {
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c)
    if (c < hd_chunks) wmma::load_matrix_sync(a[c], A + c * kMma, lda);
}

// acc[c] += P (16 x 64, bf16, kLdP; chunks [n_begin, n_end)) · X (64 rows x hd, ldx) for the
// head-dimension chunks c < hd_chunks; each chunk of P is loaded once. The warp calls.
template <int kHdChunks>
__device__ void accumulate_product(FragAcc (&acc)[kHdChunks], const bf16* P, const bf16* X, int ldx,
                                   int hd_chunks, int n_begin, int n_end) {
  for (int n = n_begin; n < n_end; ++n) {
    FragA fp;
    wmma::load_matrix_sync(fp, P + n * kMma, kLdP);
#pragma unroll
    for (int c = 0; c < kHdChunks; ++c) {
      if (c >= hd_chunks) break;
      FragBRow fx;
      wmma::load_matrix_sync(fx, X + n * kMma * ldx + c * kMma, ldx);
      wmma::mma_sync(acc[c], fp, fx, acc[c]);
    }
  }
}

// dst[row0 + r][d] += factor * acc (16 rows x hd) for rows < T, d < hd, through the warp's
// 16x16 stage (the accumulator's layout is opaque). The warp calls.
template <int kHdChunks>
__device__ void add_rows(bf16* dst, std::size_t pitch, const FragAcc (&acc)[kHdChunks],
                         float* stage, int row0, int T, int hd, float factor) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c) {
    if (c * kMma >= hd) break;
    wmma::store_matrix_sync(stage, acc[c], kMma, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < kMma * kMma; e += 32) {
      const int r = e / kMma, d = c * kMma + e % kMma, row = row0 + r;
      if (row < T && d < hd) {
        bf16& x = dst[static_cast<std::size_t>(row) * pitch + d];
        x = to_bf(to_f(x) + factor * stage[e]);
      }
    }
    __syncwarp();  // the stage is read before the next chunk overwrites it
  }
}

// ---- forward ---------------------------------------------------------------------------------
// The online softmax's reference max moves only when a row's scores exceed it by more than this
// (natural-log units; FlashAttention-4's conditional rescaling): below it, P = exp(s − m) ≤ e^8
// stays well inside bf16 and fp32, and O and the row sum share the same reference, so the
// result is the same softmax. It makes the rescale of O — a round trip through shared memory,
// since the fragment layout is opaque — rare: typically only after the first tile.
constexpr float kRescaleThreshold = 8.0f;

// grid (query tiles of kTile rows, B*H), kThreadsPerBlock threads; shared memory ForwardShared.
// The warp's Q rows and its O accumulator stay in fragments. tiles: null, or the counter of
// key tiles computed (Context::enable_attention_tile_count).
template <int kHdChunks>
__global__ __launch_bounds__(kThreadsPerBlock) void attention_forward_kernel(
    bf16* out, float* lse, const bf16* q, const bf16* k, const bf16* v, int stride, int T, int H,
    int group, int hd, float scale, float softcap, int window, const std::int32_t* positions,
    unsigned long long* tiles) {
  extern __shared__ __align__(128) float smem[];
  const ForwardShared sh(reinterpret_cast<char*>(smem), hd);
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const std::int32_t* pos = row_of(positions, b, T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd_chunks = padded_head_dim(hd) / kMma;
  const int q0 = blockIdx.x * kTile;
  const int w0 = q0 + warp * kRows;           // the warp's first query
  const int w_last = min(w0 + kRows, T) - 1;  // and last (< w0: the warp has none)
  const std::size_t base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
  const std::size_t kv_base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h / group) * hd;
  load_tile(sh.q, sh.ld, q + base, stride, q0, T, hd);
  __syncthreads();

  float* Sw = sh.s + warp * kRows * kLdS;
  bf16* Pw = sh.p + warp * kRows * kLdP;
  // The rescale's and the epilogue's 16x16 fp32 stage: the warp's P rows, free at those times.
  float* stage = reinterpret_cast<float*>(Pw);
  FragA qf[kHdChunks];
  FragAcc o[kHdChunks];
  if (w0 < T) load_rows(qf, sh.q + warp * kRows * sh.ld, sh.ld, hd_chunks);
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c) wmma::fill_fragment(o[c], 0.0f);
  // Two lanes per row: lane owns row r's columns [half * 32, half * 32 + 32) of the scores; both
  // keep the row's reference max and sum (in units of the scaled scores).
  const int r = lane / 2, half = lane % 2, row = w0 + r;
  const int row_first = first_key(row, window, T, pos);  // the row sees keys [row_first, row]
  float m_ref = -INFINITY, l_run = 0.0f;

  // The block's last query sees keys < key_end, its first query none before first_key(q0): the
  // key tiles before that key's are skipped.
  const int key_end = min(T, q0 + kTile);
  const int key_begin = first_key(q0, window, T, pos) / kTile * kTile;
  const int w_first = first_key(w0, window, T, pos);  // the warp's first row sees the earliest keys
  for (int j0 = key_begin; j0 < key_end; j0 += kTile) {
    __syncthreads();  // the previous tile is consumed
    load_tile(sh.k, sh.ld, k + kv_base, stride, j0, T, hd);
    load_tile(sh.v, sh.ld, v + kv_base, stride, j0, T, hd);
    __syncthreads();
    count_tile(tiles);
    // Warp-uniform: no row of the warp sees this tile (all its keys after the warp's last row,
    // or before its first row's window or record).
    if (w0 >= T || j0 > w_last || j0 + kTile <= w_first) continue;
    // Chunks [n_begin, key_chunks) hold the keys the warp's rows see; the rest is masked (and
    // the scores of the chunks below n_begin are not computed: the masks never read them).
    const int n_begin = w_first > j0 ? (w_first - j0) / kMma : 0;
    const int key_chunks = min(kChunks, (w_last - j0) / kMma + 1);
    scores(Sw, qf, sh.k, sh.ld, hd_chunks, n_begin, key_chunks);
    __syncwarp();
    // The columns [col_lo, col_hi] of the tile the row sees (none when col_lo > col_hi).
    const int col_lo = row_first - j0;
    const int col_hi = row < T ? min(row - j0, key_chunks * kMma - 1) : -1;

    // The lane's visible scores become the softmax's (scaled, capped), in place.
    float tile_max = -INFINITY;
    for (int i = 0; i < kPerLane; ++i) {
      const int col = half * kPerLane + i;
      if (col >= col_lo && col <= col_hi) {
        float dcap;
        float& x = Sw[r * kLdS + col];
        x = capped_score(x, scale, softcap, &dcap);
        tile_max = fmaxf(tile_max, x);
      }
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(kFullMask, tile_max, 1));
    // A row may see no key of this tile (a window's edge, or past T): tile_max = -inf, no growth,
    // and its P below is all zeros (never exp(-inf - -inf)). A row's first visible key makes its
    // reference finite (any finite max exceeds -inf + threshold); corr = exp(-inf) = 0 there, on
    // an O row and sum that are still exactly zero.
    const bool grow = row < T && tile_max > m_ref + kRescaleThreshold;
    const bool had_keys = m_ref > -INFINITY;  // O's row holds earlier tiles' products
    const float corr = grow ? expf(m_ref - tile_max) : 1.0f;
    if (grow) {
      m_ref = tile_max;
      l_run *= corr;
    }
    // Only rows that had keys need O rescaled: with none, O's row is zero (and so on the warp's
    // first tile, whichever tile that is).
    if (warp_max(grow && had_keys ? 1.0f : 0.0f) > 0.0f) {
#pragma unroll
      for (int c = 0; c < kHdChunks; ++c) {
        if (c >= hd_chunks) break;
        wmma::store_matrix_sync(stage, o[c], kMma, wmma::mem_row_major);
        __syncwarp();
        for (int i = 0; i < kMma / 2; ++i) stage[r * kMma + half * kMma / 2 + i] *= corr;
        __syncwarp();
        wmma::load_matrix_sync(o[c], stage, kMma, wmma::mem_row_major);
        __syncwarp();  // every lane has read the stage before it is written again
      }
    }
    float sum = 0.0f;
    for (int i = 0; i < kPerLane; ++i) {
      const int col = half * kPerLane + i;
      float p = 0.0f;
      if (col >= col_lo && col <= col_hi) p = to_f(to_bf(expf(Sw[r * kLdS + col] - m_ref)));
      // The sum takes P as rounded for P·V: the weights used are the weights normalised.
      Pw[r * kLdP + col] = to_bf(p);
      sum += p;
    }
    l_run += sum + __shfl_xor_sync(kFullMask, sum, 1);
    __syncwarp();  // P is written
    accumulate_product(o, Pw, sh.v, sh.ld, hd_chunks, n_begin, key_chunks);
  }
  if (w0 >= T) return;  // warp-uniform
  __syncwarp();         // the last P·V has read P: its rows become the stage
  const int C = H * hd;
  const float inv = row < T ? 1.0f / l_run : 0.0f;
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c) {
    if (c >= hd_chunks) break;
    wmma::store_matrix_sync(stage, o[c], kMma, wmma::mem_row_major);
    __syncwarp();
    if (row < T) {
      bf16* orow =
          out + (static_cast<std::size_t>(b) * T + row) * C + static_cast<std::size_t>(h) * hd;
      for (int i = 0; i < kMma / 2; ++i) {
        const int d = c * kMma + half * kMma / 2 + i;
        if (d < hd) orow[d] = to_bf(stage[r * kMma + half * kMma / 2 + i] * inv);
      }
    }
    __syncwarp();
  }
  if (row < T && half == 0) lse[static_cast<std::size_t>(bh) * T + row] = m_ref + logf(l_run);
}

// ---- backward --------------------------------------------------------------------------------
// delta[b,h,t] = sum_d dout[t,d] * out[t,d]: the row sum of P ⊙ dP that the softmax backward
// subtracts. One warp per row, kDeltaWarps rows per block.
constexpr int kDeltaWarps = 8;
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

// lse and delta of the query rows [i0, i0 + kTile) into shared memory (0 past T).
__device__ void load_row_stats(float* lse_s, float* delta_s, const float* lse, const float* delta,
                               std::size_t bh_off, int i0, int T) {
  for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
    const bool in = i0 + i < T;
    lse_s[i] = in ? lse[bh_off + i0 + i] : 0.0f;
    delta_s[i] = in ? delta[bh_off + i0 + i] : 0.0f;
  }
}

// dq[i] += scale * sum_{j<=i} P_ij (dP_ij - delta_i) c_ij K_j, dP = dO·Vᵀ (j inside the
// window), c_ij the soft-cap's derivative (1 without one).
// grid (query tiles of kTile rows, B*H); shared BackwardShared with a = Q, b = dO of the block's
// rows, c = K, d = V tiles. Walks the forward's key tiles, with the forward's masks.
template <int kHdChunks>
__global__ __launch_bounds__(kThreadsPerBlock) void attention_dq_kernel(
    bf16* dq, const bf16* dout, const float* lse, const float* delta, const bf16* q, const bf16* k,
    const bf16* v, int stride, int T, int H, int group, int hd, float scale, float softcap,
    int window, const std::int32_t* positions, unsigned long long* tiles) {
  extern __shared__ __align__(128) float smem[];
  const BackwardShared sh(reinterpret_cast<char*>(smem), hd);
  const int bh = blockIdx.y, b = bh / H, h = bh % H;
  const std::int32_t* pos = row_of(positions, b, T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd_chunks = padded_head_dim(hd) / kMma;
  const int q0 = blockIdx.x * kTile;
  const int w0 = q0 + warp * kRows, w_last = min(w0 + kRows, T) - 1;
  const int C = H * hd;
  const std::size_t base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
  const std::size_t kv_base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h / group) * hd;
  const std::size_t obase = static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hd;
  load_tile(sh.a, sh.ld, q + base, stride, q0, T, hd);
  load_tile(sh.b, sh.ld, dout + obase, C, q0, T, hd);
  load_row_stats(sh.lse, sh.delta, lse, delta, static_cast<std::size_t>(bh) * T, q0, T);

  __syncthreads();
  float* SDw = sh.sd + warp * kRows * kLdS;
  bf16* dSw = sh.ds + warp * kRows * kLdP;
  const int r = lane / 2, half = lane % 2, row = w0 + r;
  const int row_first = first_key(row, window, T, pos);
  FragA qf[kHdChunks], dof[kHdChunks];  // the warp's Q and dO rows, for every key tile
  if (w0 < T) {
    load_rows(qf, sh.a + warp * kRows * sh.ld, sh.ld, hd_chunks);
    load_rows(dof, sh.b + warp * kRows * sh.ld, sh.ld, hd_chunks);
  }
  FragAcc acc[kHdChunks];
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c) wmma::fill_fragment(acc[c], 0.0f);

  // The forward's key range, tile skipping and chunk bounds (see there).
  const int key_end = min(T, q0 + kTile);
  const int key_begin = first_key(q0, window, T, pos) / kTile * kTile;
  const int w_first = first_key(w0, window, T, pos);
  for (int j0 = key_begin; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile(sh.c, sh.ld, k + kv_base, stride, j0, T, hd);
    load_tile(sh.d, sh.ld, v + kv_base, stride, j0, T, hd);
    __syncthreads();
    count_tile(tiles);
    if (w0 >= T || j0 > w_last || j0 + kTile <= w_first) continue;  // warp-uniform
    const int n_begin = w_first > j0 ? (w_first - j0) / kMma : 0;
    const int key_chunks = min(kChunks, (w_last - j0) / kMma + 1);
    const float row_lse = sh.lse[warp * kRows + r], row_delta = sh.delta[warp * kRows + r];
    scores(SDw, qf, sh.c, sh.ld, hd_chunks, n_begin, key_chunks);
    __syncwarp();
    const int col_lo = row_first - j0;  // the forward's mask
    const int col_hi = row < T ? min(row - j0, key_chunks * kMma - 1) : -1;
    float p[kPerLane];  // P, times the cap's derivative (dS's factors but dP - delta)
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = half * kPerLane + i;
      float dcap = 0.0f;
      p[i] = col >= col_lo && col <= col_hi
                 ? expf(capped_score(SDw[r * kLdS + col], scale, softcap, &dcap) - row_lse)
                 : 0.0f;
      p[i] *= dcap;
    }
    __syncwarp();  // the scores are read before dP overwrites them
    scores(SDw, dof, sh.d, sh.ld, hd_chunks, n_begin, key_chunks);
    __syncwarp();
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int col = half * kPerLane + i;
      dSw[r * kLdP + col] = to_bf(p[i] * (SDw[r * kLdS + col] - row_delta));
    }
    __syncwarp();
    accumulate_product(acc, dSw, sh.c, sh.ld, hd_chunks, n_begin, key_chunks);
  }
  if (w0 < T) add_rows(dq + base, stride, acc, sh.stage + warp * kMma * kMma, w0, T, hd, scale);
}

// dv[j] += sum_{i>=j} P_ij dO_i; dk[j] += scale * sum_{i>=j} P_ij (dP_ij - delta_i) c_ij Q_i (i
// inside j's window, c_ij the soft-cap's derivative), summed over the query heads of the kv head's
// group. grid (key tiles of kTile rows, B*Hkv); shared BackwardShared with a = K, b = V of the
// block's keys, c = Q, d = dO tiles. The warp's scores are transposed: 16 keys x 64 queries.
template <int kHdChunks>
__global__ __launch_bounds__(kThreadsPerBlock) void attention_dkv_kernel(
    bf16* dk, bf16* dv, const bf16* dout, const float* lse, const float* delta, const bf16* q,
    const bf16* k, const bf16* v, int stride, int T, int H, int group, int hd, float scale,
    float softcap, int window, const std::int32_t* segment_end, unsigned long long* tiles) {
  extern __shared__ __align__(128) float smem[];
  const BackwardShared sh(reinterpret_cast<char*>(smem), hd);
  const int Hkv = H / group;
  const int bg = blockIdx.y, b = bg / Hkv, g = bg % Hkv;
  const std::int32_t* seg_end = row_of(segment_end, b, T);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd_chunks = padded_head_dim(hd) / kMma;
  const int k0 = blockIdx.x * kTile;
  const int w0 = k0 + warp * kRows;  // the warp's first key
  // The queries that see the block's keys end before q_end, the warp's before w_q_end: the query
  // tiles from q_end on are skipped (with a window or packed records).
  const int q_end = query_end(min(k0 + kTile, T) - 1, window, T, seg_end);
  const int w_q_end = query_end(min(w0 + kRows, T) - 1, window, T, seg_end);
  const int C = H * hd;
  const std::size_t kv_base =
      static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(g) * hd;
  load_tile(sh.a, sh.ld, k + kv_base, stride, k0, T, hd);
  load_tile(sh.b, sh.ld, v + kv_base, stride, k0, T, hd);

  __syncthreads();
  // The warp's K and V rows stay in fragments only for hd <= 64: at hd 128 they with dk and dv
  // would exceed the registers (ptxas), so they are read from shared memory at each tile.
  constexpr int kKeep = kHdChunks <= 4 ? kHdChunks : 1;
  FragA kf[kKeep], vf[kKeep];
  const bf16* Kw = sh.a + warp * kRows * sh.ld;
  const bf16* Vw = sh.b + warp * kRows * sh.ld;
  if (kKeep == kHdChunks && w0 < T) {
    load_rows(kf, Kw, sh.ld, hd_chunks);
    load_rows(vf, Vw, sh.ld, hd_chunks);
  }
  float* SDw = sh.sd + warp * kRows * kLdS;
  bf16* Pw = sh.p + warp * kRows * kLdP;
  bf16* dSw = sh.ds + warp * kRows * kLdP;
  const int r = lane / 2, half = lane % 2, key = w0 + r;
  // The key is seen by the queries [key, key_q_end).
  const int key_q_end = query_end(key, window, T, seg_end);
  FragAcc acc_k[kHdChunks], acc_v[kHdChunks];
#pragma unroll
  for (int c = 0; c < kHdChunks; ++c) {
    wmma::fill_fragment(acc_k[c], 0.0f);
    wmma::fill_fragment(acc_v[c], 0.0f);
  }

  // The group's query heads in order, each over the query tiles from k0 to q_end (whose queries
  // see at least one of this block's keys).
  for (int h = g * group; h < (g + 1) * group; ++h) {
    const int bh = b * H + h;
    const std::size_t base =
        static_cast<std::size_t>(b) * T * stride + static_cast<std::size_t>(h) * hd;
    const std::size_t obase =
        static_cast<std::size_t>(b) * T * C + static_cast<std::size_t>(h) * hd;
    for (int i0 = k0; i0 < q_end; i0 += kTile) {
      __syncthreads();
      load_tile(sh.c, sh.ld, q + base, stride, i0, T, hd);
      load_tile(sh.d, sh.ld, dout + obase, C, i0, T, hd);
      load_row_stats(sh.lse, sh.delta, lse, delta, static_cast<std::size_t>(bh) * T, i0, T);
      __syncthreads();
      count_tile(tiles);
      // Warp-uniform: the warp has no key, or none of its keys' windows reaches this tile.
      if (w0 >= T || i0 >= w_q_end) continue;
      // Query chunks the warp's keys can see: from its first key on, up to w_q_end.
      const int n_begin = w0 > i0 ? (w0 - i0) / kMma : 0;
      const int n_end = min(kChunks, (w_q_end - i0 + kMma - 1) / kMma);
      if constexpr (kKeep == kHdChunks) {
        scores(SDw, kf, sh.c, sh.ld, hd_chunks, n_begin, n_end);
      } else {
        scores(SDw, Kw, sh.ld, sh.c, sh.ld, hd_chunks, n_begin, n_end);
      }
      __syncwarp();
      // The columns [col_lo, col_hi] of the tile whose queries see the key: the forward's mask,
      // transposed (none past T). col_lo >= n_begin * kMma: the warp's keys start a chunk.
      const int col_lo = key - i0;
      const int col_hi = key < T ? min(key_q_end - 1 - i0, n_end * kMma - 1) : -1;
      float p[kPerLane];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int col = half * kPerLane + i;
        const bool seen = col >= col_lo && col <= col_hi;
        float dcap = 0.0f;
        p[i] = seen ? expf(capped_score(SDw[r * kLdS + col], scale, softcap, &dcap) - sh.lse[col])
                    : 0.0f;
        Pw[r * kLdP + col] = to_bf(p[i]);
        p[i] *= dcap;  // dS's factors but dP - delta
      }
      __syncwarp();  // the scores are read before dPᵀ overwrites them
      if constexpr (kKeep == kHdChunks) {
        scores(SDw, vf, sh.d, sh.ld, hd_chunks, n_begin, n_end);
      } else {
        scores(SDw, Vw, sh.ld, sh.d, sh.ld, hd_chunks, n_begin, n_end);
      }
      __syncwarp();
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) {
        const int col = half * kPerLane + i;
        dSw[r * kLdP + col] = to_bf(p[i] * (SDw[r * kLdS + col] - sh.delta[col]));
      }
      __syncwarp();
      accumulate_product(acc_v, Pw, sh.d, sh.ld, hd_chunks, n_begin, n_end);
      accumulate_product(acc_k, dSw, sh.c, sh.ld, hd_chunks, n_begin, n_end);
    }
  }
  if (w0 < T) {
    float* stage = sh.stage + warp * kMma * kMma;
    if (dk != nullptr) add_rows(dk + kv_base, stride, acc_k, stage, w0, T, hd, scale);
    if (dv != nullptr) add_rows(dv + kv_base, stride, acc_v, stage, w0, T, hd, 1.0f);
  }
}

void check_shape(int B, int H, int Hkv, int hd, const AttentionParams& params) {
  if (params.window < 0)
    throw InputError(fmt::format(
        "CUDA attention: sliding window {} < 0 (valid: 0, full causal attention, or the number "
        "of keys each query sees)",
        params.window));
  if ((params.positions == nullptr) != (params.segment_end == nullptr))
    throw InputError("CUDA attention: packed records need both positions and segment ends");
  if (!(params.scale > 0.0f) || !std::isfinite(params.scale) || !(params.softcap >= 0.0f) ||
      !std::isfinite(params.softcap))
    throw InputError(fmt::format(
        "CUDA attention: score scale {} and softcap {} (valid: a finite scale > 0, a finite "
        "softcap >= 0)",
        params.scale, params.softcap));
  if (hd <= 0 || hd > kAttentionMaxHeadDim)
    throw InputError(fmt::format("CUDA attention supports head dimensions 1..{}, got {}",
                                 kAttentionMaxHeadDim, hd));
  if (Hkv < 1 || H % Hkv != 0)
    throw InputError(
        fmt::format("CUDA attention: {} key/value heads do not divide {} query heads", Hkv, H));
  if (static_cast<long long>(B) * H > 65535)
    throw InputError(fmt::format("CUDA attention: batch*heads {}*{} exceeds 65535", B, H));
}

std::size_t forward_smem(int hd) {
  std::size_t bytes = 0;
  const ForwardShared layout(nullptr, hd, &bytes);
  (void)layout;
  return bytes;
}
std::size_t backward_smem(int hd) {
  std::size_t bytes = 0;
  const BackwardShared layout(nullptr, hd, &bytes);
  (void)layout;
  return bytes;
}

// Raises a kernel's dynamic shared-memory limit above the default 48 KiB (most head dims need
// it: 53-76 KiB at hd = 64, up to 108 KiB at hd = 128; sm_80 allows 163 KiB, sm_90 227 KiB).
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes) {
  if (bytes > 48 * 1024)
    SATURN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
}

// A window covering every key is plain causal attention: 0 for the kernels (their windowed
// bounds then never apply, and window + j cannot overflow).
int kernel_window(int window, int T) {
  return window >= T ? 0 : window;
}

// One kernel's tile counter, or null when not counting.
unsigned long long* tile_counter(Context& ctx, Context::AttentionKernel kernel) {
  unsigned long long* counters = ctx.attention_tile_counters();
  return counters != nullptr ? counters + kernel : nullptr;
}

template <int kHdChunks>
void launch_backward(Context& ctx, bf16* dq, bf16* dk, bf16* dv, const float* delta,
                     const bf16* dout, const float* lse, const bf16* q, const bf16* k,
                     const bf16* v, int stride, int B, int T, int H, int Hkv, int hd, float scale,
                     float softcap, int window, const std::int32_t* positions,
                     const std::int32_t* segment_end) {
  const int tiles = (T + kTile - 1) / kTile, group = H / Hkv;
  const std::size_t smem = backward_smem(hd);
  if (dq != nullptr) {
    allow_smem(attention_dq_kernel<kHdChunks>, smem);
    attention_dq_kernel<kHdChunks><<<dim3(tiles, B * H), kThreadsPerBlock, smem, ctx.stream()>>>(
        dq, dout, lse, delta, q, k, v, stride, T, H, group, hd, scale, softcap, window, positions,
        tile_counter(ctx, Context::kAttentionDq));
    SATURN_CUDA_LAUNCH_CHECK("attention_dq_kernel");
  }
  if (dk != nullptr || dv != nullptr) {
    allow_smem(attention_dkv_kernel<kHdChunks>, smem);
    attention_dkv_kernel<kHdChunks><<<dim3(tiles, B * Hkv), kThreadsPerBlock, smem, ctx.stream()>>>(
        dk, dv, dout, lse, delta, q, k, v, stride, T, H, group, hd, scale, softcap, window,
        segment_end, tile_counter(ctx, Context::kAttentionDkv));
    SATURN_CUDA_LAUNCH_CHECK("attention_dkv_kernel");
  }
}

}  // namespace

void attention_forward(Context& ctx, bf16* out, float* lse, const bf16* q, const bf16* k,
                       const bf16* v, int stride, int B, int T, int H, int Hkv, int hd,
                       const AttentionParams& params) {
  check_shape(B, H, Hkv, hd, params);
  const int group = H / Hkv;
  if (B == 0 || T == 0 || H == 0) return;
  const int window = kernel_window(params.window, T);
  const float scale = params.scale, softcap = params.softcap;
  const dim3 grid((T + kTile - 1) / kTile, B * H);
  const std::size_t smem = forward_smem(hd);
  unsigned long long* tiles = tile_counter(ctx, Context::kAttentionForward);
  // The fragment arrays are sized at compile time (registers on a GPU): two sizes cover hd.
  if (padded_head_dim(hd) <= 64) {
    allow_smem(attention_forward_kernel<4>, smem);
    attention_forward_kernel<4><<<grid, kThreadsPerBlock, smem, ctx.stream()>>>(
        out, lse, q, k, v, stride, T, H, group, hd, scale, softcap, window, params.positions,
        tiles);
  } else {
    allow_smem(attention_forward_kernel<kMaxHdChunks>, smem);
    attention_forward_kernel<kMaxHdChunks><<<grid, kThreadsPerBlock, smem, ctx.stream()>>>(
        out, lse, q, k, v, stride, T, H, group, hd, scale, softcap, window, params.positions,
        tiles);
  }
  SATURN_CUDA_LAUNCH_CHECK("attention_forward_kernel");
}

void attention_backward(Context& ctx, bf16* dq, bf16* dk, bf16* dv, float* delta_scratch,
                        const bf16* dout, const bf16* out, const float* lse, const bf16* q,
                        const bf16* k, const bf16* v, int stride, int B, int T, int H, int Hkv,
                        int hd, const AttentionParams& params) {
  check_shape(B, H, Hkv, hd, params);
  if (B == 0 || T == 0 || H == 0) return;
  const int window = kernel_window(params.window, T);
  const float scale = params.scale, softcap = params.softcap;
  const dim3 delta_grid((T + kDeltaWarps - 1) / kDeltaWarps, B * H);
  attention_delta_kernel<<<delta_grid, kDeltaWarps * 32, 0, ctx.stream()>>>(delta_scratch, dout,
                                                                            out, T, H, hd);
  SATURN_CUDA_LAUNCH_CHECK("attention_delta_kernel");
  // The fragment arrays are sized at compile time (registers on a GPU): two sizes cover hd.
  if (padded_head_dim(hd) <= 64)
    launch_backward<4>(ctx, dq, dk, dv, delta_scratch, dout, lse, q, k, v, stride, B, T, H, Hkv, hd,
                       scale, softcap, window, params.positions, params.segment_end);
  else
    launch_backward<kMaxHdChunks>(ctx, dq, dk, dv, delta_scratch, dout, lse, q, k, v, stride, B, T,
                                  H, Hkv, hd, scale, softcap, window, params.positions,
                                  params.segment_end);
}

}  // namespace saturn::cuda
