// Every CUDA op against the CPU backend on fresh random inputs: both sides start from the same
// bf16-representable values, outputs are poisoned with NaN before each forward kernel (an
// unwritten element fails), and gradient outputs start from random values so the accumulate
// (+=) contract is checked too. Thresholds by precision (gpu_test_util.hpp).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/exact_sum.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace saturn::gpu_test {
namespace {

class GpuOps : public GpuTest {};

Vec plus(const Vec& a, const Vec& b) {
  Vec r(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) r[i] = a[i] + b[i];
  return r;
}

// Packed records: each row of T tokens cut into records of the given lengths (cycled, the last
// one cut by the row's end); the positions restart at 0 at each record, and the segment ends
// (one past each token's record) follow them, as parallel::TokenStage stages them.
std::vector<std::int32_t> packed_positions(int B, int T, const std::vector<int>& lengths) {
  std::vector<std::int32_t> pos(static_cast<std::size_t>(B) * T);
  std::size_t next = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T;) {
      const int len = lengths[next++ % lengths.size()];
      for (int i = 0; i < len && t < T; ++i, ++t) pos[static_cast<std::size_t>(b) * T + t] = i;
    }
  return pos;
}
std::vector<std::int32_t> segment_ends(int B, int T, const std::vector<std::int32_t>& pos) {
  std::vector<std::int32_t> end(pos.size());
  for (int b = 0; b < B; ++b) {
    const std::size_t row = static_cast<std::size_t>(b) * T;
    end[row + T - 1] = T;
    for (int t = T - 2; t >= 0; --t)
      end[row + t] = pos[row + t + 1] == 0 ? t + 1 : end[row + t + 1];
  }
  return end;
}

TEST_F(GpuOps, Embedding) {
  const int B = 3, T = 37, C = 96, V = 50;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const auto tokens = random_ints(N, 0, V);
  const Vec wte = random_bf16(static_cast<std::size_t>(V) * C);
  const Vec wpe = random_bf16(static_cast<std::size_t>(T) * C);
  for (bool with_wpe : {true, false}) {
    Vec want(N * C);
    cpu::embedding_forward(want.data(), tokens.data(), wte.data(), with_wpe ? wpe.data() : nullptr,
                           B, T, C);
    bf16* out = poisoned_bf16(N * C);
    const std::int32_t* d_tok = upload_i32(tokens);
    cuda::embedding_forward(ctx(), out, d_tok, upload_bf16(wte),
                            with_wpe ? upload_bf16(wpe) : nullptr, B, T, C);
    SATURN_EXPECT_CLOSE(download(out, N * C), want, kTolBf16);
  }
  const Vec dout = random_bf16(N * C);
  Vec dwte = random(static_cast<std::size_t>(V) * C),
      dwpe = random(static_cast<std::size_t>(T) * C);
  float* d_dwte = upload_f32(dwte);
  float* d_dwpe = upload_f32(dwpe);
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  cuda::embedding_backward(ctx(), d_dwte, d_dwpe, upload_bf16(dout), upload_i32(tokens), B, T, C);
  SATURN_EXPECT_CLOSE(download(d_dwte, dwte.size()), dwte, kTolF32);
  SATURN_EXPECT_CLOSE(download(d_dwpe, dwpe.size()), dwpe, kTolF32);
}

// Packed records: the learned positions are looked up, and their gradients gathered, by each
// token's position in its record; a position's rows are summed by the windows of sorted keys, as
// a token's are, so the GPU's gradient equals the CPU's bit for bit (over 256 rows of one
// position: several windows).
TEST_F(GpuOps, EmbeddingOfPackedRecords) {
  const int B = 4, T = 200, C = 48, V = 50;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const auto tokens = random_ints(N, 0, V);
  const auto positions = packed_positions(B, T, {1, 7, 2, 90, 3});
  const Vec wte = random_bf16(static_cast<std::size_t>(V) * C);
  const Vec wpe = random_bf16(static_cast<std::size_t>(T) * C);
  Vec want(N * C);
  cpu::embedding_forward(want.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, 1.0f,
                         positions.data());
  bf16* out = poisoned_bf16(N * C);
  const std::int32_t* d_tok = upload_i32(tokens);
  const std::int32_t* d_pos = upload_i32(positions);
  cuda::embedding_forward(ctx(), out, d_tok, upload_bf16(wte), upload_bf16(wpe), B, T, C, 1.0f,
                          d_pos);
  SATURN_EXPECT_CLOSE(download(out, N * C), want, kTolBf16);
  const Vec dout = random_bf16(N * C);
  Vec dwpe = random(static_cast<std::size_t>(T) * C);
  float* d_dwpe = upload_f32(dwpe);
  cpu::embedding_backward(nullptr, dwpe.data(), dout.data(), tokens.data(), B, T, C, -1, 1.0f,
                          positions.data());
  cuda::embedding_backward(ctx(), nullptr, d_dwpe, upload_bf16(dout), d_tok, B, T, C, -1, 1.0f,
                           d_pos);
  const Vec got = download(d_dwpe, dwpe.size());
  EXPECT_EQ(std::memcmp(got.data(), dwpe.data(), got.size() * sizeof(float)), 0)
      << "the positions' gradient differs from the CPU's";
}

TEST_F(GpuOps, LayerNorm) {
  const int N = 70, C = 300;  // C not a multiple of the block size
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Vec x = random_bf16(NC, -2.0f, 3.0f), w = random_bf16(C), b = random_bf16(C);
  Vec out(NC), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  const bf16* dx_in = upload_bf16(x);
  const bf16* dw = upload_bf16(w);
  bf16* d_out = poisoned_bf16(NC);
  float* d_mean = poisoned_f32(N);
  float* d_rstd = poisoned_f32(N);
  cuda::layernorm_forward(ctx(), d_out, d_mean, d_rstd, dx_in, dw, upload_bf16(b), N, C, 1e-5f);
  SATURN_EXPECT_CLOSE(download(d_out, NC), out, kTolBf16);
  SATURN_EXPECT_CLOSE(download(d_mean, N), mean, kTolF32);
  SATURN_EXPECT_CLOSE(download(d_rstd, N), rstd, kTolF32);

  const Vec dout = random_bf16(NC);
  Vec dinp = random_bf16(NC), dweight = random(C), dbias = random(C);
  bf16* d_dinp = upload_bf16(dinp);
  float* d_dw = upload_f32(dweight);
  float* d_db = upload_f32(dbias);
  cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), x.data(),
                          w.data(), mean.data(), rstd.data(), N, C);
  cuda::layernorm_backward(ctx(), d_dinp, d_dw, d_db, upload_bf16(dout), dx_in, dw, d_mean, d_rstd,
                           N, C);
  SATURN_EXPECT_CLOSE(download(d_dinp, NC), dinp, kTolBf16);
  SATURN_EXPECT_CLOSE(download(d_dw, C), dweight, kTolF32);
  SATURN_EXPECT_CLOSE(download(d_db, C), dbias, kTolF32);
}

TEST_F(GpuOps, RmsNorm) {
  const int N = 45, C = 520;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Vec x = random_bf16(NC, -2.0f, 2.0f), w = random_bf16(C);
  Vec out(NC), rstd(N);
  cpu::rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  const bf16* dx_in = upload_bf16(x);
  const bf16* dw = upload_bf16(w);
  bf16* d_out = poisoned_bf16(NC);
  float* d_rstd = poisoned_f32(N);
  cuda::rmsnorm_forward(ctx(), d_out, d_rstd, dx_in, dw, N, C, 1e-5f);
  SATURN_EXPECT_CLOSE(download(d_out, NC), out, kTolBf16);
  SATURN_EXPECT_CLOSE(download(d_rstd, N), rstd, kTolF32);

  const Vec dout = random_bf16(NC);
  Vec dinp = random_bf16(NC), dweight = random(C);
  bf16* d_dinp = upload_bf16(dinp);
  float* d_dw = upload_f32(dweight);
  cpu::rmsnorm_backward(dinp.data(), dweight.data(), dout.data(), x.data(), w.data(), rstd.data(),
                        N, C);
  cuda::rmsnorm_backward(ctx(), d_dinp, d_dw, upload_bf16(dout), dx_in, dw, d_rstd, N, C);
  SATURN_EXPECT_CLOSE(download(d_dinp, NC), dinp, kTolBf16);
  SATURN_EXPECT_CLOSE(download(d_dw, C), dweight, kTolF32);
}

