// CPU kernels against straightforward double-precision reference forwards written here: (a) the
// fp32 forward must match the reference, (b) the fp32 backward must match central differences
// of the reference objective L = sum(out * R), plus the contract's extra promises (+=, null
// gradients, causality, strided layouts, in-place rotary, determinism).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <numbers>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/backend/cpu/vecmath.hpp"
#include "runtime/core/error.hpp"

namespace saturn::cpu {
namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;

// Deterministic on every platform (std distributions are not): splitmix64.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  double uniform(double lo, double hi) {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  Vec vec(std::size_t n, double lo = -1.0, double hi = 1.0) {
    Vec v(n);
    for (float& x : v) x = static_cast<float>(uniform(lo, hi));
    return v;
  }
  int32_t index(int n) { return static_cast<int32_t>(uniform(0.0, n)) % n; }

 private:
  std::uint64_t state_;
};

DVec to_double(const Vec& v) {
  return DVec(v.begin(), v.end());
}

double dot(const DVec& a, const DVec& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// max |got - want| relative to max |want|: one scale for the whole tensor, since fp32 errors
// scale with the tensor's magnitude, not with each (possibly tiny) element.
double rel_err(const Vec& got, const DVec& want) {
  EXPECT_EQ(got.size(), want.size());
  double max_diff = 0.0, max_want = 1e-12;
  for (std::size_t i = 0; i < want.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
    max_want = std::max(max_want, std::fabs(want[i]));
  }
  return max_diff / max_want;
}

// Central differences of objective(x) in double (the objective is the double reference).
DVec numeric_grad(const Vec& x, const std::function<double(const DVec&)>& objective,
                  double h = 1e-4) {
  DVec xp = to_double(x);
  DVec grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double orig = xp[i];
    xp[i] = orig + h;
    const double up = objective(xp);
    xp[i] = orig - h;
    const double down = objective(xp);
    xp[i] = orig;
    grad[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

constexpr double kFwdTol = 1e-5;
constexpr double kGradTol = 1e-4;

void expect_doubled(const Vec& once, const Vec& twice) {
  ASSERT_EQ(once.size(), twice.size());
  for (std::size_t i = 0; i < once.size(); ++i) {
    EXPECT_NEAR(twice[i], 2.0f * once[i], 1e-5f * (1.0f + std::fabs(once[i]))) << "at " << i;
  }
}

bool bit_equal(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs a test body with a given OpenMP (and hence OpenBLAS) thread count, then restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

// ---- double-precision references ------------------------------------------------------------

DVec embedding_ref(const std::vector<int32_t>& tok, const DVec& wte, const DVec* wpe, int B, int T,
                   int C) {
  DVec out(static_cast<std::size_t>(B) * T * C);
  for (int n = 0; n < B * T; ++n)
    for (int c = 0; c < C; ++c)
      out[n * C + c] = wte[tok[n] * C + c] + (wpe ? (*wpe)[(n % T) * C + c] : 0.0);
  return out;
}

DVec layernorm_ref(const DVec& x, const DVec& w, const DVec* b, int N, int C, double eps) {
  DVec out(x.size());
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    for (int c = 0; c < C; ++c)
      out[n * C + c] = (x[n * C + c] - m) / std::sqrt(v + eps) * w[c] + (b ? (*b)[c] : 0.0);
  }
  return out;
}

DVec rmsnorm_ref(const DVec& x, const DVec& w, int N, int C, double eps) {
  DVec out(x.size());
  for (int n = 0; n < N; ++n) {
    double ms = 0;
    for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
    ms /= C;
    for (int c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] / std::sqrt(ms + eps) * w[c];
  }
  return out;
}

DVec linear_ref(const DVec& x, const DVec& w, const DVec* b, int N, int C, int OC,
                WeightLayout layout) {
  DVec out(static_cast<std::size_t>(N) * OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int c = 0; c < C; ++c)
        s += x[n * C + c] * (layout == WeightLayout::kOutIn ? w[o * C + c] : w[c * OC + o]);
      out[n * OC + o] = s;
    }
  return out;
}

// Rotates the first H*hd floats of each row; the rest of the row passes through unchanged.
DVec rotary_ref(const DVec& x, int B, int T, int H, int hd, int stride, double theta) {
  DVec out = x;
  const int half = hd / 2;
  for (int n = 0; n < B * T; ++n)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < half; ++i) {
        const double angle = (n % T) * std::pow(theta, -2.0 * i / hd);
        const std::size_t a = static_cast<std::size_t>(n) * stride + h * hd + i;
        out[a] = x[a] * std::cos(angle) - x[a + half] * std::sin(angle);
        out[a + half] = x[a + half] * std::cos(angle) + x[a] * std::sin(angle);
      }
  return out;
}

// Causal attention over a buffer holding q, k, v at offsets qo, ko, vo of rows of `stride`.
// Grouped-query attention when 0 < Hkv < H: query head h reads kv head h / (H / Hkv). window > 0:
// query t sees keys t - window < j <= t. Scores scale * q·k (scale 0: 1/sqrt(hd)), soft-capped
// as softcap * tanh(s / softcap) when softcap > 0.
DVec attention_ref(const DVec& buf, std::size_t qo, std::size_t ko, std::size_t vo, int stride,
                   int B, int T, int H, int hd, DVec* probs = nullptr, int Hkv = 0, int window = 0,
                   double scale = 0.0, double softcap = 0.0) {
  const int C = H * hd, group = Hkv > 0 ? H / Hkv : 1;
  DVec out(static_cast<std::size_t>(B) * T * C, 0.0);
  if (probs) probs->assign(static_cast<std::size_t>(B) * H * T * T, 0.0);
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(hd));
  DVec s(static_cast<std::size_t>(T));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < T; ++t) {
        const std::size_t qr = (static_cast<std::size_t>(b) * T + t) * stride + h * hd + qo;
        double mx = -1e300;
        const int j0 = window > 0 ? std::max(0, t - window + 1) : 0;
        for (int j = j0; j <= t; ++j) {
          const std::size_t kr =
              (static_cast<std::size_t>(b) * T + j) * stride + h / group * hd + ko;
          double d = 0;
          for (int i = 0; i < hd; ++i) d += buf[qr + i] * buf[kr + i];
          s[j] = d * scale;
          if (softcap > 0.0) s[j] = softcap * std::tanh(s[j] / softcap);
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int j = j0; j <= t; ++j) z += (s[j] = std::exp(s[j] - mx));
        for (int j = j0; j <= t; ++j) {
          const double p = s[j] / z;
          if (probs) (*probs)[((static_cast<std::size_t>(b) * H + h) * T + t) * T + j] = p;
          const std::size_t vr =
              (static_cast<std::size_t>(b) * T + j) * stride + h / group * hd + vo;
          for (int i = 0; i < hd; ++i)
            out[(static_cast<std::size_t>(b) * T + t) * C + h * hd + i] += p * buf[vr + i];
        }
      }
  return out;
}

