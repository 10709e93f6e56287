// Training one job under a parallel strategy on the ranks of a communicator: the loop of
// `saturn train --strategy S --degree D`, the same as train_single_device (same batches, same
// metrics) but with the step delegated to the strategy. Rank 0 writes metrics.jsonl.
//
// Failures before training are agreed by all ranks (comm::agree): an infeasible configuration
// (reason from Strategy::estimate), bad data, out of memory at set-up, a degree that is not
// the communicator's size. Every rank then throws the same comm::AgreedFailure, so no rank is
// left waiting and the exit code is the same everywhere.
#pragma once

#include <functional>
#include <string>

#include "runtime/comm/communicator.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/train/trainer.hpp"

namespace saturn {

struct ParallelOptions {
  std::string strategy;  // a name from parallel::strategy_names()
  int degree = 1;        // must equal comm.size()
  parallel::Knobs knobs;
  bool gather_final_params = false;  // TrainResult::final_params on rank 0 (tests)
  // Runs on rank 0 once every rank is set up, before the first step (e.g. creating the run
  // directory); its failure is agreed too.
  std::function<void()> prepare;
  // Runs on every rank after each step (after evaluation and a due checkpoint). Returning true
  // stops training at this step boundary: the state is checkpointed (unless it just was) and
  // the result says stopped. The callback must return the same on every rank (agree first).
  std::function<bool(const StepRecord&)> after_step;
  // A non-finite loss or gradient norm, or weights or AdamW moments that a step's update left
  // non-finite (checked before every checkpoint), stops training (result.stopped,
  // result.nonfinite_step) instead of failing it: `early_stop: {diverged: true}`. Either way
  // the poisoned state is never checkpointed; the newest checkpoint stays the last good one.
  bool nonfinite_stops = false;
};

// TrainResult::peak_device_bytes is the largest over ranks; steps are identical on all ranks.
TrainResult train_with_strategy(const TrainJob& job, const TrainOptions& options,
                                const ParallelOptions& parallel, comm::Communicator& comm);

}  // namespace saturn