// The fused residual-add + norm: the same bits as residual_forward followed by the norm's forward
// (res written, out, statistics), in place as the model program calls it (res aliases a), and
// close to the CPU's composition. C = 300: not a multiple of the block.
TEST_F(GpuOps, ResidualNormFused) {
  const int N = 37, C = 300;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Vec a = random_bf16(NC, -2.0f, 2.0f), x = random_bf16(NC, -2.0f, 2.0f);
  const Vec w = random_bf16(C), bias = random_bf16(C);
  const bf16* d_x = upload_bf16(x);
  const bf16* d_w = upload_bf16(w);
  const bf16* d_bias = upload_bf16(bias);
  auto bits = [](const Vec& u, const Vec& v) {
    return u.size() == v.size() && std::memcmp(u.data(), v.data(), u.size() * sizeof(float)) == 0;
  };
  Vec res(NC), out(NC), mean(N), rstd(N);
  cpu::residual_forward(res.data(), a.data(), x.data(), NC);
  {  // layernorm
    cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(),
                           N, C, 1e-5f);
    bf16* sep_res = poisoned_bf16(NC);
    bf16* sep_out = poisoned_bf16(NC);
    float* sep_mean = poisoned_f32(N);
    float* sep_rstd = poisoned_f32(N);
    cuda::residual_forward(ctx(), sep_res, upload_bf16(a), d_x, NC);
    cuda::layernorm_forward(ctx(), sep_out, sep_mean, sep_rstd, sep_res, d_w, d_bias, N, C, 1e-5f);
    bf16* fused_res = upload_bf16(a);  // in place: res aliases a
    bf16* fused_out = poisoned_bf16(NC);
    float* fused_mean = poisoned_f32(N);
    float* fused_rstd = poisoned_f32(N);
    cuda::residual_layernorm_forward(ctx(), fused_res, fused_out, fused_mean, fused_rstd, fused_res,
                                     d_x, d_w, d_bias, N, C, 1e-5f);
    EXPECT_TRUE(bits(download(fused_res, NC), download(sep_res, NC)));
    EXPECT_TRUE(bits(download(fused_out, NC), download(sep_out, NC)));
    EXPECT_TRUE(bits(download(fused_mean, N), download(sep_mean, N)));
    EXPECT_TRUE(bits(download(fused_rstd, N), download(sep_rstd, N)));
    SATURN_EXPECT_CLOSE(download(fused_res, NC), res, kTolBf16);
    SATURN_EXPECT_CLOSE(download(fused_out, NC), out, kTolBf16);
    SATURN_EXPECT_CLOSE(download(fused_rstd, N), rstd, kTolBf16);
  }
  {  // rmsnorm
    cpu::rmsnorm_forward(out.data(), rstd.data(), res.data(), w.data(), N, C, 1e-5f);
    bf16* sep_res = poisoned_bf16(NC);
    bf16* sep_out = poisoned_bf16(NC);
    float* sep_rstd = poisoned_f32(N);
    cuda::residual_forward(ctx(), sep_res, upload_bf16(a), d_x, NC);
    cuda::rmsnorm_forward(ctx(), sep_out, sep_rstd, sep_res, d_w, N, C, 1e-5f);
    bf16* fused_res = upload_bf16(a);
    bf16* fused_out = poisoned_bf16(NC);
    float* fused_rstd = poisoned_f32(N);
    cuda::residual_rmsnorm_forward(ctx(), fused_res, fused_out, fused_rstd, fused_res, d_x, d_w, N,
                                   C, 1e-5f);
    EXPECT_TRUE(bits(download(fused_res, NC), download(sep_res, NC)));
    EXPECT_TRUE(bits(download(fused_out, NC), download(sep_out, NC)));
    EXPECT_TRUE(bits(download(fused_rstd, N), download(sep_rstd, N)));
    SATURN_EXPECT_CLOSE(download(fused_out, NC), out, kTolBf16);
    SATURN_EXPECT_CLOSE(download(fused_rstd, N), rstd, kTolBf16);
  }
}

// The parameter-gradient reductions (no atomics): the same inputs give the same bits again, on
// the emulator under another shuffled block order at every launch (an atomic sum would differ in
// its last bits), and the token embedding's gradient equals the CPU's bit for bit (both add a
// token's rows in position order). Sizes: many row chunks (row_chunks), channels not a multiple
// of the block, and for the embedding more keys than one sort tile (the global bitonic steps),
// a vocabulary of 7 so that runs of equal tokens are long, and a count not a power of two.
TEST_F(GpuOps, ParameterGradientsAreDeterministic) {
  auto bits_equal = [](const Vec& a, const Vec& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
  };
  {
    const int B = 5, T = 1001, C = 72, V = 7;
    const std::size_t N = static_cast<std::size_t>(B) * T;
    const auto tokens = random_ints(N, 0, V);
    const Vec dout = random_bf16(N * C);
    const Vec start = random(static_cast<std::size_t>(V) * C);
    const bf16* d_dout = upload_bf16(dout);
    const std::int32_t* d_tok = upload_i32(tokens);
    Vec want = start;
    cpu::embedding_backward(want.data(), nullptr, dout.data(), tokens.data(), B, T, C);
    Vec first;
    for (int run = 0; run < 2; ++run) {
      float* d_dwte = upload_f32(start);
      cuda::embedding_backward(ctx(), d_dwte, nullptr, d_dout, d_tok, B, T, C);
      const Vec got = download(d_dwte, start.size());
      EXPECT_TRUE(bits_equal(got, want))
          << "embedding gradient differs from the CPU's, run " << run;
      if (run == 0) first = got;
      EXPECT_TRUE(bits_equal(got, first)) << "embedding gradient not repeatable";
    }
  }
  const int N = 1100, C = 300;  // 9 chunks of 128 rows
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Vec x = random_bf16(NC, -2.0f, 3.0f), w = random_bf16(C), dout = random_bf16(NC);
  Vec mean(N), rstd(N), out(NC), rms_rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C,
                         1e-5f);
  cpu::rmsnorm_forward(out.data(), rms_rstd.data(), x.data(), w.data(), N, C, 1e-5f);
  const bf16* d_x = upload_bf16(x);
  const bf16* d_w = upload_bf16(w);
  const bf16* d_dout = upload_bf16(dout);
  const float* d_mean = upload_f32(mean);
  const float* d_rstd = upload_f32(rstd);
  const float* d_rms_rstd = upload_f32(rms_rstd);
  const Vec start_w = random(C), start_b = random(C);
  Vec want_w = start_w, want_b = start_b, want_rms = start_w, want_col = start_b;
  cpu::layernorm_backward(nullptr, want_w.data(), want_b.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  cpu::rmsnorm_backward(nullptr, want_rms.data(), dout.data(), x.data(), w.data(), rms_rstd.data(),
                        N, C);
  for (std::size_t n = 0; n < static_cast<std::size_t>(N); ++n)
    for (std::size_t c = 0; c < static_cast<std::size_t>(C); ++c) want_col[c] += dout[n * C + c];
  Vec first[4];
  for (int run = 0; run < 2; ++run) {
    float* d_dw = upload_f32(start_w);
    float* d_db = upload_f32(start_b);
    float* d_rms = upload_f32(start_w);
    float* d_col = upload_f32(start_b);
    cuda::layernorm_backward(ctx(), nullptr, d_dw, d_db, d_dout, d_x, d_w, d_mean, d_rstd, N, C);
    cuda::rmsnorm_backward(ctx(), nullptr, d_rms, d_dout, d_x, d_w, d_rms_rstd, N, C);
    cuda::column_sum_accumulate(ctx(), d_col, d_dout, N, C);
    const Vec got[4] = {download(d_dw, C), download(d_db, C), download(d_rms, C),
                        download(d_col, C)};
    SATURN_EXPECT_CLOSE(got[0], want_w, kTolF32);
    SATURN_EXPECT_CLOSE(got[1], want_b, kTolF32);
    SATURN_EXPECT_CLOSE(got[2], want_rms, kTolF32);
    SATURN_EXPECT_CLOSE(got[3], want_col, kTolF32);
    for (int i = 0; i < 4; ++i) {
      if (run == 0) first[i] = got[i];
      EXPECT_TRUE(bits_equal(got[i], first[i]))
          << "reduction " << i << " (layernorm dweight, dbias, rmsnorm dweight, column sum) is "
          << "not repeatable";
    }
  }
}

TEST_F(GpuOps, LinearBothLayoutsWithAndWithoutBias) {
  const int N = 77, C = 136, OC = 200;
  for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(layout == cpu::WeightLayout::kOutIn ? "out-in" : "in-out") +
                   (with_bias ? ", bias" : ", no bias"));
      const auto glayout = layout == cpu::WeightLayout::kOutIn ? cuda::WeightLayout::kOutIn
                                                               : cuda::WeightLayout::kInOut;
      const Vec x = random_bf16(static_cast<std::size_t>(N) * C);
      const Vec w = random_bf16(static_cast<std::size_t>(C) * OC);
      const Vec b = random_bf16(OC);
      Vec out(static_cast<std::size_t>(N) * OC);
      cpu::linear_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC,
                          layout);
      const bf16* d_x = upload_bf16(x);
      const bf16* d_w = upload_bf16(w);
      bf16* d_out = poisoned_bf16(out.size());
      cuda::linear_forward(ctx(), d_out, d_x, d_w, with_bias ? upload_bf16(b) : nullptr, N, C, OC,
                           glayout);
      SATURN_EXPECT_CLOSE(download(d_out, out.size()), out, kTolBf16);

      const Vec dout = random_bf16(out.size());
      Vec dinp = random_bf16(x.size()), dweight = random(w.size()), dbias = random(OC);
      bf16* d_dinp = upload_bf16(dinp);
      float* d_dw = upload_f32(dweight);
      float* d_db = upload_f32(dbias);
      cpu::linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), x.data(),
                           w.data(), N, C, OC, layout);
      cuda::linear_backward(ctx(), d_dinp, d_dw, d_db, upload_bf16(dout), d_x, d_w, N, C, OC,
                            glayout);
      SATURN_EXPECT_CLOSE(download(d_dinp, dinp.size()), dinp, kTolBf16);
      // fp32 accumulation of bf16 products: only summation order differs.
      SATURN_EXPECT_CLOSE(download(d_dw, dweight.size()), dweight, 1e-3);
      SATURN_EXPECT_CLOSE(download(d_db, OC), dbias, kTolF32);
    }
  }
}

TEST_F(GpuOps, LinearMisalignedOperands) {
  // Weights at odd element offsets (as inside a flat parameter buffer without padding):
  // cuBLASLt must be told the real alignment, or it fails or reads wrongly.
  const int N = 33, C = 64, OC = 48;
  const Vec x = random_bf16(static_cast<std::size_t>(N) * C);
  const Vec w = random_bf16(static_cast<std::size_t>(OC) * C + 1);
  Vec out(static_cast<std::size_t>(N) * OC);
  cpu::linear_forward(out.data(), x.data(), w.data() + 1, nullptr, N, C, OC,
                      cpu::WeightLayout::kOutIn);
  bf16* d_out = poisoned_bf16(out.size());
  cuda::linear_forward(ctx(), d_out, upload_bf16(x), upload_bf16(w) + 1, nullptr, N, C, OC,
                       cuda::WeightLayout::kOutIn);
  SATURN_EXPECT_CLOSE(download(d_out, out.size()), out, kTolBf16);
}