double gelu_ref(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double silu_ref(double x) {
  return x / (1.0 + std::exp(-x));
}

DVec crossentropy_ref(const DVec& logits, const std::vector<int32_t>& targets, int N, int V,
                      DVec* probs = nullptr) {
  DVec losses(static_cast<std::size_t>(N), 0.0);
  if (probs) probs->assign(logits.size(), 0.0);
  for (int n = 0; n < N; ++n) {
    double mx = -1e300, z = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, logits[n * V + j]);
    for (int j = 0; j < V; ++j) z += std::exp(logits[n * V + j] - mx);
    if (probs)
      for (int j = 0; j < V; ++j) (*probs)[n * V + j] = std::exp(logits[n * V + j] - mx) / z;
    if (targets[n] >= 0) losses[n] = std::log(z) + mx - logits[n * V + targets[n]];
  }
  return losses;
}

// ---- embedding ------------------------------------------------------------------------------

TEST(CpuOps, EmbeddingForwardBackward) {
  const int B = 2, T = 5, C = 7, V = 4;  // V < B*T: tokens repeat, so dwte rows accumulate
  Random rng(1);
  Vec wte = rng.vec(static_cast<std::size_t>(V) * C),
      wpe = rng.vec(static_cast<std::size_t>(T) * C);
  std::vector<int32_t> tok(B * T);
  for (auto& t : tok) t = rng.index(V);
  const DVec R = to_double(rng.vec(static_cast<std::size_t>(B) * T * C));

  for (bool with_pos : {true, false}) {
    SCOPED_TRACE(with_pos ? "with wpe" : "without wpe");
    Vec out(R.size());
    embedding_forward(out.data(), tok.data(), wte.data(), with_pos ? wpe.data() : nullptr, B, T, C);
    const DVec wpe_d = to_double(wpe);
    EXPECT_LT(
        rel_err(out, embedding_ref(tok, to_double(wte), with_pos ? &wpe_d : nullptr, B, T, C)),
        kFwdTol);

    Vec dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
    const Vec dout(R.begin(), R.end());
    embedding_backward(dwte.data(), with_pos ? dwpe.data() : nullptr, dout.data(), tok.data(), B, T,
                       C);
    const DVec g_wte = numeric_grad(wte, [&](const DVec& w) {
      return dot(embedding_ref(tok, w, with_pos ? &wpe_d : nullptr, B, T, C), R);
    });
    EXPECT_LT(rel_err(dwte, g_wte), kGradTol);
    if (with_pos) {
      const DVec wte_d = to_double(wte);
      const DVec g_wpe = numeric_grad(
          wpe, [&](const DVec& w) { return dot(embedding_ref(tok, wte_d, &w, B, T, C), R); });
      EXPECT_LT(rel_err(dwpe, g_wpe), kGradTol);
      const Vec once_wte = dwte, once_wpe = dwpe;
      embedding_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), B, T, C);
      expect_doubled(once_wte, dwte);
      expect_doubled(once_wpe, dwpe);
    }
  }
}

// The sums follow embedding_gradient.hpp's windows (the CUDA kernels' order, bit for bit): a
// token's occurrences, in the sorted list of every token's, summed per window of 256 keys from
// zero. Token 1 comes after token 0's 100 keys, so its 500 fall into windows at 100..255,
// 256..511 and 512..599; a plain running sum from 1.0 would lose every 2^-25 added to it.
TEST(CpuOps, EmbeddingGradientSumsPerWindowOfSortedKeys) {
  const int T = 600, C = 3;
  const float tiny = std::ldexp(1.0f, -25);
  std::vector<int32_t> tok(T);
  Vec dout(static_cast<std::size_t>(T) * C);
  bool first_of_token1 = true;
  for (int t = 0; t < T; ++t) {
    tok[t] = (t < 200 && t % 2 == 0) ? 0 : 1;
    const float v = tok[t] == 0 ? 0.5f : (first_of_token1 ? 1.0f : tiny);
    if (tok[t] == 1) first_of_token1 = false;
    for (int c = 0; c < C; ++c) dout[static_cast<std::size_t>(t) * C + c] = v;
  }
  Vec dwte(2 * C, 0.0f);
  embedding_backward(dwte.data(), nullptr, dout.data(), tok.data(), 1, T, C);
  float want = 0.0f;
  want += 1.0f;           // keys 100..255: 1.0 then 155 tiny ones, each lost against 1.0
  want += 256 * tiny;     // keys 256..511, summed from zero: exact
  want += 88 * tiny;      // keys 512..599
  ASSERT_NE(want, 1.0f);  // what a running sum over the positions gives
  for (int c = 0; c < C; ++c) {
    EXPECT_EQ(dwte[c], 50.0f) << "token 0, channel " << c;
    EXPECT_EQ(dwte[C + c], want) << "token 1, channel " << c;
  }
}

// ---- layernorm ------------------------------------------------------------------------------

