#include "runtime/parallel/repro.hpp"

#include <fmt/format.h>

#include <vector>

#include "runtime/parallel/tied_head.hpp"

namespace saturn::parallel {

GradAccumulator::GradAccumulator(Device& device, std::size_t n)
    : device_(&device), acc_(device.memory(), n, "fp64 gradient accumulator") {
  device.zero(acc_.data(), acc_.bytes());
}

void GradAccumulator::flush(float* g, std::size_t n) {
  device_->accumulate(acc_.data(), g, n);
}

void GradAccumulator::round_and_reset(float* out) {
  device_->round_into(out, acc_.data(), acc_.size());
}

void reproducible_backward(Model& model, float dloss, GradAccumulator& acc) {
  float* g = model.grads();
  model.head_backward(dloss);
  const TiedHead head(model.config(), model.layout());
  if (head.elements > 0) acc.flush(g, head.elements);
  for (int l = model.end_layer() - 1; l >= model.first_layer(); --l) model.block_backward(l);
  model.embed_backward();
  acc.flush(g, model.layout().grad_total());
}

void allreduce_exact(ExactSquareSum& sum, comm::Communicator& comm) {
  if (comm.size() == 1) return;
  std::vector<std::int64_t> w = sum.words();
  comm.allreduce(w.data(), w.size(), comm::ReduceOp::kSum);
  sum.from_summed_words(w);
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