// Biases and GELU pre-activations at odd element offsets (a flat parameter buffer without
// padding): cuBLASLt's epilogues may refuse pointers below 16-byte alignment, so the backend adds
// them with its own kernels (the emulator refuses such an epilogue as a GPU may).
TEST_F(GpuOps, LinearMisalignedEpiloguePointers) {
  const int N = 17, C = 64, OC = 48;
  const auto kOutIn = cuda::WeightLayout::kOutIn;
  const Vec x = random_bf16(static_cast<std::size_t>(N) * C, -1.0f, 1.0f);
  const Vec w = random_bf16(static_cast<std::size_t>(OC) * C, -0.3f, 0.3f);
  const Vec b = random_bf16(OC + 1);
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  Vec pre(n), act(n);
  cpu::linear_forward(pre.data(), x.data(), w.data(), b.data() + 1, N, C, OC,
                      cpu::WeightLayout::kOutIn);
  cpu::gelu_forward(act.data(), pre.data(), n);
  const bf16* d_x = upload_bf16(x);
  const bf16* d_w = upload_bf16(w);
  const bf16* d_b = upload_bf16(b) + 1;  // 2-byte aligned
  bf16* d_out = poisoned_bf16(n);
  cuda::linear_forward(ctx(), d_out, d_x, d_w, d_b, N, C, OC, kOutIn);
  SATURN_EXPECT_CLOSE(download(d_out, n), pre, kTolBf16);
  // The GELU epilogue's bias and its aux (the kept pre-activation) each misaligned.
  for (const bool misaligned_aux : {false, true}) {
    SCOPED_TRACE(misaligned_aux ? "aux at +1 element" : "bias at +1 element");
    bf16* d_pre = poisoned_bf16(n + 1) + (misaligned_aux ? 1 : 0);
    bf16* d_act = poisoned_bf16(n);
    cuda::linear_gelu_forward(ctx(), d_act, d_pre, d_x, d_w, d_b, N, C, OC, kOutIn);
    SATURN_EXPECT_CLOSE(download(d_pre, n), pre, kTolBf16);
    SATURN_EXPECT_CLOSE(download(d_act, n), act, 2 * kTolBf16);
  }
  // The DGELU epilogue's aux misaligned: the GELU gradient runs as its own kernel.
  const Vec dout = random_bf16(n);
  const std::size_t nc = static_cast<std::size_t>(N) * C;
  const Vec pre_in = random_bf16(nc, -3.0f, 3.0f);
  Vec dact(nc, 0.0f), dpre(nc, 0.0f);
  cpu::linear_backward(dact.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), N, C, OC,
                       cpu::WeightLayout::kOutIn);
  cpu::gelu_backward(dpre.data(), pre_in.data(), dact.data(), nc);
  Vec padded(nc + 1, 0.0f);
  std::copy(pre_in.begin(), pre_in.end(), padded.begin() + 1);
  bf16* d_dpre = poisoned_bf16(nc);
  cuda::linear_dgelu_backward(ctx(), d_dpre, poisoned_bf16(nc), nullptr, nullptr, upload_bf16(dout),
                              d_x, upload_bf16(padded) + 1, d_w, N, C, OC, kOutIn);
  SATURN_EXPECT_CLOSE(download(d_dpre, nc), dpre, 2 * kTolBf16);
}

// ---- fused epilogues (linear.cpp) -----------------------------------------------------------
// Per-element bounds for the GELU epilogues, against the CPU backend (fp32 throughout):
//  - u = 2^-8: bf16's unit roundoff (8 significant bits), the one rounding of the fused output;
//  - the fp32 sum of k bf16 products differs between the two sides (summation order) by at
//    most 2·k·2^-24·Σ|a·b| (the classic γ_k bound on each side);
//  - GELU' is at most 1.13 (tanh approximation), so an error e in GELU's input moves GELU by at
//    most 1.13·e;
//  - cuBLASLt does not document how it evaluates tanh: its epilogue is allowed an absolute tanh
//    error of 2^-10 (tanh.approx.f32's largest is 2^-10.99), i.e. 0.5·|x|·2^-10 in GELU and
//    2^-10·(1 + |x|) in GELU' (times |dact| in the gradient).
// The separate path (linear, rounded to bf16, then the GELU kernel) adds the pre-activation's
// rounding: 1.13·u·|pre| (forward) and u·|dpre| (backward); it is only used when the aux leading
// dimension is not a multiple of 8, and the bounds below say which path they check.
constexpr double kU = 1.0 / 256;
constexpr double kGeluSlope = 1.13;
constexpr double kTanhAllowance = 1.0 / 1024;

// Σ_l |x[n, l]| · |W(l, o)| for each [n, o] of a linear layer (W as the CPU reads it).
Vec abs_products(const Vec& x, const Vec& w, int N, int C, int OC, cpu::WeightLayout layout) {
  Vec ax(x.size()), aw(w.size());
  for (std::size_t i = 0; i < x.size(); ++i) ax[i] = std::abs(x[i]);
  for (std::size_t i = 0; i < w.size(); ++i) aw[i] = std::abs(w[i]);
  Vec out(static_cast<std::size_t>(N) * OC);
  cpu::linear_forward(out.data(), ax.data(), aw.data(), nullptr, N, C, OC, layout);
  return out;
}

::testing::AssertionResult within(const Vec& got, const Vec& want, const Vec& bound,
                                  const char* what) {
  std::size_t bad = 0;
  std::string first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    if (std::isfinite(got[i]) && d <= bound[i]) continue;
    if (bad++ < 5)
      first += " [" + std::to_string(i) + "] " + std::to_string(got[i]) + " vs " +
               std::to_string(want[i]) + " (bound " + std::to_string(bound[i]) + ")";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << want.size()
                                       << " elements outside their bound:" << first;
}

TEST_F(GpuOps, LinearGeluForwardFusedMatchesCpu) {
  const int N = 45, C = 72;
  // OC = 200: fused (GELU_AUX(_BIAS) epilogue); OC = 198: the aux leading dimension is not a
  // multiple of 8, so the op runs as linear + the GELU kernel.
  for (int OC : {200, 198}) {
    const bool fused = OC % 8 == 0;
    for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE("OC " + std::to_string(OC) +
                     (layout == cpu::WeightLayout::kOutIn ? ", out-in" : ", in-out") +
                     (with_bias ? ", bias" : ", no bias"));
        const auto glayout = layout == cpu::WeightLayout::kOutIn ? cuda::WeightLayout::kOutIn
                                                                 : cuda::WeightLayout::kInOut;
        // Inputs scaled so pre-activations spread over GELU's curved range (about ±3).
        const Vec x = random_bf16(static_cast<std::size_t>(N) * C, -1.0f, 1.0f);
        const Vec w = random_bf16(static_cast<std::size_t>(C) * OC, -0.3f, 0.3f);
        const Vec b = random_bf16(OC, -1.0f, 1.0f);
        const std::size_t n = static_cast<std::size_t>(N) * OC;
        Vec pre(n), act(n);
        cpu::linear_forward(pre.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C,
                            OC, layout);
        cpu::gelu_forward(act.data(), pre.data(), n);
        bf16* d_pre = poisoned_bf16(n);
        bf16* d_act = poisoned_bf16(n);
        cuda::linear_gelu_forward(ctx(), d_act, d_pre, upload_bf16(x), upload_bf16(w),
                                  with_bias ? upload_bf16(b) : nullptr, N, C, OC, glayout);
        const Vec got_pre = download(d_pre, n), got_act = download(d_act, n);
        SATURN_EXPECT_CLOSE(got_pre, pre, kTolBf16);
        const Vec s = abs_products(x, w, N, C, OC, layout);
        Vec bound_pre(n), bound_act(n);
        for (std::size_t i = 0; i < n; ++i) {
          const double sum_err = 2.0 * C * std::ldexp(1.0, -24) * s[i];
          const double big = std::max(std::abs(got_act[i]), std::abs(act[i]));
          bound_pre[i] = kU * std::max(std::abs(got_pre[i]), std::abs(pre[i])) + sum_err;
          bound_act[i] = kU * big + kGeluSlope * sum_err + 0.5 * std::abs(pre[i]) * kTanhAllowance +
                         (fused ? 0.0 : kGeluSlope * kU * std::abs(pre[i]));
        }
        EXPECT_TRUE(within(got_pre, pre, bound_pre, "pre-activation"));
        EXPECT_TRUE(within(got_act, act, bound_act, "GELU output"));
      }
    }
  }
}

TEST_F(GpuOps, LinearDGeluBackwardOverwritesAndAccumulates) {
  const int N = 39, OC = 56;
  // C = 96: fused (DGELU epilogue); C = 90: the GELU gradient runs as its own kernel.
  for (int C : {96, 90}) {
    for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
      SCOPED_TRACE("C " + std::to_string(C) +
                   (layout == cpu::WeightLayout::kOutIn ? ", out-in" : ", in-out"));
      const auto glayout = layout == cpu::WeightLayout::kOutIn ? cuda::WeightLayout::kOutIn
                                                               : cuda::WeightLayout::kInOut;
      const std::size_t nc = static_cast<std::size_t>(N) * C;
      const Vec pre = random_bf16(nc, -3.0f, 3.0f);
      const Vec inp = random_bf16(nc);  // GELU(pre) in the model; any values for the check
      const Vec w = random_bf16(static_cast<std::size_t>(C) * OC);
      const Vec dout = random_bf16(static_cast<std::size_t>(N) * OC);
      Vec dweight = random(w.size()), dbias = random(OC);
      float* d_dw = upload_f32(dweight);
      float* d_db = upload_f32(dbias);
      Vec dact(nc, 0.0f), dpre(nc, 0.0f);
      cpu::linear_backward(dact.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                           w.data(), N, C, OC, layout);
      cpu::gelu_backward(dpre.data(), pre.data(), dact.data(), nc);
      bf16* d_dpre = poisoned_bf16(nc);  // overwritten: NaN must not leak through
      bf16* d_scratch = poisoned_bf16(nc);
      cuda::linear_dgelu_backward(ctx(), d_dpre, d_scratch, d_dw, d_db, upload_bf16(dout),
                                  upload_bf16(inp), upload_bf16(pre), upload_bf16(w), N, C, OC,
                                  glayout);
      const Vec got = download(d_dpre, nc);
      // dact's error (summation order) is bounded through Σ|dout|·|W| in dinp's orientation.
      Vec s(nc, 0.0f);
      {
        Vec adout(dout.size()), aw(w.size());
        for (std::size_t i = 0; i < dout.size(); ++i) adout[i] = std::abs(dout[i]);
        for (std::size_t i = 0; i < w.size(); ++i) aw[i] = std::abs(w[i]);
        cpu::linear_backward(s.data(), nullptr, nullptr, adout.data(), inp.data(), aw.data(), N, C,
                             OC, layout);
      }
      Vec bound(nc);
      for (std::size_t i = 0; i < nc; ++i) {
        const double x = pre[i];
        const double th = std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x));
        const double gp = 0.5 * (1 + th) +
                          0.5 * x * (1 - th * th) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
        const double sum_err = 2.0 * OC * std::ldexp(1.0, -24) * s[i];
        const double big = std::max(std::abs(got[i]), std::abs(dpre[i]));
        // Two bf16 roundings on both paths: the unfused one stores dact in bf16 before the
        // GELU kernel, and cuBLASLt's DGELU epilogue errs as much on a GPU (up to 1.5 half-ulps
        // on an H200 with cuBLASLt 13, device check of 2026-12-04), as if it rounded dact too.
        bound[i] = 2.0 * kU * big + std::abs(gp) * sum_err +
                   kTanhAllowance * (1 + std::abs(x)) * std::abs(dact[i]);
      }
      EXPECT_TRUE(within(got, dpre, bound, "GELU input gradient"));
      SATURN_EXPECT_CLOSE(download(d_dw, dweight.size()), dweight, 1e-3);
      SATURN_EXPECT_CLOSE(download(d_db, OC), dbias, kTolF32);
    }
  }
}

