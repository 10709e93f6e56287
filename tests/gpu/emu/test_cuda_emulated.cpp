// The CUDA backend's kernels, run by the CPU emulator (emu_cuda.hpp), against the CPU backend:
// the same checks as tests/gpu/test_gpu_ops.cpp (shared inputs rounded to bf16, outputs
// poisoned with NaN, gradients accumulated onto random values), on small shapes. This runs on
// every machine that compiles the backend; it cannot show GPU-only faults (races the emulator's
// scheduling hides, memory-model effects, launch limits, speed).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cuda/ops.hpp"

namespace saturn::cuda {
namespace {

using Vec = std::vector<float>;
using BVec = std::vector<bf16>;

class Emulated : public ::testing::Test {
 protected:
  Vec random(std::size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    Vec v(n);
    for (float& x : v) x = __bfloat162float(__float2bfloat16(d(rng_)));
    return v;
  }
  static BVec to_bf(const Vec& v) {
    BVec b(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) b[i] = __float2bfloat16(v[i]);
    return b;
  }
  static Vec to_f(const BVec& b) {
    Vec v(b.size());
    for (std::size_t i = 0; i < b.size(); ++i) v[i] = __bfloat162float(b[i]);
    return v;
  }
  static BVec poisoned(std::size_t n) { return BVec(n, __float2bfloat16(NAN)); }
  static double rel(const Vec& got, const Vec& want) { return rel_error(got, want); }

 public:
  static double rel_error(const Vec& got, const Vec& want) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(got[i])) return INFINITY;
      num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      den += static_cast<double>(want[i]) * want[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  }

 protected:
  std::mt19937 rng_{2024};
  MemoryPool pool_{"emulated device"};
  Context ctx_{pool_};
};

constexpr double kBf16 = 2e-2, kF32 = 1e-4;

TEST_F(Emulated, LayerNormAndRmsNorm) {
  const int N = 9, C = 300;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Vec x = random(NC, -2, 3), w = random(C), b = random(C), dout = random(NC);
  Vec out(NC), mean(N), rstd(N);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5f);
  BVec xb = to_bf(x), wb = to_bf(w), bb = to_bf(b), ob = poisoned(NC), gb = to_bf(dout);
  Vec m(N, NAN), r(N, NAN);
  layernorm_forward(ctx_, ob.data(), m.data(), r.data(), xb.data(), wb.data(), bb.data(), N, C,
                    1e-5f);
  EXPECT_LT(rel(to_f(ob), out), kBf16);
  EXPECT_LT(rel(m, mean), kF32);
  EXPECT_LT(rel(r, rstd), kF32);
  Vec dinp = random(NC), dw = random(C), db = random(C);
  BVec dinpb = to_bf(dinp);
  Vec dwg = dw, dbg = db;
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                          mean.data(), rstd.data(), N, C);
  layernorm_backward(ctx_, dinpb.data(), dwg.data(), dbg.data(), gb.data(), xb.data(), wb.data(),
                     m.data(), r.data(), N, C);
  EXPECT_LT(rel(to_f(dinpb), dinp), kBf16);
  EXPECT_LT(rel(dwg, dw), kF32);
  EXPECT_LT(rel(dbg, db), kF32);

  Vec rs(N);
  cpu::rmsnorm_forward(out.data(), rs.data(), x.data(), w.data(), N, C, 1e-5f);
  BVec ob2 = poisoned(NC);
  Vec r2(N, NAN);
  rmsnorm_forward(ctx_, ob2.data(), r2.data(), xb.data(), wb.data(), N, C, 1e-5f);
  EXPECT_LT(rel(to_f(ob2), out), kBf16);
  EXPECT_LT(rel(r2, rs), kF32);
  Vec dinp2 = random(NC), dw2 = random(C);
  BVec dinp2b = to_bf(dinp2);
  Vec dw2g = dw2;
  cpu::rmsnorm_backward(dinp2.data(), dw2.data(), dout.data(), x.data(), w.data(), rs.data(), N, C);
  rmsnorm_backward(ctx_, dinp2b.data(), dw2g.data(), gb.data(), xb.data(), wb.data(), r2.data(), N,
                   C);
  EXPECT_LT(rel(to_f(dinp2b), dinp2), kBf16);
  EXPECT_LT(rel(dw2g, dw2), kF32);
}

