#include "runtime/parallel/repro.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace saturn::parallel {

GradAccumulator::GradAccumulator(MemoryPool& pool, std::size_t n)
    : acc_(pool, n, "fp64 gradient accumulator") {
  acc_.zero();
}

void GradAccumulator::flush(float* g, std::size_t n) {
  double* a = acc_.data();
  for (std::size_t i = 0; i < n; ++i) a[i] += static_cast<double>(g[i]);
  std::memset(g, 0, n * sizeof(float));
}

void GradAccumulator::round_and_reset(float* out) {
  const double* a = acc_.data();
  for (std::size_t i = 0; i < acc_.size(); ++i) out[i] = static_cast<float>(a[i]);
  acc_.zero();
}

void reproducible_backward(GptModel& model, float dloss, GradAccumulator& acc) {
  float* g = model.grads();
  model.head_backward(dloss);
  if (model.config().arch == Arch::kGpt2) {
    const std::size_t e = model.layout().group_end(-1);
    acc.flush(g, e);
  }
  for (int l = model.end_layer() - 1; l >= model.first_layer(); --l) model.block_backward(l);
  model.embed_backward();
  acc.flush(g, model.num_params());
}

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

void ExactSquareSum::allreduce(comm::Communicator& comm) {
  if (comm.size() == 1) return;
  // Each 128-bit bin as four 32-bit words in int64: sums over up to 2^31 ranks cannot overflow,
  // and the carries are propagated afterwards.
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
  comm.allreduce(w.data(), w.size(), comm::ReduceOp::kSum);
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

std::string reproducible_rows_reason(const StrategySpec& spec, std::int64_t rows) {
  const std::int64_t c = canonical_micro_batch(spec.train);
  const std::int64_t B = spec.train.batch_size;
  if (spec.knobs.micro_batch_size > 0 && spec.knobs.micro_batch_size != c)
    return fmt::format(
        "micro_batch_size {} differs from the canonical micro-batch of {} sequences of this "
        "reproducible job (every configuration must run the same micro-batches)",
        spec.knobs.micro_batch_size, c);
  if (B % c != 0 || rows % c != 0)
    return fmt::format(
        "a reproducible job runs canonical micro-batches of {} sequences, which do not divide the "
        "{} sequences each data-parallel replica processes per step (valid: data-parallel widths "
        "dividing the job's {} micro-batches)",
        c, rows, B % c == 0 ? B / c : 0);
  return "";
}

std::string tensor_parallel_reason(const std::string& name) {
  return fmt::format(
      "{}: tensor parallelism splits the forward's sums across ranks (row-parallel products), so "
      "its results differ from one device's in the last bits: not available to a reproducible "
      "job (reproducible: true)",
      name);
}

}  // namespace saturn::parallel