TEST_F(GpuOps, LinearBackwardOverwriteIgnoresOldContents) {
  const int N = 50, C = 88, OC = 120;
  for (auto layout : {cpu::WeightLayout::kOutIn, cpu::WeightLayout::kInOut}) {
    const auto glayout = layout == cpu::WeightLayout::kOutIn ? cuda::WeightLayout::kOutIn
                                                             : cuda::WeightLayout::kInOut;
    const Vec x = random_bf16(static_cast<std::size_t>(N) * C);
    const Vec w = random_bf16(static_cast<std::size_t>(C) * OC);
    const Vec dout = random_bf16(static_cast<std::size_t>(N) * OC);
    Vec dinp(x.size(), 0.0f), dweight = random(w.size()), dbias = random(OC);
    float* d_dw = upload_f32(dweight);
    float* d_db = upload_f32(dbias);
    cpu::linear_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), x.data(), w.data(),
                         N, C, OC, layout);
    bf16* d_dinp = poisoned_bf16(x.size());  // beta = 0: the NaN is never read
    cuda::linear_backward(ctx(), d_dinp, d_dw, d_db, upload_bf16(dout), upload_bf16(x),
                          upload_bf16(w), N, C, OC, glayout, cuda::GradWrite::kOverwrite);
    SATURN_EXPECT_CLOSE(download(d_dinp, dinp.size()), dinp, kTolBf16);
    // dweight and dbias still accumulate (+=) onto their random starting values.
    SATURN_EXPECT_CLOSE(download(d_dw, dweight.size()), dweight, 1e-3);
    SATURN_EXPECT_CLOSE(download(d_db, OC), dbias, kTolF32);
  }
}

TEST_F(GpuOps, GemmDescriptorsAreCachedPerProblem) {
  const int N = 24, C = 64, OC = 40;
  const Vec x = random_bf16(static_cast<std::size_t>(N) * C);
  const Vec w = random_bf16(static_cast<std::size_t>(OC) * C + 8);
  const Vec b = random_bf16(OC);
  const bf16* d_x = upload_bf16(x);
  const bf16* d_w = upload_bf16(w);
  const bf16* d_b = upload_bf16(b);
  auto run = [&](int offset, int rows) {
    Vec want(static_cast<std::size_t>(rows) * OC);
    cpu::linear_forward(want.data(), x.data(), w.data() + offset, b.data(), rows, C, OC,
                        cpu::WeightLayout::kOutIn);
    bf16* out = poisoned_bf16(want.size());
    cuda::linear_forward(ctx(), out, d_x, d_w + offset, d_b, rows, C, OC,
                         cuda::WeightLayout::kOutIn);
    SATURN_EXPECT_CLOSE(download(out, want.size()), want, kTolBf16);
  };
  const std::size_t start = ctx().gemm_cache().size();
  run(0, N);
  EXPECT_EQ(ctx().gemm_cache().size(), start + 1);
  run(0, N);  // the same problem again: its cached descriptors and algorithm
  EXPECT_EQ(ctx().gemm_cache().size(), start + 1);
  run(0, N - 5);  // another shape
  EXPECT_EQ(ctx().gemm_cache().size(), start + 2);
  run(1, N);  // the same shape with the weights 2-byte aligned: another algorithm choice
  EXPECT_EQ(ctx().gemm_cache().size(), start + 3);
  run(4, N);  // 8-byte aligned: another again
  EXPECT_EQ(ctx().gemm_cache().size(), start + 4);
  // 16-byte aligned: the hints stop at 16 B, so this is the first problem again (the algorithm
  // cannot depend on where a tensor happens to sit beyond that: reproducible mode).
  run(8, N);
  EXPECT_EQ(ctx().gemm_cache().size(), start + 4);
  run(0, N);  // and back to the first, still correct
  EXPECT_EQ(ctx().gemm_cache().size(), start + 4);
}

