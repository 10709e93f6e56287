#include "runtime/core/exact_sum.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace saturn {

void ExactSquareSum::add(const float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, x + i, sizeof bits);
    const std::uint32_t e = (bits >> 23) & 0xFFu;
    if (e == 0xFFu) {
      ++nonfinite_;
      continue;
    }
    // |x| = m · 2^(max(e,1) - 150) with m < 2^24, so x² = m² · 2^(2·(max(e,1) - 150)), m² < 2^48.
    const std::uint64_t m = (bits & 0x7FFFFFu) | (e != 0 ? 0x800000u : 0u);
    const std::uint64_t sq = m * m;
    lo_[e] += sq;
    if (lo_[e] < sq) ++hi_[e];
  }
}

std::vector<std::int64_t> ExactSquareSum::words() const {
  constexpr std::uint64_t kMask = 0xFFFFFFFFu;
  std::vector<std::int64_t> w(4 * kBins + 1);
  for (int b = 0; b < kBins; ++b) {
    const std::size_t i = static_cast<std::size_t>(b);
    w[4 * i] = static_cast<std::int64_t>(lo_[i] & kMask);
    w[4 * i + 1] = static_cast<std::int64_t>(lo_[i] >> 32);
    w[4 * i + 2] = static_cast<std::int64_t>(hi_[i] & kMask);
    w[4 * i + 3] = static_cast<std::int64_t>(hi_[i] >> 32);
  }
  w.back() = static_cast<std::int64_t>(nonfinite_);
  return w;
}

void ExactSquareSum::from_summed_words(const std::vector<std::int64_t>& w) {
  if (w.size() != 4 * kBins + 1) throw std::invalid_argument("ExactSquareSum: wrong word count");
  constexpr std::uint64_t kMask = 0xFFFFFFFFu;
  for (int b = 0; b < kBins; ++b) {
    const std::size_t i = static_cast<std::size_t>(b);
    std::uint64_t words[4];
    std::uint64_t carry = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      const std::uint64_t v = static_cast<std::uint64_t>(w[4 * i + k]) + carry;
      words[k] = v & kMask;
      carry = v >> 32;
    }
    lo_[i] = words[0] | (words[1] << 32);
    hi_[i] = words[2] | (words[3] << 32);
  }
  nonfinite_ = static_cast<std::uint64_t>(w.back());
}

double ExactSquareSum::value() const {
  if (nonfinite_ > 0) return std::numeric_limits<double>::quiet_NaN();
  double total = 0;
  for (int e = 0; e < kBins; ++e) {
    const std::size_t i = static_cast<std::size_t>(e);
    if (lo_[i] == 0 && hi_[i] == 0) continue;
    const double integer =
        std::ldexp(static_cast<double>(hi_[i]), 64) + static_cast<double>(lo_[i]);
    total += std::ldexp(integer, 2 * (std::max(e, 1) - 150));
  }
  return total;
}

}  // namespace saturn