TEST(CpuOps, LayerNormForwardBackward) {
  const int N = 6, C = 19;
  const float eps = 1e-5f;
  Random rng(2);
  Vec x = rng.vec(static_cast<std::size_t>(N) * C, -2.0, 3.0), w = rng.vec(C, 0.5, 1.5),
      b = rng.vec(C);
  const DVec R = to_double(rng.vec(x.size()));
  const DVec xd = to_double(x), wd = to_double(w), bd = to_double(b);

  Vec out(x.size()), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
  EXPECT_LT(rel_err(out, layernorm_ref(xd, wd, &bd, N, C, eps)), kFwdTol);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += xd[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (xd[n * C + c] - m) * (xd[n * C + c] - m) / C;
    EXPECT_NEAR(mean[n], m, 1e-6);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(v + eps), 1e-5 / std::sqrt(v + eps));
  }

  Vec dx(x.size(), 0.0f), dw(C, 0.0f), db(C, 0.0f);
  const Vec dout(R.begin(), R.end());
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_LT(rel_err(dx, numeric_grad(x,
                                     [&](const DVec& v) {
                                       return dot(layernorm_ref(v, wd, &bd, N, C, eps), R);
                                     })),
            kGradTol);
  EXPECT_LT(rel_err(dw, numeric_grad(w,
                                     [&](const DVec& v) {
                                       return dot(layernorm_ref(xd, v, &bd, N, C, eps), R);
                                     })),
            kGradTol);
  EXPECT_LT(rel_err(db, numeric_grad(b,
                                     [&](const DVec& v) {
                                       return dot(layernorm_ref(xd, wd, &v, N, C, eps), R);
                                     })),
            kGradTol);

  const Vec dx1 = dx, dw1 = dw, db1 = db;
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_doubled(dx1, dx);
  expect_doubled(dw1, dw);
  expect_doubled(db1, db);

  // Null gradients are skipped; the others are unaffected by what is skipped.
  Vec dw_only(C, 0.0f);
  layernorm_backward(nullptr, dw_only.data(), nullptr, dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_TRUE(bit_equal(dw_only, dw1));
  Vec dx_only(x.size(), 0.0f);
  layernorm_backward(dx_only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_TRUE(bit_equal(dx_only, dx1));

  // Bias-free layernorm.
  layernorm_forward(out.data(), nullptr, nullptr, x.data(), w.data(), nullptr, N, C, eps);
  EXPECT_LT(rel_err(out, layernorm_ref(xd, wd, nullptr, N, C, eps)), kFwdTol);
}

// ---- rmsnorm --------------------------------------------------------------------------------

TEST(CpuOps, RmsNormForwardBackward) {
  const int N = 5, C = 23;
  const float eps = 1e-6f;
  Random rng(3);
  Vec x = rng.vec(static_cast<std::size_t>(N) * C, -2.0, 2.0), w = rng.vec(C, 0.5, 1.5);
  const DVec R = to_double(rng.vec(x.size()));
  const DVec xd = to_double(x), wd = to_double(w);

  Vec out(x.size()), rstd(N);
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  EXPECT_LT(rel_err(out, rmsnorm_ref(xd, wd, N, C, eps)), kFwdTol);

  Vec dx(x.size(), 0.0f), dw(C, 0.0f);
  const Vec dout(R.begin(), R.end());
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_LT(
      rel_err(dx, numeric_grad(
                      x, [&](const DVec& v) { return dot(rmsnorm_ref(v, wd, N, C, eps), R); })),
      kGradTol);
  EXPECT_LT(
      rel_err(dw, numeric_grad(
                      w, [&](const DVec& v) { return dot(rmsnorm_ref(xd, v, N, C, eps), R); })),
      kGradTol);

  const Vec dx1 = dx, dw1 = dw;
  rmsnorm_backward(dx.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_doubled(dx1, dx);
  expect_doubled(dw1, dw);
  Vec dw_only(C, 0.0f);
  rmsnorm_backward(nullptr, dw_only.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_TRUE(bit_equal(dw_only, dw1));
}

// ---- linear ---------------------------------------------------------------------------------

TEST(CpuOps, LinearBothLayoutsForwardBackward) {
  const int N = 5, C = 7, OC = 6;
  Random rng(4);
  Vec x = rng.vec(static_cast<std::size_t>(N) * C), w = rng.vec(static_cast<std::size_t>(OC) * C),
      b = rng.vec(OC);
  const DVec R = to_double(rng.vec(static_cast<std::size_t>(N) * OC));
  const DVec xd = to_double(x), wd = to_double(w), bd = to_double(b);
  const Vec dout(R.begin(), R.end());

  for (WeightLayout layout : {WeightLayout::kOutIn, WeightLayout::kInOut}) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(std::string(layout == WeightLayout::kOutIn ? "kOutIn" : "kInOut") +
                   (with_bias ? " with bias" : " without bias"));
      const DVec* bref = with_bias ? &bd : nullptr;
      Vec out(static_cast<std::size_t>(N) * OC, 123.0f);  // garbage: forward overwrites
      linear_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC,
                     layout);
      EXPECT_LT(rel_err(out, linear_ref(xd, wd, bref, N, C, OC, layout)), kFwdTol);

      Vec dx(x.size(), 0.0f), dw(w.size(), 0.0f), db(b.size(), 0.0f);
      linear_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(),
                      w.data(), N, C, OC, layout);
      EXPECT_LT(rel_err(dx, numeric_grad(x,
                                         [&](const DVec& v) {
                                           return dot(linear_ref(v, wd, bref, N, C, OC, layout), R);
                                         })),
                kGradTol);
      EXPECT_LT(rel_err(dw, numeric_grad(w,
                                         [&](const DVec& v) {
                                           return dot(linear_ref(xd, v, bref, N, C, OC, layout), R);
                                         })),
                kGradTol);
      if (with_bias) {
        EXPECT_LT(rel_err(db, numeric_grad(b,
                                           [&](const DVec& v) {
                                             return dot(linear_ref(xd, wd, &v, N, C, OC, layout),
                                                        R);
                                           })),
                  kGradTol);
      }
      const Vec dx1 = dx, dw1 = dw, db1 = db;
      linear_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(),
                      w.data(), N, C, OC, layout);
      expect_doubled(dx1, dx);
      expect_doubled(dw1, dw);
      if (with_bias) expect_doubled(db1, db);
      Vec dw_only(w.size(), 0.0f);
      linear_backward(nullptr, dw_only.data(), nullptr, dout.data(), x.data(), w.data(), N, C, OC,
                      layout);
      EXPECT_TRUE(bit_equal(dw_only, dw1));
    }
  }

  // The two layouts are transposes of each other.
  Vec wt(w.size());
  for (int o = 0; o < OC; ++o)
    for (int c = 0; c < C; ++c) wt[c * OC + o] = w[o * C + c];
  Vec a(static_cast<std::size_t>(N) * OC), c2(a.size());
  linear_forward(a.data(), x.data(), w.data(), b.data(), N, C, OC, WeightLayout::kOutIn);
  linear_forward(c2.data(), x.data(), wt.data(), b.data(), N, C, OC, WeightLayout::kInOut);
  EXPECT_LT(rel_err(a, to_double(c2)), 1e-6);
}

// ---- rotary ---------------------------------------------------------------------------------

TEST(CpuOps, RotaryForwardBackwardInPlace) {
  const int B = 2, T = 6, H = 2, hd = 8, stride = 3 * H * hd;  // q of a packed qkv buffer
  const float theta = 10000.0f;
  Random rng(5);
  const Vec x = rng.vec(static_cast<std::size_t>(B) * T * stride);
  const DVec R = to_double(rng.vec(x.size()));
  const DVec want = rotary_ref(to_double(x), B, T, H, hd, stride, theta);

  Vec out = x;  // out of place: columns past H*hd must stay as they are
  rotary_forward(out.data(), x.data(), B, T, H, hd, stride, RotaryParams{theta});
  EXPECT_LT(rel_err(out, want), kFwdTol);
  Vec inplace = x;
  rotary_forward(inplace.data(), inplace.data(), B, T, H, hd, stride, RotaryParams{theta});
  EXPECT_TRUE(bit_equal(inplace, out));

  // Spot check against hand-computed values: position 1, frequency 0 is a rotation by 1 rad.
  const std::size_t row1 = static_cast<std::size_t>(stride);
  EXPECT_NEAR(out[row1], x[row1] * std::cos(1.0) - x[row1 + hd / 2] * std::sin(1.0), 1e-6);

  // Backward: only the rotated columns have gradients; others are left untouched.
  Vec dx(x.size(), 0.0f);
  const Vec dout(R.begin(), R.end());
  rotary_backward(dx.data(), dout.data(), B, T, H, hd, stride, RotaryParams{theta});
  DVec g = numeric_grad(x, [&](const DVec& v) {
    const DVec o = rotary_ref(v, B, T, H, hd, stride, theta);
    double s = 0;
    for (int n = 0; n < B * T; ++n)
      for (int c = 0; c < H * hd; ++c) s += o[n * stride + c] * R[n * stride + c];
    return s;
  });
  EXPECT_LT(rel_err(dx, g), kGradTol);
  const Vec dx1 = dx;
  rotary_backward(dx.data(), dout.data(), B, T, H, hd, stride, RotaryParams{theta});
  expect_doubled(dx1, dx);

  EXPECT_THROW(rotary_forward(out.data(), x.data(), B, T, H, 7, stride, RotaryParams{theta}),
               InputError);
}