TEST_F(GpuOps, EmulatedCublasLtIsStrict) {
  cudaDeviceProp prop{};
  SATURN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (std::string(prop.name) != "Saturn CUDA emulator")
    GTEST_SKIP() << "checks the emulator's cuBLASLt, not " << prop.name;
  cublasLtMatmulDesc_t op = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  // An epilogue the backend does not use is refused, not ignored.
  const cublasLtEpilogue_t relu = CUBLASLT_EPILOGUE_RELU_BIAS;
  EXPECT_NE(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof(relu)),
            CUBLAS_STATUS_SUCCESS);
  // An algorithm chosen for one problem is refused for another.
  cublasLtMatrixLayout_t l8 = nullptr, l16 = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l8, CUDA_R_16BF, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&l16, CUDA_R_16BF, 16, 16, 16), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(
      cublasLtMatmulAlgoGetHeuristic(ctx().lt(), op, l8, l8, l8, l8, pref, 1, &result, &found),
      CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(found, 1);
  bf16* m = alloc<bf16>(256);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_NE(cublasLtMatmul(ctx().lt(), op, &one, m, l16, m, l16, &zero, m, l16, m, l16,
                           &result.algo, nullptr, 0, ctx().stream()),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(ctx().lt(), op, &one, m, l8, m + 64, l8, &zero, m + 128, l8, m + 128, l8,
                           &result.algo, nullptr, 0, ctx().stream()),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(l16);
  cublasLtMatrixLayoutDestroy(l8);
  cublasLtMatmulDescDestroy(op);
}

// Packed records: each token is rotated by its position in its record.
TEST_F(GpuOps, RotaryOfPackedRecords) {
  const int B = 2, T = 70, H = 2, hd = 32, stride = 3 * H * hd;
  const std::size_t n = static_cast<std::size_t>(B) * T * stride;
  const auto positions = packed_positions(B, T, {5, 1, 40, 13});
  const Vec x = random_bf16(n);
  Vec want = x;
  cpu::rotary_forward(want.data(), x.data(), B, T, H, hd, stride, RotaryParams{}, positions.data());
  bf16* d = upload_bf16(x);
  const std::int32_t* d_pos = upload_i32(positions);
  cuda::rotary_forward(ctx(), d, d, B, T, H, hd, stride, RotaryParams{}, d_pos);
  SATURN_EXPECT_CLOSE(download(d, n), want, kTolBf16);
  const Vec dout = random_bf16(n);
  Vec dinp = random_bf16(n);
  bf16* d_dinp = upload_bf16(dinp);
  cpu::rotary_backward(dinp.data(), dout.data(), B, T, H, hd, stride, RotaryParams{},
                       positions.data());
  cuda::rotary_backward(ctx(), d_dinp, upload_bf16(dout), B, T, H, hd, stride, RotaryParams{},
                        d_pos);
  SATURN_EXPECT_CLOSE(download(d_dinp, n), dinp, kTolBf16);
}

TEST_F(GpuOps, RotaryStridedAndInPlace) {
  const int B = 2, T = 19, H = 3, hd = 16, stride = 3 * H * hd;
  const std::size_t n = static_cast<std::size_t>(B) * T * stride;
  const Vec x = random_bf16(n);
  Vec want(n, 0.0f);
  cpu::rotary_forward(want.data(), x.data(), B, T, H, hd, stride, RotaryParams{});
  // Only the first H*hd of each row is rotated; compare those, the rest must stay as it was.
  bf16* d = upload_bf16(x);
  cuda::rotary_forward(ctx(), d, d, B, T, H, hd, stride, RotaryParams{});  // in place
  Vec got = download(d, n);
  Vec want_inplace = x;
  for (std::size_t r = 0; r < static_cast<std::size_t>(B) * T; ++r)
    for (int c = 0; c < H * hd; ++c) want_inplace[r * stride + c] = want[r * stride + c];
  SATURN_EXPECT_CLOSE(got, want_inplace, kTolBf16);

  const Vec dout = random_bf16(n);
  Vec dinp = random_bf16(n);
  bf16* d_dinp = upload_bf16(dinp);
  cpu::rotary_backward(dinp.data(), dout.data(), B, T, H, hd, stride, RotaryParams{});
  cuda::rotary_backward(ctx(), d_dinp, upload_bf16(dout), B, T, H, hd, stride, RotaryParams{});
  SATURN_EXPECT_CLOSE(download(d_dinp, n), dinp, kTolBf16);
}

// Llama 3.1's frequency scaling, with original_max_positions small enough that hd = 64 has pairs
// in all three bands (wavelengths 2π·theta^(2i/hd): below 64/4 kept, above 64/1 divided by the
// factor, interpolated between), at positions past original_max_positions.
TEST_F(GpuOps, RotaryLlama3ScalingMatchesCpu) {
  RotaryParams r;
  r.theta = 500000;
  r.scaling = RopeScalingKind::kLlama3;
  r.factor = 8;
  r.low_freq_factor = 1;
  r.high_freq_factor = 4;
  r.original_max_positions = 64;
  const int B = 2, T = 150, H = 2, hd = 64, stride = 3 * H * hd;
  int bands[3] = {0, 0, 0};  // kept, interpolated, divided
  for (int i = 0; i < hd / 2; ++i) {
    const double wavelen = 6.283185307179586 * std::pow(static_cast<double>(r.theta), 2.0 * i / hd);
    ++bands[wavelen < 64.0 / 4 ? 0 : wavelen > 64.0 ? 2 : 1];
  }
  for (int band : bands) ASSERT_GT(band, 0);

  const std::size_t n = static_cast<std::size_t>(B) * T * stride;
  const Vec x = random_bf16(n);
  Vec want = x;
  cpu::rotary_forward(want.data(), x.data(), B, T, H, hd, stride, r);
  bf16* d_out = upload_bf16(x);  // the columns past H*hd stay as they are
  cuda::rotary_forward(ctx(), d_out, upload_bf16(x), B, T, H, hd, stride, r);
  SATURN_EXPECT_CLOSE(download(d_out, n), want, kTolBf16);

  const Vec dout = random_bf16(n);
  Vec dinp = random_bf16(n);
  bf16* d_dinp = upload_bf16(dinp);
  cpu::rotary_backward(dinp.data(), dout.data(), B, T, H, hd, stride, r);
  cuda::rotary_backward(ctx(), d_dinp, upload_bf16(dout), B, T, H, hd, stride, r);
  SATURN_EXPECT_CLOSE(download(d_dinp, n), dinp, kTolBf16);
}

// The (query tile, key tile) pairs of one head in which some query sees some key: the pairs the
// attention kernels must compute (tiles of 64 rows, as attention.cu's), counted element by
// element rather than by the kernels' tile-range formulas.
// pos: a row's positions of packed records (null: none), where query i sees only keys from
// i - pos[i] on.
std::uint64_t visible_tile_pairs(int T, int window, const std::int32_t* pos = nullptr) {
  constexpr int kTile = 64;
  const int tiles = (T + kTile - 1) / kTile;
  std::uint64_t pairs = 0;
  for (int qt = 0; qt < tiles; ++qt)
    for (int kt = 0; kt < tiles; ++kt) {
      bool any = false;
      for (int i = qt * kTile; i < std::min(T, (qt + 1) * kTile) && !any; ++i)
        for (int j = kt * kTile; j < std::min(T, (kt + 1) * kTile) && !any; ++j)
          any = j <= i && (window == 0 || j > i - window) && (pos == nullptr || j >= i - pos[i]);
      pairs += any ? 1 : 0;
    }
  return pairs;
}

// qkv: rows of q, k, v (stride (H + 2·Hkv)·hd), random in [-2, 2) unless given. Hkv < H:
// grouped-query attention (0: Hkv = H). window > 0: sliding-window attention. Each kernel must
// compute exactly the tiles some query of which sees some key (visible_tile_pairs) per head.
// scale, softcap: Gemma 2's (0: 1/sqrt(hd), no cap).
// positions: packed records ([B*T], null: none), which each query sees alone.
void attention_case(GpuOps& t, int B, int T, int H, int hd, const Vec* given_qkv = nullptr,
                    int Hkv = 0, int window = 0, float scale = 0.0f, float softcap = 0.0f,
                    const std::vector<std::int32_t>* positions = nullptr) {
  if (Hkv == 0) Hkv = H;
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
               " Hkv=" + std::to_string(Hkv) + " hd=" + std::to_string(hd) +
               " window=" + std::to_string(window) + " scale=" + std::to_string(scale) +
               " softcap=" + std::to_string(softcap));
  // The CPU reads the records' bounds from host memory, the GPU from device memory.
  const std::vector<std::int32_t> ends =
      positions != nullptr ? segment_ends(B, T, *positions) : std::vector<std::int32_t>{};
  const AttentionParams params{window, scale > 0.0f ? scale : attention_scale(hd), softcap,
                               positions != nullptr ? positions->data() : nullptr,
                               positions != nullptr ? ends.data() : nullptr};
  AttentionParams device_params = params;
  if (positions != nullptr) {
    device_params.positions = t.upload_i32(*positions);
    device_params.segment_end = t.upload_i32(ends);
  }
  const int C = H * hd, KV = Hkv * hd, stride = C + 2 * KV;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::uint64_t tiles = 0;
  for (int b = 0; b < B; ++b)
    tiles +=
        static_cast<std::uint64_t>(H) *
        visible_tile_pairs(
            T, window,
            positions != nullptr ? positions->data() + static_cast<std::size_t>(b) * T : nullptr);
  const Vec qkv = given_qkv != nullptr ? *given_qkv : t.random_bf16(N * stride, -2.0f, 2.0f);
  Vec out(N * C), att(static_cast<std::size_t>(B) * H * T * T);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + C + KV,
                         stride, B, T, H, Hkv, hd, params);
  const bf16* d_qkv = t.upload_bf16(qkv);
  bf16* d_out = t.poisoned_bf16(N * C);
  float* d_lse = t.poisoned_f32(static_cast<std::size_t>(B) * H * T);
  t.ctx().enable_attention_tile_count();
  cuda::attention_forward(t.ctx(), d_out, d_lse, d_qkv, d_qkv + C, d_qkv + C + KV, stride, B, T, H,
                          Hkv, hd, device_params);
  const auto forward_tiles = t.ctx().attention_tiles();
  EXPECT_EQ(forward_tiles.forward, tiles);
  EXPECT_EQ(forward_tiles.dq + forward_tiles.dkv, 0u);
  {
    // O = P·V with P rounded to bf16 on the GPU: where the terms cancel, the error is absolute
    // (one element of 102400 over bf16's relative bound with an rms-based atol, T = 200,
    // hd = 128, seed 1643585859426690576), so the absolute part is doubled, as for dq, dk, dv.
    const Vec got_out = t.download(d_out, out.size());
    EXPECT_EQ(first_non_finite(got_out), -1);
    EXPECT_LT(rel_error(got_out, out), kTolBf16);
    EXPECT_TRUE(elements_close(got_out, out, kTolBf16, 2 * kTolBf16));
  }
  EXPECT_EQ(first_non_finite(t.download(d_lse, static_cast<std::size_t>(B) * H * T)), -1);

  // Backward from the GPU's own (bf16) forward output, as the model does; the CPU gets the
  // same dout. The CPU backward needs P, which it saved.
  const Vec dout = t.random_bf16(N * C);
  Vec dqkv = t.random_bf16(N * stride);
  Vec scratch(att.size());
  bf16* d_dqkv = t.upload_bf16(dqkv);
  cpu::attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + C + KV, scratch.data(),
                          dout.data(), qkv.data(), qkv.data() + C, qkv.data() + C + KV, att.data(),
                          stride, B, T, H, Hkv, hd, params);
  float* delta = t.poisoned_f32(static_cast<std::size_t>(B) * H * T);
  t.ctx().enable_attention_tile_count();
  cuda::attention_backward(t.ctx(), d_dqkv, d_dqkv + C, d_dqkv + C + KV, delta, t.upload_bf16(dout),
                           d_out, d_lse, d_qkv, d_qkv + C, d_qkv + C + KV, stride, B, T, H, Hkv, hd,
                           device_params);
  const auto backward_tiles = t.ctx().attention_tiles();
  EXPECT_EQ(backward_tiles.forward, 0u);
  EXPECT_EQ(backward_tiles.dq, tiles);
  EXPECT_EQ(backward_tiles.dkv, tiles);  // per kv head, each of its group's query heads
  const Vec got = t.download(d_dqkv, dqkv.size());
  // Compare q, k and v gradients separately (each has its own scale). dq and dk go through
  // dS = P ⊙ (dP − Δ), Δ = rowsum(dO ⊙ O): the GPU's Δ comes from its bf16 output O (as in the
  // model), the CPU's from fp32, and where dP ≈ Δ the difference cancels down to ~2^-9·|dP|:
  // an absolute error, so for these two the bound keeps bf16's relative part (2^-7·|want|) and
  // doubles only the absolute one (2^-6·rms).
  const int part_begin[3] = {0, C, C + KV}, part_width[3] = {C, KV, KV};
  for (int part = 0; part < 3; ++part) {
    Vec g, w;
    for (std::size_t r = 0; r < N; ++r)
      for (int c = 0; c < part_width[part]; ++c) {
        g.push_back(got[r * stride + part_begin[part] + c]);
        w.push_back(dqkv[r * stride + part_begin[part] + c]);
      }
    SCOPED_TRACE(part == 0 ? "dq" : part == 1 ? "dk" : "dv");
    // dv = Σ_queries P^T·dO with P rounded to bf16 on the GPU: where the terms cancel, the
    // error is absolute like dq's and dk's (one element of 17920 over a relative bound with
    // Hkv < H, seed 15664336447355901200; one of 102400 with Hkv = H, T = 200, hd = 128, seed
    // 9399221065307948057), so dv takes their bound too.
    EXPECT_EQ(first_non_finite(g), -1);
    EXPECT_LT(rel_error(g, w), 2 * kTolBf16);
    EXPECT_TRUE(elements_close(g, w, kTolBf16, 2 * kTolBf16));
  }
}