TEST_F(Emulated, EmbeddingRotaryElementwise) {
  const int B = 2, T = 5, C = 40, V = 11, H = 2, hd = 20;
  const std::size_t N = static_cast<std::size_t>(B) * T, NC = N * C;
  std::vector<std::int32_t> tok(N);
  for (auto& t : tok) t = static_cast<std::int32_t>(rng_() % V);
  const Vec wte = random(static_cast<std::size_t>(V) * C),
            wpe = random(static_cast<std::size_t>(T) * C);
  Vec out(NC);
  cpu::embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  BVec wteb = to_bf(wte), wpeb = to_bf(wpe), ob = poisoned(NC);
  embedding_forward(ctx_, ob.data(), tok.data(), wteb.data(), wpeb.data(), B, T, C);
  EXPECT_LT(rel(to_f(ob), out), kBf16);
  const Vec dout = random(NC);
  Vec dwte = random(wte.size()), dwpe = random(wpe.size());
  Vec dwteg = dwte, dwpeg = dwpe;
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
  BVec gb = to_bf(dout);
  embedding_backward(ctx_, dwteg.data(), dwpeg.data(), gb.data(), tok.data(), B, T, C);
  EXPECT_LT(rel(dwteg, dwte), kF32);
  EXPECT_LT(rel(dwpeg, dwpe), kF32);

  // rotary, in place, on the first H*hd of rows of stride C (= H*hd here)
  Vec rot(NC);
  cpu::rotary_forward(rot.data(), out.data(), B, T, H, hd, C, 10000.0f);
  BVec xb = to_bf(out);
  rotary_forward(ctx_, xb.data(), xb.data(), B, T, H, hd, C, 10000.0f);
  EXPECT_LT(rel(to_f(xb), rot), kBf16);
  Vec dr = random(NC);
  BVec drb = to_bf(dr);
  cpu::rotary_backward(dr.data(), dout.data(), B, T, H, hd, C, 10000.0f);
  rotary_backward(ctx_, drb.data(), gb.data(), B, T, H, hd, C, 10000.0f);
  EXPECT_LT(rel(to_f(drb), dr), kBf16);

  const Vec a = random(NC, -4, 4), b = random(NC, -3, 3);
  BVec ab = to_bf(a), bb = to_bf(b);
  Vec want(NC);
  cpu::gelu_forward(want.data(), a.data(), NC);
  BVec o1 = poisoned(NC);
  gelu_forward(ctx_, o1.data(), ab.data(), NC);
  EXPECT_LT(rel(to_f(o1), want), kBf16);
  Vec dg = random(NC);
  BVec dgb = to_bf(dg);
  cpu::gelu_backward(dg.data(), a.data(), dout.data(), NC);
  gelu_backward(ctx_, dgb.data(), ab.data(), gb.data(), NC);
  EXPECT_LT(rel(to_f(dgb), dg), kBf16);
  cpu::swiglu_forward(want.data(), a.data(), b.data(), NC);
  BVec o2 = poisoned(NC);
  swiglu_forward(ctx_, o2.data(), ab.data(), bb.data(), NC);
  EXPECT_LT(rel(to_f(o2), want), kBf16);
  Vec dga = random(NC), dub = random(NC);
  BVec dgab = to_bf(dga), dubb = to_bf(dub);
  cpu::swiglu_backward(dga.data(), dub.data(), dout.data(), a.data(), b.data(), NC);
  swiglu_backward(ctx_, dgab.data(), dubb.data(), gb.data(), ab.data(), bb.data(), NC);
  EXPECT_LT(rel(to_f(dgab), dga), kBf16);
  EXPECT_LT(rel(to_f(dubb), dub), kBf16);
  cpu::residual_forward(want.data(), a.data(), b.data(), NC);
  BVec o3 = poisoned(NC);
  residual_forward(ctx_, o3.data(), ab.data(), bb.data(), NC);
  EXPECT_LT(rel(to_f(o3), want), kBf16);
}

