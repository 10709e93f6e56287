// The exact sum of squares of fp32 values: every square is an integer multiple of a power of two
// fixed by the value's exponent, so per exponent the squares add up exactly in a 128-bit
// integer. The result does not depend on the order of the values or on how they are split
// across ranks; value() rounds once. Reproducible mode's gradient norm (parallel/repro.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace saturn {

class ExactSquareSum {
 public:
  void add(const float* x, std::size_t n);
  double value() const;

  // The partial sums as 32-bit words in int64 (4 per exponent bin, then the non-finite count):
  // summing the words of every rank elementwise (an int64 allreduce) cannot overflow for up to
  // 2^31 ranks, and from_summed_words() propagates the carries.
  std::vector<std::int64_t> words() const;
  void from_summed_words(const std::vector<std::int64_t>& w);

 private:
  static constexpr int kBins = 255;  // fp32 exponent fields 0..254 (255: inf/nan)
  std::array<std::uint64_t, kBins> lo_{}, hi_{};
  std::uint64_t nonfinite_ = 0;
};

}  // namespace saturn