// ---- attention ------------------------------------------------------------------------------

// Packed qkv [B, T, C + 2·KV] as the models use it: q = qkv, k = qkv + C, v = qkv + C + KV,
// KV = Hkv·hd (Hkv = H: plain multi-head attention, stride 3C; Hkv < H: grouped-query).
void check_attention(int B, int T, int H, int hd, std::uint64_t seed, int Hkv = 0, int window = 0,
                     float scale = 0.0f, float softcap = 0.0f) {
  if (Hkv == 0) Hkv = H;
  SCOPED_TRACE("B=" + std::to_string(B) + " T=" + std::to_string(T) + " H=" + std::to_string(H) +
               " Hkv=" + std::to_string(Hkv) + " window=" + std::to_string(window) +
               " scale=" + std::to_string(scale) + " softcap=" + std::to_string(softcap));
  const AttentionParams params{window, scale > 0.0f ? scale : attention_scale(hd), softcap};
  const int C = H * hd, KV = Hkv * hd, stride = C + 2 * KV;
  Random rng(seed);
  const Vec qkv = rng.vec(static_cast<std::size_t>(B) * T * stride, -1.5, 1.5);
  const DVec R = to_double(rng.vec(static_cast<std::size_t>(B) * T * C));
  const std::size_t TT = static_cast<std::size_t>(B) * H * T * T;
  const float* q = qkv.data();
  const float* k = q + C;
  const float* v = q + C + KV;

  Vec out(static_cast<std::size_t>(B) * T * C), att(TT, 7.0f);  // att: garbage in
  attention_forward(out.data(), att.data(), q, k, v, stride, B, T, H, Hkv, hd, params);
  DVec probs;
  const DVec want = attention_ref(to_double(qkv), 0, C, C + KV, stride, B, T, H, hd, &probs, Hkv,
                                  window, params.scale, softcap);
  EXPECT_LT(rel_err(out, want), kFwdTol);
  EXPECT_LT(rel_err(att, probs), kFwdTol);
  for (int bh = 0; bh < B * H; ++bh)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < T; ++j) {
        if (j > t || (window > 0 && j <= t - window)) {
          ASSERT_EQ(att[(static_cast<std::size_t>(bh) * T + t) * T + j], 0.0f);
        }
      }

  // Against finite differences of the double reference: with Hkv < H, a kv head's dk and dv
  // are the sums over its group's query heads.
  Vec dqkv(qkv.size(), 0.0f), scratch(TT, 5.0f);
  const Vec dout(R.begin(), R.end());
  attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + C + KV, scratch.data(),
                     dout.data(), q, k, v, att.data(), stride, B, T, H, Hkv, hd, params);
  const DVec g = numeric_grad(qkv, [&](const DVec& x) {
    return dot(attention_ref(x, 0, C, C + KV, stride, B, T, H, hd, nullptr, Hkv, window,
                             params.scale, softcap),
               R);
  });
  EXPECT_LT(rel_err(dqkv, g), kGradTol);

  const Vec d1 = dqkv;
  attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + C + KV, scratch.data(),
                     dout.data(), q, k, v, att.data(), stride, B, T, H, Hkv, hd, params);
  expect_doubled(d1, dqkv);

  // Only dv requested: dq and dk slots stay zero, dv equals the full call's.
  Vec dv_only(qkv.size(), 0.0f);
  attention_backward(nullptr, nullptr, dv_only.data() + C + KV, scratch.data(), dout.data(), q, k,
                     v, att.data(), stride, B, T, H, Hkv, hd, params);
  for (std::size_t n = 0; n < static_cast<std::size_t>(B) * T; ++n)
    for (int c = 0; c < stride; ++c) {
      const float expect = c < C + KV ? 0.0f : d1[n * stride + c];
      ASSERT_EQ(dv_only[n * stride + c], expect) << "row " << n << " col " << c;
    }
}

TEST(CpuOps, AttentionPackedQkvGradients) {
  check_attention(2, 5, 2, 4, 6);
  check_attention(1, 70, 2, 4, 7);  // T > the kernel's row block: crosses block boundaries
}

TEST(CpuOps, GroupedQueryAttentionGradients) {
  check_attention(2, 5, 4, 4, 16, /*Hkv=*/2);
  check_attention(1, 70, 4, 2, 17, /*Hkv=*/1);  // multi-query, across row blocks
  check_attention(2, 6, 6, 2, 18, /*Hkv=*/3);
  // Sliding windows (Mistral): inside one row block, across blocks (the scores and products of
  // keys before a block's first visible key are skipped), one key, and a window >= T.
  check_attention(2, 9, 4, 4, 19, /*Hkv=*/2, /*window=*/3);
  check_attention(1, 150, 2, 2, 20, /*Hkv=*/1, /*window=*/5);
  check_attention(1, 140, 2, 2, 21, /*Hkv=*/2, /*window=*/70);
  check_attention(1, 70, 2, 2, 22, /*Hkv=*/2, /*window=*/1);
  check_attention(1, 20, 2, 2, 23, /*Hkv=*/2, /*window=*/40);
  // Gemma 2: a scale of its own (query_pre_attn_scalar^-0.5) and soft-capped scores (a cap of
  // 1.5 bends most of these scores), with and without a window, across row blocks.
  check_attention(2, 9, 4, 4, 24, /*Hkv=*/2, /*window=*/0, /*scale=*/0.7f, /*softcap=*/1.5f);
  check_attention(1, 100, 2, 4, 25, /*Hkv=*/1, /*window=*/70, /*scale=*/0.4f, /*softcap=*/1.5f);
  check_attention(1, 70, 2, 4, 26, /*Hkv=*/2, /*window=*/0, /*scale=*/0.9f, /*softcap=*/50.0f);
  // Hkv must divide H.
  const int B = 1, T = 3, H = 4, hd = 2, stride = H * hd * 3;
  Vec qkv(static_cast<std::size_t>(B) * T * stride), out(static_cast<std::size_t>(B) * T * H * hd),
      att(static_cast<std::size_t>(B) * H * T * T);
  EXPECT_THROW(attention_forward(out.data(), att.data(), qkv.data(), qkv.data(), qkv.data(), stride,
                                 B, T, H, 3, hd, causal_attention(hd)),
               InputError);
  // A scale that is not positive, a negative softcap.
  for (const AttentionParams bad : {AttentionParams{0, 0.0f, 0.0f, nullptr, nullptr},
                                    AttentionParams{0, 1.0f, -1.0f, nullptr, nullptr}})
    EXPECT_THROW(attention_forward(out.data(), att.data(), qkv.data(), qkv.data(), qkv.data(),
                                   stride, B, T, H, H, hd, bad),
                 InputError);
}

