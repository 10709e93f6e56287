// A platform-independent random stream. std::*_distribution output differs between standard
// libraries, so initialisation and shuffles derive floats from raw 64-bit draws ourselves:
// the same seed gives the same model on every machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace saturn {

// splitmix64: tiny, full-period, good enough for weights init and shuffles; its whole state is
// one integer, which checkpoints save.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  // Standard normal (Box-Muller; one value per call, the pair's second value is dropped so the
  // stream position depends only on the number of calls).
  double normal() {
    double u1 = uniform();
    const double u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  // Uniform integer in [0, n) (n > 0), unbiased by rejection.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~0ull - (~0ull % n);
    std::uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
  }
  std::uint64_t state() const { return state_; }
  void set_state(std::uint64_t s) { state_ = s; }

 private:
  std::uint64_t state_;
};

}  // namespace saturn