// The kernels work in tiles of 64 rows (16 per warp) and 16-wide tensor-core chunks of the head
// dimension, zero-padded to a multiple of 16; tiles load 8 elements at a time when hd is a
// multiple of 8.
TEST_F(GpuOps, AttentionForwardBackward) {
  attention_case(*this, 2, 67, 3, 64);    // T not a multiple of the tile, B and H > 1
  attention_case(*this, 2, 200, 2, 128);  // the largest head dim, a partial fourth tile
  attention_case(*this, 1, 130, 2, 16);   // one chunk of head dim, three tiles
  attention_case(*this, 1, 64, 1, 72);    // exactly one tile; hd padded to 80 (> 64: 8 chunks)
  attention_case(*this, 2, 37, 3, 40);    // hd padded to 48; one partial tile
  attention_case(*this, 1, 70, 2, 20);    // hd not a multiple of 8: element-wise tile loads
  attention_case(*this, 1, 1, 1, 128);    // one token
  attention_case(*this, 1, 1, 2, 64);
}

// Grouped-query attention: query head h reads kv head h / (H / Hkv); the dk/dv kernel sums a kv
// head's query heads in its fragments (each element still written once, no atomics).
TEST_F(GpuOps, GroupedQueryAttentionForwardBackward) {
  attention_case(*this, 2, 67, 4, 64, nullptr, 2);   // groups of 2, a partial second tile
  attention_case(*this, 1, 130, 4, 16, nullptr, 1);  // multi-query: one kv head, three tiles
  attention_case(*this, 2, 37, 6, 40, nullptr, 3);   // hd padded to 48
  attention_case(*this, 1, 70, 4, 128, nullptr, 2);  // the largest head dim (K, V from shared)
}

// Sliding-window attention (Mistral: query i sees keys i - window < j <= i) against the CPU's,
// grouped-query, with both kernel instantiations (hd 32: 2 chunks; hd 80: > 64), T not a
// multiple of the tile. The kernels skip the tiles outside every window: fewer than causal
// attention's once a query tile's window starts past a whole key tile (window + 64 < T), the
// same when the window covers every key.
TEST_F(GpuOps, SlidingWindowAttentionForwardBackward) {
  struct Case {
    int B, T, H, Hkv, hd, window;
  };
  const Case cases[] = {
      {1, 200, 4, 2, 32, 1},     // each query sees only itself
      {1, 200, 4, 2, 80, 17},    // not a multiple of the 16-key chunks
      {2, 200, 4, 2, 32, 64},    // exactly one tile wide
      {1, 200, 4, 2, 80, 100},   // more than a tile
      {1, 200, 4, 2, 32, 200},   // = T: causal
      {1, 130, 4, 2, 80, 1},     // the other instantiation
      {1, 130, 4, 2, 32, 5},     // rows of a warp that see no key of a tile the warp computes
      {1, 130, 4, 2, 32, 17},    // windows across tile boundaries
      {1, 130, 4, 2, 80, 64},    // window + 64 = 128 < 130: the last query tile skips tile 0
      {1, 130, 4, 2, 32, 100},   // no whole tile outside the windows: masks only
      {1, 130, 4, 2, 80, 1000},  // > T: causal
  };
  for (const Case& c : cases) {
    const std::uint64_t windowed = visible_tile_pairs(c.T, c.window);
    const std::uint64_t causal = visible_tile_pairs(c.T, 0);
    if (c.window + 64 < c.T) {
      EXPECT_LT(windowed, causal) << c.T << " " << c.window;
    } else if (c.window >= c.T) {
      EXPECT_EQ(windowed, causal) << c.T << " " << c.window;
    }
    attention_case(*this, c.B, c.T, c.H, c.hd, nullptr, c.Hkv, c.window);
  }
}

// Packed records (`packing: {cross_attention: false}`): each query sees only the keys of its own
// record, alone and with a sliding window, grouped-query, with both kernel instantiations; the
// kernels skip the tiles no record spans (records shorter than a tile: only the diagonal tiles
// and those a record crossing a tile boundary reaches), and rows of a warp whose records start in
// different chunks.
TEST_F(GpuOps, PackedRecordsAttentionForwardBackward) {
  struct Case {
    int B, T, H, Hkv, hd, window;
    std::vector<int> lengths;
  };
  const Case cases[] = {
      {2, 200, 4, 2, 32, 0, {1, 7, 30, 2, 90, 5}},  // records across tile boundaries
      {1, 200, 4, 2, 80, 0, {1}},                   // every token alone
      {2, 130, 4, 2, 80, 0, {64}},                  // one record per tile
      {1, 130, 4, 2, 32, 0, {200}},                 // one record: causal
      {1, 200, 4, 2, 32, 17, {100, 3, 50}},         // a window inside long records
      {2, 130, 4, 4, 80, 40, {10, 70}},             // the window and the records both bind
  };
  for (const Case& c : cases) {
    const auto positions = packed_positions(c.B, c.T, c.lengths);
    if (c.lengths.front() < 64 && c.lengths.size() == 1) {
      EXPECT_LT(visible_tile_pairs(c.T, c.window, positions.data()),
                visible_tile_pairs(c.T, c.window));
    }
    attention_case(*this, c.B, c.T, c.H, c.hd, nullptr, c.Hkv, c.window, 0.0f, 0.0f, &positions);
  }
}

// Gemma 2: scores scaled by query_pre_attn_scalar^-0.5 and soft-capped (a cap of 2 bends most of
// these scores), alone and with a sliding window, with both kernel instantiations; the same
// tiles as without a cap.
TEST_F(GpuOps, SoftcappedAttentionForwardBackward) {
  attention_case(*this, 2, 67, 4, 32, nullptr, 2, 0, 0.3f, 2.0f);
  attention_case(*this, 1, 130, 4, 80, nullptr, 2, 17, 0.15f, 2.0f);
  attention_case(*this, 1, 200, 2, 64, nullptr, 1, 64, 0.2f, 50.0f);
}

// Keys outside a query's window change nothing in its output, to the bit: the masks, not only
// the tiles skipped, exclude them (here the first keys, seen from inside their own tile by rows
// whose windows start after them, and from later tiles).
TEST_F(GpuOps, SlidingWindowIgnoresKeysOutsideIt) {
  const int B = 1, T = 130, H = 2, hd = 32, C = H * hd, stride = 3 * C, window = 17, changed = 10;
  Vec qkv = random_bf16(static_cast<std::size_t>(T) * stride);
  bf16* d_out = poisoned_bf16(static_cast<std::size_t>(T) * C);
  float* lse = alloc<float>(static_cast<std::size_t>(H) * T);
  const bf16* d1 = upload_bf16(qkv);
  cuda::attention_forward(ctx(), d_out, lse, d1, d1 + C, d1 + 2 * C, stride, B, T, H, H, hd,
                          causal_attention(hd, window));
  const Vec a = download(d_out, static_cast<std::size_t>(T) * C);
  for (int t = 0; t < changed; ++t)
    for (int c = C; c < 3 * C; ++c) qkv[static_cast<std::size_t>(t) * stride + c] += 0.5f;
  const bf16* d2 = upload_bf16(qkv);
  cuda::attention_forward(ctx(), d_out, lse, d2, d2 + C, d2 + 2 * C, stride, B, T, H, H, hd,
                          causal_attention(hd, window));
  const Vec b = download(d_out, static_cast<std::size_t>(T) * C);
  // Row i sees key changed - 1 while i < changed - 1 + window.
  const std::size_t first_unseen = static_cast<std::size_t>(changed - 1 + window) * C;
  bool seen_changed = false;
  for (std::size_t i = 0; i < first_unseen; ++i) seen_changed |= a[i] != b[i];
  EXPECT_TRUE(seen_changed);
  for (std::size_t i = first_unseen; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST_F(GpuOps, AttentionRejectsANegativeWindow) {
  try {
    cuda::attention_forward(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, 3 * 64, 1, 4, 1, 1,
                            64, causal_attention(64, -1));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding window -1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(cuda::attention_backward(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                        nullptr, nullptr, nullptr, nullptr, 3 * 64, 1, 4, 1, 1, 64,
                                        causal_attention(64, -1)),
               InputError);
  EXPECT_THROW(
      cuda::attention_forward(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, 3 * 64, 1, 4, 1,
                              1, 64, AttentionParams{0, 0.125f, -2.0f, nullptr, nullptr}),
      InputError);
}

// The dk/dv kernel's order over a group's query heads is fixed: the same inputs give the same
// bits on every run.
TEST_F(GpuOps, GroupedQueryAttentionBackwardIsDeterministic) {
  const int B = 1, T = 100, H = 4, Hkv = 2, hd = 32, C = H * hd, KV = Hkv * hd, stride = C + 2 * KV;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const Vec qkv = random_bf16(N * stride, -2.0f, 2.0f);
  const bf16* d_qkv = upload_bf16(qkv);
  bf16* d_out = poisoned_bf16(N * C);
  float* lse = poisoned_f32(static_cast<std::size_t>(B) * H * T);
  float* delta = poisoned_f32(static_cast<std::size_t>(B) * H * T);
  cuda::attention_forward(ctx(), d_out, lse, d_qkv, d_qkv + C, d_qkv + C + KV, stride, B, T, H, Hkv,
                          hd, causal_attention(hd));
  const bf16* d_dout = upload_bf16(random_bf16(N * C));
  Vec first;
  for (int run = 0; run < 2; ++run) {
    bf16* d = upload_bf16(Vec(N * stride, 0.0f));
    cuda::attention_backward(ctx(), d, d + C, d + C + KV, delta, d_dout, d_out, lse, d_qkv,
                             d_qkv + C, d_qkv + C + KV, stride, B, T, H, Hkv, hd,
                             causal_attention(hd));
    const Vec got = download(d, N * stride);
    if (run == 0)
      first = got;
    else
      for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], first[i]) << i;
  }
}

// Scores that grow along the keys by 0.4 per key (25.6 per 64-key tile): the forward's online
// softmax must move its reference max on every tile (it does only beyond a margin of e^8, and
// random scores never get there after the first tile), and P is peaked on the last keys.
TEST_F(GpuOps, AttentionRescalesWhenTheMaxGrows) {
  const int B = 1, T = 200, H = 2, hd = 64, C = H * hd, stride = 3 * C;
  Vec qkv = random_bf16(static_cast<std::size_t>(T) * stride, -2.0f, 2.0f);  // v stays random
  const Vec noise = random(static_cast<std::size_t>(T) * stride, -0.02f, 0.02f);
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < 2 * C; ++c) {
      const std::size_t i = static_cast<std::size_t>(t) * stride + c;
      // q·k / sqrt(hd) = hd * 4 * 0.0125 t / 8 = 0.4 t (plus noise). Growth through q, not
      // through |k|: dq = scale·Σ dS K, whose Σ_j dS_ij = 0 cancels exactly only in exact
      // arithmetic (Δ from the bf16 output, dS in bf16), leaves an error ∝ K's common part.
      const float x = c < C ? 4.0f : 0.0125f * static_cast<float>(t) + noise[i];
      qkv[i] = __bfloat162float(__float2bfloat16(x));
    }
  attention_case(*this, B, T, H, hd, &qkv);
}