// Packed records (packing: {cross_attention: false}): attention over a row of records equals
// attention over each record alone (a sequence of its own), forward and backward, with and
// without a window, across the 64-row blocks; the records do not see each other.
TEST(CpuOps, PackedRecordsAttendAlone) {
  const int T = 150, H = 4, Hkv = 2, hd = 8, C = H * hd, KV = Hkv * hd, stride = C + 2 * KV;
  const std::vector<int> lengths = {1, 30, 70, 5, 44};
  std::vector<std::int32_t> pos(T), end(T);
  for (int t = 0, r = 0; r < static_cast<int>(lengths.size()); t += lengths[r++])
    for (int i = 0; i < lengths[r]; ++i) {
      pos[t + i] = i;
      end[t + i] = t + lengths[r];
    }
  Random rng(31);
  const Vec qkv = rng.vec(static_cast<std::size_t>(T) * stride);
  const Vec dout = rng.vec(static_cast<std::size_t>(T) * C);
  for (int window : {0, 20}) {
    SCOPED_TRACE("window " + std::to_string(window));
    AttentionParams packed = causal_attention(hd, window);
    packed.positions = pos.data();
    packed.segment_end = end.data();
    Vec out(static_cast<std::size_t>(T) * C), att(static_cast<std::size_t>(H) * T * T);
    Vec dqkv(qkv.size(), 0.0f), scratch(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + C + KV,
                      stride, 1, T, H, Hkv, hd, packed);
    attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + C + KV, scratch.data(),
                       dout.data(), qkv.data(), qkv.data() + C, qkv.data() + C + KV, att.data(),
                       stride, 1, T, H, Hkv, hd, packed);
    for (int t0 = 0, r = 0; r < static_cast<int>(lengths.size()); t0 += lengths[r++]) {
      const int n = lengths[r];
      const std::size_t rows = static_cast<std::size_t>(t0) * stride;
      const Vec part(qkv.begin() + static_cast<std::ptrdiff_t>(rows),
                     qkv.begin() + static_cast<std::ptrdiff_t>(rows + n * stride));
      const Vec part_dout(dout.begin() + static_cast<std::ptrdiff_t>(t0) * C,
                          dout.begin() + static_cast<std::ptrdiff_t>(t0 + n) * C);
      Vec o(static_cast<std::size_t>(n) * C), a(static_cast<std::size_t>(H) * n * n);
      Vec d(part.size(), 0.0f), sc(a.size());
      const AttentionParams alone = causal_attention(hd, window);
      attention_forward(o.data(), a.data(), part.data(), part.data() + C, part.data() + C + KV,
                        stride, 1, n, H, Hkv, hd, alone);
      attention_backward(d.data(), d.data() + C, d.data() + C + KV, sc.data(), part_dout.data(),
                         part.data(), part.data() + C, part.data() + C + KV, a.data(), stride, 1, n,
                         H, Hkv, hd, alone);
      const Vec got_o(out.begin() + static_cast<std::ptrdiff_t>(t0) * C,
                      out.begin() + static_cast<std::ptrdiff_t>(t0 + n) * C);
      const Vec got_d(dqkv.begin() + static_cast<std::ptrdiff_t>(rows),
                      dqkv.begin() + static_cast<std::ptrdiff_t>(rows + n * stride));
      EXPECT_LT(rel_err(got_o, to_double(o)), 1e-6) << "record " << r;
      EXPECT_LT(rel_err(got_d, to_double(d)), 1e-6) << "record " << r;
    }
  }
}

TEST(CpuOps, AttentionSeparateBuffersUnitStride) {
  // q, k, v in separate [B, T, C] buffers (stride = C).
  const int B = 2, T = 4, H = 3, hd = 2, C = H * hd;
  Random rng(8);
  const Vec q = rng.vec(static_cast<std::size_t>(B) * T * C), k = rng.vec(q.size()),
            v = rng.vec(q.size());
  Vec out(q.size()), att(static_cast<std::size_t>(B) * H * T * T);
  attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), C, B, T, H, H, hd,
                    causal_attention(hd));
  DVec buf = to_double(q);
  buf.insert(buf.end(), k.begin(), k.end());
  buf.insert(buf.end(), v.begin(), v.end());
  EXPECT_LT(rel_err(out, attention_ref(buf, 0, q.size(), 2 * q.size(), C, B, T, H, hd)), kFwdTol);
}

TEST(CpuOps, AttentionIsCausal) {
  const int B = 1, T = 80, H = 2, hd = 8, C = H * hd, stride = 3 * C;
  Random rng(9);
  const Vec qkv = rng.vec(static_cast<std::size_t>(B) * T * stride);
  Vec out(static_cast<std::size_t>(B) * T * C), att(static_cast<std::size_t>(B) * H * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, stride,
                    B, T, H, H, hd, causal_attention(hd));
  for (int t0 : {0, 37, 63, 64, 78}) {
    Vec changed = qkv;  // every input at positions after t0 (q, k and v) replaced
    for (std::size_t i = static_cast<std::size_t>(t0 + 1) * stride; i < changed.size(); ++i)
      changed[i] = changed[i] * -3.0f + 0.5f;
    Vec out2(out.size()), att2(att.size());
    attention_forward(out2.data(), att2.data(), changed.data(), changed.data() + C,
                      changed.data() + 2 * C, stride, B, T, H, H, hd, causal_attention(hd));
    for (std::size_t i = 0; i < static_cast<std::size_t>(t0 + 1) * C; ++i)
      ASSERT_EQ(out2[i], out[i]) << "t0=" << t0 << " element " << i;
  }
}

// ---- elementwise ----------------------------------------------------------------------------

TEST(CpuOps, GeluForwardBackward) {
  Random rng(10);
  const Vec x = rng.vec(200, -5.0, 5.0);
  const DVec R = to_double(rng.vec(x.size()));
  auto ref = [](const DVec& v) {
    DVec o(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) o[i] = gelu_ref(v[i]);
    return o;
  };
  Vec out(x.size());
  gelu_forward(out.data(), x.data(), x.size());
  EXPECT_LT(rel_err(out, ref(to_double(x))), kFwdTol);
  // PyTorch: F.gelu(torch.tensor([1.0, -0.5]), approximate='tanh')
  const float pts[2] = {1.0f, -0.5f};
  float vals[2];
  gelu_forward(vals, pts, 2);
  EXPECT_NEAR(vals[0], 0.8411920f, 1e-6f);
  EXPECT_NEAR(vals[1], -0.1542859f, 1e-6f);

  Vec dx(x.size(), 0.0f);
  const Vec dout(R.begin(), R.end());
  gelu_backward(dx.data(), x.data(), dout.data(), x.size());
  EXPECT_LT(rel_err(dx, numeric_grad(x, [&](const DVec& v) { return dot(ref(v), R); })), kGradTol);
  const Vec dx1 = dx;
  gelu_backward(dx.data(), x.data(), dout.data(), x.size());
  expect_doubled(dx1, dx);
}