void attention_case(Emulated& t, std::mt19937& rng, int B, int T, int H, int hd) {
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
               " hd=" + std::to_string(hd));
  const int C = H * hd, stride = 3 * C;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Vec qkv(N * stride), dout(N * C), dqkv(N * stride);
  for (float& x : qkv) x = __bfloat162float(__float2bfloat16(u(rng)));
  for (float& x : dout) x = __bfloat162float(__float2bfloat16(u(rng) / 2));
  for (float& x : dqkv) x = __bfloat162float(__float2bfloat16(u(rng) / 2));
  Vec out(N * C), att(static_cast<std::size_t>(B) * H * T * T), scratch(att.size());
  cpu::attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C,
                         stride, B, T, H, hd);
  BVec qb(qkv.size()), ob(N * C, __float2bfloat16(NAN)), gb(dout.size()), dqb(dqkv.size());
  for (std::size_t i = 0; i < qkv.size(); ++i) qb[i] = __float2bfloat16(qkv[i]);
  for (std::size_t i = 0; i < dout.size(); ++i) gb[i] = __float2bfloat16(dout[i]);
  for (std::size_t i = 0; i < dqkv.size(); ++i) dqb[i] = __float2bfloat16(dqkv[i]);
  Vec lse(static_cast<std::size_t>(B) * H * T, NAN), delta(lse.size(), NAN);
  MemoryPool pool("emulated device");
  Context ctx(pool);
  attention_forward(ctx, ob.data(), lse.data(), qb.data(), qb.data() + C, qb.data() + 2 * C, stride,
                    B, T, H, hd);
  Vec of(ob.size());
  for (std::size_t i = 0; i < ob.size(); ++i) of[i] = __bfloat162float(ob[i]);
  EXPECT_LT(Emulated::rel_error(of, out), kBf16);
  cpu::attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, scratch.data(),
                          dout.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, att.data(),
                          stride, B, T, H, hd);
  attention_backward(ctx, dqb.data(), dqb.data() + C, dqb.data() + 2 * C, delta.data(), gb.data(),
                     ob.data(), lse.data(), qb.data(), qb.data() + C, qb.data() + 2 * C, stride, B,
                     T, H, hd);
  for (int part = 0; part < 3; ++part) {
    Vec g, w;
    for (std::size_t r = 0; r < N; ++r)
      for (int c = 0; c < C; ++c) {
        g.push_back(__bfloat162float(dqb[r * stride + part * C + c]));
        w.push_back(dqkv[r * stride + part * C + c]);
      }
    EXPECT_LT(Emulated::rel_error(g, w), kBf16) << (part == 0 ? "dq" : part == 1 ? "dk" : "dv");
  }
}

TEST_F(Emulated, Attention) {
  attention_case(*this, rng_, 1, 37, 2, 64);  // T crosses a key tile
  attention_case(*this, rng_, 2, 9, 1, 16);   // head dim below a warp
  attention_case(*this, rng_, 1, 33, 1, 128);
  attention_case(*this, rng_, 1, 1, 1, 32);
}

TEST_F(Emulated, CrossEntropyAdamWReductions) {
  const int N = 5, V = 777;
  const Vec logits = random(static_cast<std::size_t>(N) * V, -6, 6);
  std::vector<std::int32_t> tg = {3, -1, 776, 0, 400};
  Vec losses(N), probs(logits.size());
  cpu::softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), tg.data(), N, V);
  BVec lb = to_bf(logits);
  Vec lg(N, NAN);
  crossentropy_forward(ctx_, lg.data(), lb.data(), tg.data(), N, V);
  EXPECT_LT(rel(lg, losses), kF32);
  Vec dl(logits.size(), 0.0f);
  cpu::softmax_crossentropy_backward(dl.data(), probs.data(), tg.data(), 0.25f, N, V);
  crossentropy_backward(ctx_, lb.data(), nullptr, tg.data(), 0.25f, N, V);
  EXPECT_LT(rel(to_f(lb), dl), kBf16);

  const std::size_t n = 3001;
  Vec p = random(n), g = random(n, -0.1f, 0.1f), m = random(n, -0.01f, 0.01f),
      v = random(n, 0, 1e-4f);
  Vec pg = p, mg = m, vg = v;
  BVec pb = poisoned(n);
  const cpu::AdamWParams pc{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
  const AdamWParams pgp{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 2};
  cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, pc, 0.5f);
  adamw_update(ctx_, pg.data(), pb.data(), g.data(), mg.data(), vg.data(), n, pgp, 0.5f);
  EXPECT_LT(rel(pg, p), 1e-6);
  EXPECT_LT(rel(mg, m), 1e-6);
  EXPECT_LT(rel(vg, v), 1e-6);
  EXPECT_LT(rel(to_f(pb), pg), 1e-2);

  EXPECT_NEAR(sum_of_squares(ctx_, g.data(), n), cpu::sum_of_squares(g.data(), n), 1e-9);
  const int R = 300, Cc = 70;
  const Vec src = random(static_cast<std::size_t>(R) * Cc);
  Vec want = random(Cc), got = want;
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < Cc; ++c) want[c] += src[static_cast<std::size_t>(r) * Cc + c];
  BVec sb = to_bf(src);
  column_sum_accumulate(ctx_, got.data(), sb.data(), R, Cc);
  EXPECT_LT(rel(got, want), kF32);
}

}  // namespace
}  // namespace saturn::cuda