TEST_F(GpuOps, AttentionIsCausal) {
  // Changing the last token's k and v must not change any earlier output row.
  const int B = 1, T = 50, H = 2, hd = 32, C = H * hd, stride = 3 * C;
  Vec qkv = random_bf16(static_cast<std::size_t>(T) * stride);
  bf16* d_out = poisoned_bf16(static_cast<std::size_t>(T) * C);
  float* lse = alloc<float>(static_cast<std::size_t>(H) * T);
  const bf16* d1 = upload_bf16(qkv);
  cuda::attention_forward(ctx(), d_out, lse, d1, d1 + C, d1 + 2 * C, stride, B, T, H, H, hd,
                          causal_attention(hd));
  const Vec a = download(d_out, static_cast<std::size_t>(T) * C);
  for (int c = C; c < 3 * C; ++c) qkv[static_cast<std::size_t>(T - 1) * stride + c] += 0.5f;
  const bf16* d2 = upload_bf16(qkv);
  cuda::attention_forward(ctx(), d_out, lse, d2, d2 + C, d2 + 2 * C, stride, B, T, H, H, hd,
                          causal_attention(hd));
  const Vec b = download(d_out, static_cast<std::size_t>(T) * C);
  for (std::size_t i = 0; i < static_cast<std::size_t>(T - 1) * C; ++i) ASSERT_EQ(a[i], b[i]) << i;
  bool last_changed = false;
  for (std::size_t i = static_cast<std::size_t>(T - 1) * C; i < a.size(); ++i)
    last_changed |= a[i] != b[i];
  EXPECT_TRUE(last_changed);
}

// The elementwise kernels take 128-bit accesses when every pointer is 16-byte aligned and one
// element at a time otherwise: each op runs at element offset 0 (aligned, vector path with a
// tail: n is odd), 8 (16-byte aligned inside a buffer) and 1 (2-byte aligned: scalar path), and
// with one operand offset alone (3: mixed alignment, scalar path); every result must match the
// CPU, and the vector and scalar paths must give the same bits.
TEST_F(GpuOps, Elementwise) {
  const std::size_t n = 100003;
  const Vec x = random_bf16(n, -4.0f, 4.0f), y = random_bf16(n, -3.0f, 3.0f);
  const Vec dout = random_bf16(n);
  const Vec dx0 = random_bf16(n), dy0 = random_bf16(n);
  // Device copies of v starting `off` elements into a buffer.
  auto at = [&](const Vec& v, std::size_t off) {
    Vec padded(off, 0.0f);
    padded.insert(padded.end(), v.begin(), v.end());
    return upload_bf16(padded) + off;
  };
  auto poisoned_at = [&](std::size_t off) { return poisoned_bf16(n + off) + off; };
  Vec want[8];
  want[0].assign(n, 0.0f);
  cpu::gelu_forward(want[0].data(), x.data(), n);
  want[1] = dx0;
  cpu::gelu_backward(want[1].data(), x.data(), dout.data(), n);
  want[2].assign(n, 0.0f);
  cpu::swiglu_forward(want[2].data(), x.data(), y.data(), n);
  want[3] = dx0;
  want[4] = dy0;
  cpu::swiglu_backward(want[3].data(), want[4].data(), dout.data(), x.data(), y.data(), n);
  want[5].assign(n, 0.0f);
  cpu::residual_forward(want[5].data(), x.data(), y.data(), n);
  want[6] = dx0;
  want[7] = dy0;
  cpu::residual_backward(want[6].data(), want[7].data(), dout.data(), n);
  const char* names[8] = {"gelu forward", "gelu backward",    "swiglu forward", "swiglu dgate",
                          "swiglu dup",   "residual forward", "residual da",    "residual db"};
  Vec first[8];
  // {offset of the inputs, offset of the outputs}
  const std::pair<std::size_t, std::size_t> offsets[] = {{0, 0}, {8, 8}, {1, 1}, {3, 0}};
  for (const auto& [in_off, out_off] : offsets) {
    SCOPED_TRACE(::testing::Message()
                 << "input offset " << in_off << ", output offset " << out_off);
    const bf16* d_x = at(x, in_off);
    const bf16* d_y = at(y, in_off);
    const bf16* d_dout = at(dout, in_off);
    Vec got[8];
    bf16* o = poisoned_at(out_off);
    cuda::gelu_forward(ctx(), o, d_x, n);
    got[0] = download(o, n);
    bf16* dxa = at(dx0, out_off);
    cuda::gelu_backward(ctx(), dxa, d_x, d_dout, n);
    got[1] = download(dxa, n);
    o = poisoned_at(out_off);
    cuda::swiglu_forward(ctx(), o, d_x, d_y, n);
    got[2] = download(o, n);
    bf16* dg = at(dx0, out_off);
    bf16* du = at(dy0, out_off);
    cuda::swiglu_backward(ctx(), dg, du, d_dout, d_x, d_y, n);
    got[3] = download(dg, n);
    got[4] = download(du, n);
    o = poisoned_at(out_off);
    cuda::residual_forward(ctx(), o, d_x, d_y, n);
    got[5] = download(o, n);
    bf16* da = at(dx0, out_off);
    bf16* db = at(dy0, out_off);
    cuda::residual_backward(ctx(), da, db, d_dout, n);
    got[6] = download(da, n);
    got[7] = download(db, n);
    for (int k = 0; k < 8; ++k) {
      SCOPED_TRACE(names[k]);
      SATURN_EXPECT_CLOSE(got[k], want[k], kTolBf16);
      if (in_off == 0 && out_off == 0) first[k] = got[k];
      EXPECT_EQ(std::memcmp(got[k].data(), first[k].data(), n * sizeof(float)), 0)
          << "the vector and scalar paths differ";
    }
  }
  {  // in place, as the model program calls it (out aliases a)
    bf16* acc = at(x, 0);
    cuda::residual_forward(ctx(), acc, acc, at(y, 0), n);
    EXPECT_EQ(std::memcmp(download(acc, n).data(), first[5].data(), n * sizeof(float)), 0);
  }
}

// The strategies' vector ops (vector.cu) and conversions, on both paths (offset 0: 128-bit
// accesses with a tail; offset 1: one element at a time), against host arithmetic, exactly.
TEST_F(GpuOps, VectorOpsBothPaths) {
  const std::size_t n = 1001;
  const Vec a = random(n), b = random(n);
  for (std::size_t off : {std::size_t{0}, std::size_t{1}}) {
    SCOPED_TRACE(::testing::Message() << "offset " << off);
    float* fa = alloc<float>(n + off) + off;
    float* fb = alloc<float>(n + off) + off;
    double* da = alloc<double>(n + off) + off;
    double* db = alloc<double>(n + off) + off;
    SATURN_CUDA_CHECK(cudaMemcpy(fa, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    SATURN_CUDA_CHECK(cudaMemcpy(fb, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cuda::add(ctx(), fa, fb, n);  // fa = a + b
    Vec got = download(fa, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], a[i] + b[i]) << i;
    cuda::widen(ctx(), da, fb, n);       // da = b
    cuda::widen(ctx(), db, fa, n);       // db = a + b
    cuda::add(ctx(), da, db, n);         // da = b + (a + b), in fp64
    cuda::accumulate(ctx(), da, fb, n);  // da += b; fb = 0
    EXPECT_EQ(first_non_finite(download(fb, n)), -1);
    got = download(fb, n);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], 0.0f) << i;
    cuda::round_into(ctx(), fa, da, n);  // fa = fp32(da); da = 0
    got = download(fa, n);
    for (std::size_t i = 0; i < n; ++i) {
      const double want =
          static_cast<double>(b[i]) + static_cast<double>(a[i] + b[i]) + static_cast<double>(b[i]);
      ASSERT_EQ(got[i], static_cast<float>(want)) << i;
    }
    std::vector<double> zeros(n);
    SATURN_CUDA_CHECK(cudaMemcpy(zeros.data(), da, n * sizeof(double), cudaMemcpyDeviceToHost));
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(zeros[i], 0.0) << i;
  }
}

// The classifier: V = 50257 (GPT-2's vocabulary, odd: one element at a time) and 50304 (a multiple
// of 8: 8 logits per 128-bit access); the forward saving each row's log-sum-exp and the backward
// using it (one pass over the logits), and the backward computing its own statistics.
TEST_F(GpuOps, CrossEntropyFused) {
  const int N = 41;
  for (const int V : {50257, 50304}) {
    SCOPED_TRACE(::testing::Message() << "V " << V);
    const Vec logits = random_bf16(static_cast<std::size_t>(N) * V, -6.0f, 6.0f);
    auto targets = random_ints(static_cast<std::size_t>(N), 0, V);
    targets[3] = -1;     // ignored position
    targets[5] = V - 1;  // the last column (the vector path's last vector)
    Vec losses(N), probs(logits.size());
    cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N,
                                      V);
    const float dloss = 1.0f / 37.0f;
    Vec dlogits(logits.size(), 0.0f);
    cpu::softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
    const std::int32_t* d_t = upload_i32(targets);
    for (const bool saved : {true, false}) {
      SCOPED_TRACE(saved ? "backward with the forward's log-sum-exp"
                         : "backward computing its statistics");
      bf16* d_logits = upload_bf16(logits);
      float* d_losses = poisoned_f32(N);
      float* d_lse = saved ? poisoned_f32(N) : nullptr;
      cuda::crossentropy_forward(ctx(), d_losses, d_logits, d_t, N, V, d_lse);
      SATURN_EXPECT_CLOSE(download(d_losses, N), losses, 1e-4);
      // The forward must leave the logits alone.
      SATURN_EXPECT_CLOSE(download(d_logits, logits.size()), logits, 1e-7);
      float* d_losses2 = poisoned_f32(N);
      cuda::crossentropy_backward(ctx(), d_logits, d_losses2, d_t, dloss, N, V, d_lse);
      SATURN_EXPECT_CLOSE(download(d_losses2, N), losses, 1e-4);
      SATURN_EXPECT_CLOSE(download(d_logits, logits.size()), dlogits, kTolBf16);
    }
  }
}