TEST(CpuOps, SwiGluForwardBackward) {
  Random rng(11);
  const std::size_t n = 150;
  const Vec gate = rng.vec(n, -6.0, 6.0), up = rng.vec(n, -2.0, 2.0);
  const DVec R = to_double(rng.vec(n));
  auto ref = [](const DVec& g, const DVec& u) {
    DVec o(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) o[i] = silu_ref(g[i]) * u[i];
    return o;
  };
  const DVec gd = to_double(gate), ud = to_double(up);
  Vec out(n);
  swiglu_forward(out.data(), gate.data(), up.data(), n);
  EXPECT_LT(rel_err(out, ref(gd, ud)), kFwdTol);

  Vec dg(n, 0.0f), du(n, 0.0f);
  const Vec dout(R.begin(), R.end());
  swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), n);
  EXPECT_LT(rel_err(dg, numeric_grad(gate, [&](const DVec& v) { return dot(ref(v, ud), R); })),
            kGradTol);
  EXPECT_LT(rel_err(du, numeric_grad(up, [&](const DVec& v) { return dot(ref(gd, v), R); })),
            kGradTol);
  const Vec dg1 = dg, du1 = du;
  swiglu_backward(dg.data(), du.data(), dout.data(), gate.data(), up.data(), n);
  expect_doubled(dg1, dg);
  expect_doubled(du1, du);
  Vec dg_only(n, 0.0f), du_only(n, 0.0f);
  swiglu_backward(dg_only.data(), nullptr, dout.data(), gate.data(), up.data(), n);
  swiglu_backward(nullptr, du_only.data(), dout.data(), gate.data(), up.data(), n);
  EXPECT_TRUE(bit_equal(dg_only, dg1));
  EXPECT_TRUE(bit_equal(du_only, du1));
}

TEST(CpuOps, ResidualForwardBackward) {
  Random rng(12);
  const std::size_t n = 100;
  const Vec a = rng.vec(n), b = rng.vec(n);
  const DVec R = to_double(rng.vec(n));
  Vec out(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  Vec inplace = a;  // out aliasing an input, as the models call it
  residual_forward(inplace.data(), inplace.data(), b.data(), n);
  EXPECT_TRUE(bit_equal(inplace, out));

  Vec da(n, 0.0f), db(n, 0.0f);
  const Vec dout(R.begin(), R.end());
  residual_backward(da.data(), db.data(), dout.data(), n);
  const DVec bd = to_double(b);
  auto obj = [&](const DVec& v) {
    DVec o(n);
    for (std::size_t i = 0; i < n; ++i) o[i] = v[i] + bd[i];
    return dot(o, R);
  };
  EXPECT_LT(rel_err(da, numeric_grad(a, obj)), kGradTol);
  EXPECT_TRUE(bit_equal(da, db));
  const Vec da1 = da;
  residual_backward(da.data(), nullptr, dout.data(), n);
  expect_doubled(da1, da);
  EXPECT_TRUE(bit_equal(db, da1));
}

// ---- cross-entropy --------------------------------------------------------------------------

TEST(CpuOps, CrossEntropyForwardBackwardIgnoredTargets) {
  const int N = 6, V = 37;  // two 16-lane chunks and a remainder
  Random rng(13);
  const Vec logits = rng.vec(static_cast<std::size_t>(N) * V, -4.0, 4.0);
  std::vector<int32_t> targets = {3, -1, 0, 36, -100, 21};
  const float dloss = 0.37f;
  DVec probs_ref;
  const DVec want = crossentropy_ref(to_double(logits), targets, N, V, &probs_ref);

  Vec losses(N, 9.0f), probs(logits.size());
  softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  EXPECT_LT(rel_err(losses, want), kFwdTol);
  EXPECT_LT(rel_err(probs, probs_ref), kFwdTol);
  EXPECT_EQ(losses[1], 0.0f);
  EXPECT_EQ(losses[4], 0.0f);

  Vec aliased = logits;  // probs may overwrite the logits
  Vec losses2(N);
  softmax_crossentropy_forward(losses2.data(), aliased.data(), aliased.data(), targets.data(), N,
                               V);
  EXPECT_TRUE(bit_equal(losses2, losses));
  EXPECT_TRUE(bit_equal(aliased, probs));

  Vec dlogits(logits.size(), 0.0f);
  softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
  const DVec g = numeric_grad(logits, [&](const DVec& v) {
    const DVec l = crossentropy_ref(v, targets, N, V);
    double s = 0;
    for (double x : l) s += dloss * x;
    return s;
  });
  EXPECT_LT(rel_err(dlogits, g), kGradTol);
  for (int j = 0; j < V; ++j) {  // ignored rows get no gradient at all
    EXPECT_EQ(dlogits[1 * V + j], 0.0f);
    EXPECT_EQ(dlogits[4 * V + j], 0.0f);
  }
  const Vec d1 = dlogits;
  softmax_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), dloss, N, V);
  expect_doubled(d1, dlogits);

  // Large logits: max subtraction keeps it finite, and a tiny target probability still has an
  // accurate loss.
  Vec big = {1000.0f, 0.0f, -1000.0f};
  const std::vector<int32_t> t2 = {1};
  float loss = 0;
  Vec p(3);
  softmax_crossentropy_forward(&loss, p.data(), big.data(), t2.data(), 1, 3);
  EXPECT_FLOAT_EQ(loss, 1000.0f);
  EXPECT_FLOAT_EQ(p[0], 1.0f);

  const std::vector<int32_t> bad = {V};
  EXPECT_THROW(
      softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), bad.data(), 1, V),
      InputError);
}

// Gemma 2's final logit soft-capping: softcap_forward, then the loss that keeps the capped logits
// (crossentropy_lse_forward) and the raw logits' gradient through the cap.
TEST(CpuOps, SoftcappedCrossEntropyGradients) {
  const int N = 5, V = 37;
  const float softcap = 3.0f, dloss = 0.41f;  // logits up to 8: the cap bends them
  Random rng(27);
  const Vec logits = rng.vec(static_cast<std::size_t>(N) * V, -8.0, 8.0);
  const std::vector<int32_t> targets = {3, -1, 0, 36, 21};
  const auto capped_ref = [&](const DVec& z) {
    DVec y(z.size());
    for (std::size_t i = 0; i < z.size(); ++i) y[i] = softcap * std::tanh(z[i] / softcap);
    return y;
  };
  Vec capped = logits;
  softcap_forward(capped.data(), capped.size(), softcap);
  EXPECT_LT(rel_err(capped, capped_ref(to_double(logits))), kFwdTol);
  for (float y : capped) EXPECT_LE(std::abs(y), softcap);

  Vec losses(N, 9.0f), lse(N);
  const Vec kept = capped;
  crossentropy_lse_forward(losses.data(), lse.data(), capped.data(), targets.data(), N, V);
  EXPECT_TRUE(bit_equal(capped, kept));  // the logits are kept for the backward
  EXPECT_LT(rel_err(losses, crossentropy_ref(to_double(kept), targets, N, V)), kFwdTol);
  EXPECT_EQ(losses[1], 0.0f);

  crossentropy_backward_from_lse(capped.data(), lse.data(), targets.data(), dloss, N, V, softcap);
  const DVec g = numeric_grad(logits, [&](const DVec& z) {
    double s = 0;
    for (double x : crossentropy_ref(capped_ref(z), targets, N, V)) s += dloss * x;
    return s;
  });
  EXPECT_LT(rel_err(capped, g), kGradTol);
  for (int j = 0; j < V; ++j) EXPECT_EQ(capped[1 * V + j], 0.0f);  // ignored row

  // Without a cap, the lse path's gradient equals the probabilities path's.
  Vec a = logits, b = logits, l1(N), l2(N), lse2(N);
  softmax_crossentropy_forward(l1.data(), a.data(), a.data(), targets.data(), N, V);
  softmax_crossentropy_backward_inplace(a.data(), targets.data(), dloss, N, V);
  crossentropy_lse_forward(l2.data(), lse2.data(), b.data(), targets.data(), N, V);
  crossentropy_backward_from_lse(b.data(), lse2.data(), targets.data(), dloss, N, V, 0.0f);
  EXPECT_LT(rel_err(l2, to_double(l1)), 1e-6);
  EXPECT_LT(rel_err(b, to_double(a)), 1e-6);
}

