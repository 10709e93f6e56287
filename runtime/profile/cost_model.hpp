// The analytic cost model: for one configuration (a strategy at a degree, with knobs) of one
// model and batch on calibrated hardware, the step time and its parts, and the memory per device.
//
// Memory and communication volume come from the strategy itself (Strategy::estimate(), whose
// figures mirror its allocations and what CommStats counts); this file turns them into time:
//
//   step = compute + bubble + exposed communication + host transfers + optimizer
//   compute   = (strategy's FLOPs on the busiest rank) / (FLOPs of one micro-batch of the
//               model) × (calibrated seconds of that micro-batch), ×(1 + block share / 3) with
//               recomputation (the blocks' forward runs twice);
//               FLOPs per token = L·(6·(matrix parameters of a block) + 12·T·d)/t + 6·d·V,
//               i.e. 6·N plus the attention term 6·L·T·d·2 (scores and values, causal mask
//               not discounted), tensor degree t dividing the blocks, not the head;
//   bubble    = compute × (p − 1)/m for a pipeline of p stages and m micro-batches (the idle
//               share (p − 1)/(m + p − 1) of the step);
//   comm      = Σ over the strategy's collectives of calls·α + bytes·β (calibrated per
//               collective and group size), × (1 − overlap) for reductions a strategy overlaps,
//               + the calibrated wait per synchronisation point (ranks arriving at different
//               times) × the points a step has;
//   transfers = host<->device bytes / copy bandwidth (offload);
//   optimizer = AdamW + clipping + zeroing per local parameter.
#pragma once

#include "runtime/backend/device.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"
#include "runtime/profile/calibration.hpp"
#include "runtime/profile/file_system.hpp"

namespace saturn::profile {

// One candidate configuration of a job: how it would run.
struct ConfigSpec {
  std::string strategy;            // a name from parallel::strategy_names()
  std::vector<std::string> knobs;  // "key=value" items for parallel::parse_knobs, sorted
  int degree = 1;                  // ranks
  int nodes = 1;                   // > 1: spans that many whole nodes

  // "recompute=true,schedule=gpipe", or "" for the defaults.
  std::string knobs_text() const;
  // "fsdp", "pipeline[schedule=gpipe]": the label the solver carries into the plan.
  std::string label() const;
};

struct CostEstimate {
  bool feasible = true;
  std::string reason;  // why not (the strategy's reason: shapes, memory)
  double step_s = 0;
  double compute_s = 0;
  double bubble_s = 0;
  double comm_s = 0;
  double transfer_s = 0;
  double optimizer_s = 0;
  double eval_s = 0;  // one evaluation (eval_batches micro-batches of validation data)
  std::size_t device_bytes = 0;
  std::size_t host_bytes = 0;
  std::uint64_t comm_bytes = 0;
  std::uint64_t host_transfer_bytes = 0;
  double flops = 0;
  std::int64_t micro_batch = 0;
  std::int64_t micro_batches = 0;
  int tensor_degree = 1;  // the tensor-parallel shard the compute was timed at
  std::string layout;
};

// Estimates `config` for one job's model and training settings on `backend` (its memory: the
// backend's precision and attention; its times: the calibration's rates). device_capacity and
// host_capacity (bytes, 0 = unlimited) make configurations that would not fit infeasible.
// Unknown strategies or knobs are InputError; a calibration of another backend than `backend`
// (Calibration::device: a CPU's rates for a CUDA job, or the reverse) is Error.
CostEstimate estimate_cost(const ModelConfig& model, const TrainConfig& train,
                           const ConfigSpec& config, const Calibration& calibration,
                           std::size_t device_capacity = 0, std::size_t host_capacity = 0,
                           DeviceKind backend = DeviceKind::kCpu);

// What one configuration of a job costs per unit of work: an optimizer step, an evaluation,
// a checkpoint write (periodic, a stop's, final.h5 with its export) and a segment's start (the
// launch, communicators, the strategy's set-up, the weights or checkpoint loaded).
struct UnitCosts {
  double step_s = 0;
  double eval_s = 0;
  double checkpoint_s = 0;
  double start_s = 0;
};

// A job's run time by what it is spent on (docs/profiling.md, "What a job's time is made of").
struct RunParts {
  double start_s = 0;
  double steps_s = 0;
  double evals_s = 0;
  double checkpoints_s = 0;
  double total() const { return start_s + steps_s + evals_s + checkpoints_s; }
  RunParts& operator+=(const RunParts& o);
};

// The work of one segment that runs steps (from, to] of a job: its evaluations (every
// eval_every steps, and at the job's last step) and checkpoints (every checkpoint_every steps,
// and one more at the segment's end: final.h5 at the job's last step, a stop's elsewhere unless
// a periodic one was just written).
struct SegmentWork {
  std::int64_t steps = 0;
  std::int64_t evals = 0;
  std::int64_t checkpoints = 0;
};
SegmentWork segment_work(const TrainConfig& train, std::int64_t from, std::int64_t to);

// The segment's time: one start, and its work at the configuration's unit costs.
RunParts run_parts(const TrainConfig& train, std::int64_t from, std::int64_t to,
                   const UnitCosts& costs);

// Bytes a checkpoint of the job holds: the trained tensors with their two AdamW moments (a
// LoRA job's adapters; its frozen base is not written), in fp32.
double checkpoint_bytes(const ModelConfig& model);

// Datasets in a checkpoint file: each trained tensor and its two AdamW moments.
double checkpoint_datasets(const ModelConfig& model);

// Points at which a checkpoint's ranks wait for each other: the parallel HDF5 file is written
// collectively, about five per dataset (its creation agreed, its writes, its close agreed) and a
// few per file. On ranks that share cores each can cost a partner's time slice.
double checkpoint_sync_points(const ModelConfig& model);

// One checkpoint of `model` by `degree` ranks: its bytes at the file system's rates, and its
// collective waits at `sync_s` each (none on one rank).
double checkpoint_seconds(const ModelConfig& model, int degree, const WriteRates& writes,
                          double sync_s);

}  // namespace saturn::profile
