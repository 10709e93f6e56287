// What one job is, how a run of it is configured, and what it reports; the training loop itself
// is train_with_strategy (parallel_trainer.hpp), of which one device is the degree-1 case.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/model/config.hpp"
#include "runtime/train/step_control.hpp"

namespace saturn {

struct TrainJob {
  std::string id;
  ModelConfig model;
  TrainConfig train;
  std::filesystem::path train_data;
  std::filesystem::path val_data;
  // A Hugging Face model directory to start from instead of the random initialisation (each
  // rank reads only the slices it holds); a resumed job loads its checkpoint instead.
  std::filesystem::path init_from = {};
};

struct TrainOptions {
  std::filesystem::path job_dir;     // metrics.jsonl, final.h5 (empty: write nothing)
  Resources resources;               // the backend every rank trains on, its device and memory
  double progress_interval_s = 2.0;  // progress lines at most this often (and at evaluations)
  bool quiet = false;
  std::int64_t max_steps = -1;  // stop early after this many steps (tests); -1: all
  bool resume = false;          // continue from the job's newest valid checkpoint, if any
  int keep_checkpoints = 3;     // step checkpoints kept in job_dir/checkpoints
  // After final.h5, the workload's `export:` (docs/checkpoints.md): kHf writes job_dir/hf, the
  // final weights as a Hugging Face model directory (a LoRA job's base with its adapters
  // merged); kPeft writes a LoRA job's adapters as PEFT saves them, job_dir/peft (a full
  // fine-tune, which has none, job_dir/hf).
  enum class Export { kNone, kHf, kPeft };
  Export export_format = Export::kNone;
};

// The workload's `export:` value ("", hf, peft) as an option.
TrainOptions::Export export_option(const std::string& workload_export);

// Where one segment's time went on the leader's clock: the parts the planner prices a job by
// (docs/profiling.md, "What a job's time is made of"). Cumulative from the segment's start.
struct SegmentTimes {
  double setup_s = 0;  // strategy set-up, checkpoint or imported weights loaded, first eval
  // optimizer steps (forward, backward, reductions, update) and each one's bookkeeping (its
  // metrics line, the ranks' agreement on stopping)
  double steps_s = 0;
  std::int64_t steps = 0;
  double evals_s = 0;  // evaluations
  std::int64_t evals = 0;
  double checkpoints_s = 0;  // checkpoints written: periodic, at a stop, final.h5 and its export
  std::int64_t checkpoints = 0;
};

struct StepRecord {
  std::int64_t step = 0;  // 1-based optimizer step just completed
  double loss = 0;        // mean train loss over the global batch
  double lr = 0;
  double grad_norm = 0;
  double tokens_per_s = 0;
  double time_s = 0;
  bool has_val = false;
  double val_loss = 0;
  double step_s = 0;   // this step alone (its evaluation and checkpoint not included)
  double eval_s = 0;   // its evaluation (has_val)
  SegmentTimes times;  // the segment so far: this step and its evaluation included
};

struct TrainResult {
  std::vector<StepRecord> steps;  // the steps this call ran (after a resume: from there on)
  std::int64_t steps_done = 0;    // optimizer steps of the job done when the call returned
  SegmentTimes times;             // the whole call, final.h5 and the export included
  bool stopped = false;           // stopped early at a step boundary (checkpointed)
  StepDecision decision;          // the last step's agreed decision (a signal, even if finished)
  // ParallelOptions::nonfinite_stops: the step at which training met a non-finite value (0:
  // none), what it was (nonfinite_metric) and the value:
  //  - "loss" or "grad_norm": the step's own, reduced over the ranks (NaN, ±Inf); the step is
  //    not recorded and steps_done is the step before it;
  //  - "weights" or "optimizer_state" (an AdamW moment, the weights finite): the step's loss
  //    and norm were finite (it is recorded, steps_done is that step) but its update left
  //    them non-finite, found before a checkpoint (periodic, at a stop, or final.h5) would
  //    have saved them; the value is this rank's first such value (NaN when only another rank
  //    holds any).
  std::int64_t nonfinite_step = 0;
  std::string nonfinite_metric;
  double nonfinite_value = 0;
  std::size_t peak_device_bytes = 0;       // measured, largest over ranks
  std::size_t estimated_device_bytes = 0;  // the strategy's estimate (its busiest rank)
  std::vector<float> final_params;         // canonical flat layout
};

// One device: train_with_strategy with the one-device strategy ("single", a degree-1 DDP) on
// this process alone (MPI_COMM_SELF when MPI is initialised, which checkpoints need), with the
// final parameters gathered into TrainResult::final_params.
TrainResult train_single_device(const TrainJob& job, const TrainOptions& options);

}  // namespace saturn