// ---- adamw ----------------------------------------------------------------------------------

TEST(CpuOps, AdamWTwoStepsMatchReference) {
  // Hand-computed: p = 1, g = 0.5, lr = 0.1, wd = 0.01, step 1. m = 0.05, v = 2.5e-4, so
  // mhat = 0.5, vhat = 0.25 and p = 1 * (1 - 0.001) - 0.1 * 0.5 / 0.5 = 0.899.
  {
    float param = 1.0f, grad = 0.5f, m = 0.0f, v = 0.0f;
    adamw_update(&param, &grad, &m, &v, 1, AdamWParams{0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 1}, 1.0f);
    EXPECT_NEAR(param, 0.899f, 1e-6f);
    EXPECT_NEAR(m, 0.05f, 1e-9f);
    EXPECT_NEAR(v, 2.5e-4f, 1e-11f);
  }
  Random rng(14);
  for (std::size_t size : {std::size_t{1000}, std::size_t{100000}}) {  // serial and parallel
    Vec param = rng.vec(size), m(size, 0.0f), v(size, 0.0f);
    const Vec g1 = rng.vec(size), g2 = rng.vec(size);
    DVec pd = to_double(param), md(size, 0.0), vd(size, 0.0);
    const float grad_scale = 0.5f;
    for (int step = 1; step <= 2; ++step) {
      const AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, step};
      const Vec& g = step == 1 ? g1 : g2;
      adamw_update(param.data(), g.data(), m.data(), v.data(), size, hp, grad_scale);
      // The decimal values, as PyTorch would receive them from Python.
      const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1;
      for (std::size_t i = 0; i < size; ++i) {
        const double gi = static_cast<double>(g[i]) * grad_scale;
        pd[i] *= 1.0 - lr * wd;
        md[i] = b1 * md[i] + (1.0 - b1) * gi;
        vd[i] = b2 * vd[i] + (1.0 - b2) * gi * gi;
        const double mhat = md[i] / (1.0 - std::pow(b1, step));
        const double vhat = vd[i] / (1.0 - std::pow(b2, step));
        pd[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      }
    }
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_NEAR(param[i], pd[i], 2e-7) << i;
      ASSERT_NEAR(m[i], md[i], 1e-7) << i;
      ASSERT_NEAR(v[i], vd[i], 1e-8) << i;
    }
  }
  // No decay when weight_decay == 0 and a zero gradient: the parameter does not move.
  float param = 0.75f, grad = 0.0f, m = 0.0f, v = 0.0f;
  adamw_update(&param, &grad, &m, &v, 1, AdamWParams{0.1f, 0.9f, 0.999f, 1e-8f, 0.0f, 1}, 1.0f);
  EXPECT_EQ(param, 0.75f);
}

// ---- reduce ---------------------------------------------------------------------------------

TEST(CpuOps, SumOfSquaresIsDoubleAndThreadCountIndependent) {
  Random rng(15);
  const Vec x = rng.vec(300001, -3.0, 3.0);
  double want = 0;
  for (float f : x) want += static_cast<double>(f) * f;
  double one = 0, two = 0;
  {
    ThreadCount threads(1);
    one = sum_of_squares(x.data(), x.size());
  }
  {
    ThreadCount threads(2);
    two = sum_of_squares(x.data(), x.size());
  }
  EXPECT_NEAR(one, want, 1e-12 * want);
  EXPECT_EQ(one, two);
  EXPECT_EQ(sum_of_squares(x.data(), 0), 0.0);
  const float tiny[3] = {1.0f, 2.0f, 3.0f};
  EXPECT_EQ(sum_of_squares(tiny, 3), 14.0);
}

// ---- vectorised exp / tanh ------------------------------------------------------------------