// Gemma 2's final logit soft-capping: the cap against the CPU's, then the loss and the raw
// logits' gradient through it from the same (bf16) capped logits: the cap's derivative 1 - t²
// reads the capped logit, whose bf16 rounding moves it by up to 2^-9 relative where t is near 1.
TEST_F(GpuOps, SoftcappedCrossEntropy) {
  const int N = 23, V = 4104;  // a multiple of 8: the vector path
  const float softcap = 5.0f, dloss = 1.0f / 29.0f;
  const Vec logits = random_bf16(static_cast<std::size_t>(N) * V, -12.0f, 12.0f);
  auto targets = random_ints(static_cast<std::size_t>(N), 0, V);
  targets[2] = -1;
  Vec capped = logits;
  cpu::softcap_forward(capped.data(), capped.size(), softcap);
  bf16* d_logits = upload_bf16(logits);
  cuda::softcap_forward(ctx(), d_logits, logits.size(), softcap);
  const Vec capped_gpu = download(d_logits, logits.size());
  SATURN_EXPECT_CLOSE(capped_gpu, capped, kTolBf16);

  Vec losses(N), lse(N), dlogits = capped_gpu;
  cpu::crossentropy_lse_forward(losses.data(), lse.data(), capped_gpu.data(), targets.data(), N, V);
  cpu::crossentropy_backward_from_lse(dlogits.data(), lse.data(), targets.data(), dloss, N, V,
                                      softcap);
  const std::int32_t* d_t = upload_i32(targets);
  float* d_losses = poisoned_f32(N);
  float* d_lse = poisoned_f32(N);
  cuda::crossentropy_forward(ctx(), d_losses, d_logits, d_t, N, V, d_lse);
  SATURN_EXPECT_CLOSE(download(d_losses, N), losses, 1e-4);
  cuda::crossentropy_backward(ctx(), d_logits, nullptr, d_t, dloss, N, V, d_lse, softcap);
  SATURN_EXPECT_CLOSE(download(d_logits, logits.size()), dlogits, kTolBf16);
}

TEST_F(GpuOps, AdamWMatchesCpu) {
  const std::size_t n = 300001;
  Vec param = random(n), grad = random(n, -0.1f, 0.1f), m = random(n, -0.01f, 0.01f),
      v = random(n, 0.0f, 1e-4f);
  float* d_p = upload_f32(param);
  bf16* d_pb = poisoned_bf16(n);
  float* d_m = upload_f32(m);
  float* d_v = upload_f32(v);
  const float* d_g = upload_f32(grad);
  for (float wd : {0.1f, 0.0f}) {
    for (int step = 1; step <= 3; ++step) {
      const cpu::AdamWParams pc{3e-4f, 0.9f, 0.95f, 1e-8f, wd, step};
      const cuda::AdamWParams pg{3e-4f, 0.9f, 0.95f, 1e-8f, wd, step};
      cpu::adamw_update(param.data(), grad.data(), m.data(), v.data(), n, pc, 0.7f);
      cuda::adamw_update(ctx(), d_p, d_pb, d_g, d_m, d_v, n, pg, 0.7f);
    }
  }
  // fp32 on both sides; the GPU may fuse multiply-adds the CPU does not.
  SATURN_EXPECT_CLOSE(download(d_p, n), param, 1e-6);
  SATURN_EXPECT_CLOSE(download(d_m, n), m, 1e-6);
  SATURN_EXPECT_CLOSE(download(d_v, n), v, 1e-6);
  // The bf16 copy is the rounded master weight, element for element.
  const Vec master = download(d_p, n), copy = download(d_pb, n);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(copy[i], __bfloat162float(__float2bfloat16(master[i]))) << i;
}

TEST_F(GpuOps, SumOfSquaresIsExactAndRepeatable) {
  const std::size_t n = 1234567;
  const Vec x = random(n);
  const float* d = upload_f32(x);
  const double want = cpu::sum_of_squares(x.data(), n);
  const double got = cuda::sum_of_squares(ctx(), d, n);
  EXPECT_NEAR(got, want, 1e-10 * want);
  EXPECT_EQ(cuda::sum_of_squares(ctx(), d, n), got);  // fixed order: bit-identical
  EXPECT_EQ(cuda::sum_of_squares(ctx(), d, 0), 0.0);
}

// The exact sum of squares on the device equals the host's ExactSquareSum word for word: values
// over the whole exponent range, zeros, subnormals, an infinity, and 300000 squares in one bin
// whose 64-bit word wraps many times (the carries).
TEST_F(GpuOps, ExactSquareSumMatchesTheHost) {
  const std::size_t n = 300001;
  Vec x = random(n, -1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-140, 120);
  for (std::size_t i = 0; i < n; i += 3) x[i] = std::ldexp(x[i], exp(rng_));
  x[7] = 0.0f;
  x[11] = -0.0f;
  x[13] = 1e-44f;  // subnormal
  {
    ExactSquareSum want;
    want.add(x.data(), n);
    EXPECT_EQ(cuda::exact_square_sum_words(ctx(), upload_f32(x), n), want.words());
  }
  Vec same(n, std::nextafter(2.0f, 0.0f));  // significand 2^24 - 1: m^2 close to 2^48
  {
    ExactSquareSum want;
    want.add(same.data(), n);
    EXPECT_EQ(cuda::exact_square_sum_words(ctx(), upload_f32(same), n), want.words());
  }
  x[17] = INFINITY;
  ExactSquareSum want;
  want.add(x.data(), n);
  EXPECT_EQ(cuda::exact_square_sum_words(ctx(), upload_f32(x), n), want.words());
  EXPECT_EQ(cuda::exact_square_sum_words(ctx(), upload_f32(x), 0), ExactSquareSum().words());
}

// Conversions and fills on both paths: offset 0 (128-bit accesses, n odd: a tail) and offset 1
// (unaligned: one element at a time).
TEST_F(GpuOps, ConvertAndFill) {
  const std::size_t n = 5001;
  const Vec x = random(n, -100.0f, 100.0f);
  for (std::size_t off : {std::size_t{0}, std::size_t{1}}) {
    SCOPED_TRACE(::testing::Message() << "offset " << off);
    float* d = alloc<float>(n + off) + off;
    SATURN_CUDA_CHECK(cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    bf16* b = poisoned_bf16(n + off) + off;
    cuda::convert(ctx(), b, d, n);
    float* back = poisoned_f32(n + off) + off;
    cuda::convert(ctx(), back, b, n);
    const Vec got = download(back, n);
    for (std::size_t i = 0; i < n; ++i)
      ASSERT_EQ(got[i], __bfloat162float(__float2bfloat16(x[i]))) << i;
    cuda::fill(ctx(), b, 2.5f, n);
    cuda::fill(ctx(), back, -1.25f, n);
    const Vec filled_b = download(b, n), filled_f = download(back, n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(filled_b[i], 2.5f) << i;
      ASSERT_EQ(filled_f[i], -1.25f) << i;
    }
  }
}

// ---- the caching allocator and the accounting ------------------------------------------------
TEST_F(GpuOps, AllocatorCachesAndAccounts) {
  const std::size_t before_in_use = pool().in_use();
  const std::size_t reserved0 = allocator().reserved();
  void* first = nullptr;
  {
    Buffer<float> a(pool(), (3u << 20) + 5, "activations");  // rounded to 2 MiB granules
    first = a.data();
    // The pool counts what the block really occupies (2 MiB granules at this size).
    EXPECT_EQ(pool().in_use(), before_in_use + cuda::CachingDeviceAllocator::round(a.bytes()));
    EXPECT_EQ(cuda::CachingDeviceAllocator::round(a.bytes()), std::size_t{14} << 20);
    EXPECT_EQ(allocator().reserved(), reserved0 + cuda::CachingDeviceAllocator::round(a.bytes()));
    a.zero();
    const Vec z = download(a.data(), 1000);
    EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](float v) { return v == 0.0f; }));
  }
  EXPECT_EQ(pool().in_use(), before_in_use);
  EXPECT_GT(allocator().cached(), 0u);
  Buffer<float> b(pool(), (3u << 20) + 5, "activations");
  EXPECT_EQ(b.data(), first);  // the cached block comes back
  EXPECT_EQ(allocator().cached(), 0u);
}

TEST_F(GpuOps, PoolCapacityIsEnforcedBeforeTheDevice) {
  MemoryPool small("cuda:0 (capped)", 1 << 20, &allocator());
  Buffer<float> a(small, 1000, "parameters");
  EXPECT_THROW(Buffer<float>(small, 1 << 20, "activations"), OutOfMemoryError);
  EXPECT_EQ(small.in_use(), cuda::CachingDeviceAllocator::round(a.bytes()));
}

TEST_F(GpuOps, ErrorsNameTheCall) {
  try {
    SATURN_CUDA_CHECK(cudaSetDevice(1 << 20));  // no such device; not a sticky error
    FAIL() << "expected CudaError";
  } catch (const cuda::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice"), std::string::npos) << e.what();
  }
  cudaGetLastError();
  SATURN_CUDA_CHECK(cudaSetDevice(0));
  try {
    cuda::attention_forward(ctx(), nullptr, nullptr, nullptr, nullptr, nullptr, 3 * 256, 1, 4, 1, 1,
                            256, causal_attention(256));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("head dimensions"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace saturn::gpu_test
