// Reproducible mode (TrainConfig::reproducible): the pieces that make a step's result independent
// of how the global batch is spread over ranks and micro-batches.
//
// Every configuration runs the same canonical micro-batches (canonical_micro_batch), and each
// micro-batch's fp32 gradient is computed by the same code on the same rows, so it is the same
// everywhere. What differs between configurations is only how those fp32 terms are summed: the
// order of micro-batches on a rank, which rank holds which, and the reduction across ranks.
// GradAccumulator adds every term into fp64, where a sum of k fp32 terms is exact while they lie
// within about 2^(29 - log2 k) of each other, so the order stops mattering; the sum is rounded
// once to fp32. Terms further apart (a token's output row: order 1 where it is a target, 1e-10
// elsewhere) can leave the fp64 sum order-dependent in its last bit, and the fp32 rounding then
// flips with probability ~2^-29 per such element (docs/strategies.md, "fp64 sums"). ExactSquareSum
// gives the gradient norm (and so the clip factor) exactly, whatever the split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/core/exact_sum.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/model/model.hpp"
#include "runtime/parallel/strategy.hpp"

namespace saturn::parallel {

// An fp64 copy of (part of) a flat gradient buffer that fp32 gradient terms are added into, on
// the device that holds the gradients.
class GradAccumulator {
 public:
  GradAccumulator() = default;
  GradAccumulator(Device& device, std::size_t n);

  std::size_t size() const { return acc_.size(); }
  double* data() { return acc_.data(); }
  // acc[i] += g[i] for i < n, then g[i] = 0 (the fp32 buffer is ready for the next term).
  void flush(float* g, std::size_t n);
  // out[i] = fp32(acc[i]) for every element: the one rounding of the step; then the
  // accumulator is zeroed for the next step.
  void round_and_reset(float* out);

 private:
  Device* device_ = nullptr;
  Buffer<double> acc_;
};

// The backward of an owned-storage model's last forward (one device, a DDP replica), adding the
// micro-batch's gradient to `acc` (the whole flat layout) as the canonical terms: GPT-2's tied
// token embedding gets its classifier part and its embedding part as two terms, as a pipeline
// computes them on different stages; every other element gets one. Leaves the model's fp32
// gradients zero.
void reproducible_backward(Model& model, float dloss, GradAccumulator& acc);

// Sums the exact partial sums (core/exact_sum.hpp) of every rank of `comm` (exactly, in 64-bit
// integer words over the control communicator).
void allreduce_exact(ExactSquareSum& sum, comm::Communicator& comm);

// Why a configuration cannot train a reproducible job, or "" when it can: the canonical
// micro-batch must divide the rows each data-parallel replica processes, a configured
// per-rank micro-batch must equal it. `rows`: sequences per replica per step.
std::string reproducible_rows_reason(const StrategySpec& spec, std::int64_t rows);
// The reason tensor parallelism is not offered to reproducible jobs.
std::string tensor_parallel_reason(const std::string& name);

}  // namespace saturn::parallel