// Error in units in the last place of the correctly rounded float result.
double ulp_error(float got, double want) {
  const float w = static_cast<float>(want);
  const double ulp = std::nextafter(std::fabs(w), INFINITY) - std::fabs(w);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(CpuOps, VectorisedExpAndTanhAreAccurate) {
  double worst_exp = 0, worst_tanh = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.000731f * (1.0f + std::fabs(x))) {
    worst_exp =
        std::max(worst_exp, ulp_error(detail::exp_f32(x), std::exp(static_cast<double>(x))));
    if (std::fabs(x) < 10.0f && std::fabs(x) > 1e-30f)
      worst_tanh =
          std::max(worst_tanh, ulp_error(detail::tanh_f32(x), std::tanh(static_cast<double>(x))));
  }
  EXPECT_LE(worst_exp, 1.5);
  EXPECT_LE(worst_tanh, 2.0);
  EXPECT_EQ(detail::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(detail::exp_f32(-200.0f), 0.0f);
  EXPECT_EQ(detail::exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(detail::exp_f32(100.0f), INFINITY);
  EXPECT_TRUE(std::isnan(detail::exp_f32(NAN)));
  EXPECT_EQ(detail::tanh_f32(INFINITY), 1.0f);
  EXPECT_EQ(detail::tanh_f32(-30.0f), -1.0f);
  EXPECT_EQ(detail::tanh_f32(1e-20f), 1e-20f);
  EXPECT_TRUE(std::isnan(detail::tanh_f32(NAN)));
}

// Elementwise ops above the size where they go parallel: same values as the double references,
// and the same bits whatever the thread count.
TEST(CpuOps, LargeElementwiseOpsAreThreadCountIndependent) {
  const std::size_t n = 300007;
  Random rng(17);
  const Vec x = rng.vec(n, -8.0, 8.0), y = rng.vec(n), dy = rng.vec(n);
  auto run = [&] {
    std::vector<Vec> r(9, Vec(n, 0.0f));
    gelu_forward(r[0].data(), x.data(), n);
    gelu_backward(r[1].data(), x.data(), dy.data(), n);
    swiglu_forward(r[2].data(), x.data(), y.data(), n);
    swiglu_backward(r[3].data(), r[4].data(), dy.data(), x.data(), y.data(), n);
    residual_forward(r[5].data(), x.data(), y.data(), n);
    r[6] = y;
    adamw_update(r[6].data(), dy.data(), r[7].data(), r[8].data(), n,
                 AdamWParams{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1}, 1.0f);
    return r;
  };
  std::vector<Vec> one, two;
  {
    ThreadCount threads(1);
    one = run();
  }
  {
    ThreadCount threads(2);
    two = run();
  }
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bit_equal(one[i], two[i])) << i;
  DVec gelu(n), swiglu(n);
  for (std::size_t i = 0; i < n; ++i) {
    gelu[i] = gelu_ref(x[i]);
    swiglu[i] = silu_ref(x[i]) * y[i];
  }
  EXPECT_LT(rel_err(one[0], gelu), 1e-6);
  EXPECT_LT(rel_err(one[2], swiglu), 1e-6);
}

// ---- determinism ----------------------------------------------------------------------------

// Every op with a reduction, at sizes that split across threads, twice: bit-identical. Our own
// kernels also give the same bits with 1 and 3 threads (reproducible mode wants results that do
// not depend on the number of threads a rank runs, which `saturn run` derives from the rank
// count); the products computed by OpenBLAS (results 0-2) are left out of that comparison: its
// threaded GEMMs partition the output by thread count and can round differently.
TEST(CpuOps, DeterministicForAnyThreadCount) {
  ThreadCount threads(2);
  const int B = 2, T = 96, H = 4, hd = 16, C = H * hd, N = B * T, OC = 3 * C, V = 300;
  Random rng(16);
  const Vec x = rng.vec(static_cast<std::size_t>(N) * C),
            w = rng.vec(static_cast<std::size_t>(OC) * C), bias = rng.vec(OC), lnw = rng.vec(C),
            dy = rng.vec(static_cast<std::size_t>(N) * OC),
            dc = rng.vec(static_cast<std::size_t>(N) * C),
            logits = rng.vec(static_cast<std::size_t>(N) * V);
  std::vector<int32_t> tok(N), tgt(N);
  for (auto& t : tok) t = rng.index(50);
  for (auto& t : tgt) t = rng.index(V);

  auto run = [&] {
    std::vector<Vec> r;
    Vec qkv(static_cast<std::size_t>(N) * OC);
    linear_forward(qkv.data(), x.data(), w.data(), bias.data(), N, C, OC, WeightLayout::kOutIn);
    Vec dx(x.size(), 0.0f), dw(w.size(), 0.0f), db(OC, 0.0f);
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC,
                    WeightLayout::kInOut);
    Vec out(x.size()), att(static_cast<std::size_t>(B) * H * T * T), scratch(att.size());
    rotary_forward(qkv.data(), qkv.data(), B, T, H, hd, OC, RotaryParams{});
    attention_forward(out.data(), att.data(), qkv.data(), qkv.data() + C, qkv.data() + 2 * C, OC, B,
                      T, H, H, hd, causal_attention(hd));
    Vec dqkv(qkv.size(), 0.0f);
    attention_backward(dqkv.data(), dqkv.data() + C, dqkv.data() + 2 * C, scratch.data(), dc.data(),
                       qkv.data(), qkv.data() + C, qkv.data() + 2 * C, att.data(), OC, B, T, H, H,
                       hd, causal_attention(hd));
    Vec ln(x.size()), mean(N), rstd(N), dln(x.size(), 0.0f), dlnw(C, 0.0f), dlnb(C, 0.0f);
    layernorm_forward(ln.data(), mean.data(), rstd.data(), x.data(), lnw.data(), lnw.data(), N, C,
                      1e-5f);
    layernorm_backward(dln.data(), dlnw.data(), dlnb.data(), dc.data(), x.data(), lnw.data(),
                       mean.data(), rstd.data(), N, C);
    Vec rms(x.size()), rrstd(N), drms(x.size(), 0.0f), drmsw(C, 0.0f);
    rmsnorm_forward(rms.data(), rrstd.data(), x.data(), lnw.data(), N, C, 1e-6f);
    rmsnorm_backward(drms.data(), drmsw.data(), dc.data(), x.data(), lnw.data(), rrstd.data(), N,
                     C);
    Vec wte(static_cast<std::size_t>(50) * C, 0.0f), wpe(static_cast<std::size_t>(T) * C, 0.0f);
    embedding_backward(wte.data(), wpe.data(), dc.data(), tok.data(), B, T, C);
    Vec losses(N), probs(logits.size()), dlogits(logits.size(), 0.0f);
    softmax_crossentropy_forward(losses.data(), probs.data(), logits.data(), tgt.data(), N, V);
    softmax_crossentropy_backward(dlogits.data(), probs.data(), tgt.data(), 0.01f, N, V);
    r = {qkv,  dx,   dw,  db,   out,   att, dqkv, ln,     dln,
         dlnw, dlnb, rms, drms, drmsw, wte, wpe,  losses, dlogits};
    return r;
  };
  const std::vector<Vec> first = run(), second = run();
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_TRUE(bit_equal(first[i], second[i])) << i;
  for (const int n : {1, 3}) {
    ThreadCount other_count(n);
    const std::vector<Vec> other = run();
    for (std::size_t i = 3; i < first.size(); ++i)
      EXPECT_TRUE(bit_equal(first[i], other[i])) << "result " << i << " with " << n << " threads";
  }
}

// The norms' backward with fewer row blocks than threads (a small micro-batch) computes the input
// gradient in a row-parallel loop of its own: the same bits as one thread, for every output.
TEST(CpuOps, NormBackwardWithFewRowsMatchesOneThread) {
  const int N = 40, C = 48;  // one block of rows
  Random rng(21);
  const Vec x = rng.vec(static_cast<std::size_t>(N) * C), w = rng.vec(C), b = rng.vec(C),
            dout = rng.vec(static_cast<std::size_t>(N) * C);
  auto run = [&] {
    Vec y(x.size()), mean(N), rstd(N), dx(x.size(), 0.0f), dw(C, 0.0f), db(C, 0.0f);
    layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                      1e-5f);
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
    Vec ry(x.size()), rr(N), rdx(x.size(), 0.0f), rdw(C, 0.0f);
    rmsnorm_forward(ry.data(), rr.data(), x.data(), w.data(), N, C, 1e-5f);
    rmsnorm_backward(rdx.data(), rdw.data(), dout.data(), x.data(), w.data(), rr.data(), N, C);
    Vec dx_only(x.size(), 0.0f);  // input gradient alone
    layernorm_backward(dx_only.data(), nullptr, nullptr, dout.data(), x.data(), w.data(),
                       mean.data(), rstd.data(), N, C);
    return std::vector<Vec>{dx, dw, db, rdx, rdw, dx_only};
  };
  std::vector<Vec> one, three;
  {
    ThreadCount threads(1);
    one = run();
  }
  {
    ThreadCount threads(3);
    three = run();
  }
  for (std::size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(bit_equal(one[i], three[i])) << i;
  EXPECT_TRUE(bit_equal(one[0], one[5]));  // with or without the weight gradients
}

}  // namespace
}  // namespace saturn::cpu
