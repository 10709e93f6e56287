// Training one job under a parallel strategy on the ranks of a communicator: the loop of
// `saturn train --strategy S --degree D`, the same as train_single_device (same batches, same
// metrics) but with the step delegated to the strategy. Rank 0 writes metrics.jsonl.
//
// Failures before training are agreed by all ranks (comm::agree): an infeasible configuration
// (reason from Strategy::estimate), bad data, out of memory at set-up, a degree that is not
// the communicator's size. Every rank then throws the same comm::AgreedFailure, so no rank is
// left waiting and the exit code is the same everywhere.
#pragma once

#include <chrono>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "runtime/checkpoint/train_io.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/train/step_control.hpp"
#include "runtime/train/trainer.hpp"

namespace saturn {

struct ParallelOptions {
  std::string strategy;  // a name from parallel::strategy_registry()
  int degree = 1;        // must equal comm.size()
  parallel::Knobs knobs;
  bool gather_final_params = false;  // TrainResult::final_params on rank 0 (tests)
  // Runs on rank 0 once every rank is set up, before the first step (e.g. creating the run
  // directory); its failure is agreed too.
  std::function<void()> prepare;
  // Runs on every rank after each step (after evaluation and a due checkpoint): what this rank
  // asks of the job (step_control.hpp). The ranks agree on it; a stop ends training at this
  // step boundary with a checkpoint (TrainResult::stopped, TrainResult::decision), a fault is an
  // agreed failure.
  std::function<StepRequests(const StepRecord&)> step_requests;
  // A non-finite loss or gradient norm, or weights or AdamW moments that a step's update left
  // non-finite (checked before every checkpoint), stops training (result.stopped,
  // result.nonfinite_step) instead of failing it: `early_stop: {diverged: true}`. Either way
  // the poisoned state is never checkpointed; the newest checkpoint stays the last good one.
  bool nonfinite_stops = false;
};

// One job on the ranks of a communicator, in named steps: set-up (the strategy on every rank,
// agreed), resume (the newest checkpoint, or the Hugging Face weights it starts from), the step
// loop (train, record, checkpoint when due, agree on a stop), and the end (final.h5, an export).
class Trainer {
 public:
  Trainer(TrainJob job, TrainOptions options, ParallelOptions parallel, comm::Communicator& comm);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;
  // TrainResult::peak_device_bytes is the largest over ranks; steps are identical on all ranks.
  TrainResult run();

 private:
  void setup();
  std::int64_t resume();
  void load_pretrained();
  // A LoRA job: its frozen base (from `from:` or the seed), and its fingerprint recorded in
  // the job's checkpoints (they hold only the adapters).
  void settle_base();
  std::string base_fingerprint();
  void open_metrics(std::int64_t first_step);
  void announce() const;
  void evaluate_imported();
  void attach_instruction_data();
  void require_trained_validation_targets();
  // The optimizer step `step` (0-based) and its evaluation when due; nullopt when it met a
  // non-finite loss or norm and the job stops there (ParallelOptions::nonfinite_stops).
  std::optional<StepRecord> train_step(std::int64_t step);
  void record(const StepRecord& r, std::int64_t first_step);
  // A checkpoint at `step` unless the state is poisoned (then the job stops or fails there).
  // Returns whether one was written.
  bool checkpoint(std::int64_t step);
  bool stop_requested(const StepRecord& r);
  void finish();
  // Whether a step's update left a weight or an AdamW moment non-finite on some rank (collective).
  bool poisoned(std::int64_t step);
  ckpt::TrainPoint point(std::int64_t step) const;

  TrainJob job_;
  TrainOptions options_;
  ParallelOptions par_;
  comm::Communicator& comm_;
  int rank_ = 0;
  parallel::StrategySpec spec_;
  // Declared in this order so that the strategy goes first: it returns its buffers to the
  // device and the pool, and its communicators are split from `comms_`.
  std::unique_ptr<Device> device_;
  // Offload's host state, in the memory the device copies from (pinned on a GPU): made with
  // the device, which owns its allocator.
  std::unique_ptr<MemoryPool> host_;
  std::unique_ptr<comm::CommPair> comms_;
  std::unique_ptr<parallel::Strategy> strategy_;
  std::optional<data::TokenLoader> train_loader_, val_loader_;
  parallel::Estimate estimate_;
  ckpt::JobCheckpointing checkpoints_;
  ckpt::SliceSource source_;
  ckpt::SliceSink sink_;
  std::ofstream metrics_;
  std::int64_t total_steps_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point t_start_, t_last_print_;
  double train_time_ = 0;  // excludes evaluation, for tokens/s
  TrainResult result_;
};

// Trainer(job, options, parallel, comm).run().
TrainResult train_with_strategy(const TrainJob& job, const TrainOptions& options,
                                const ParallelOptions& parallel, comm::Communicator& comm);

}  // namespace saturn
