// Training one job on one device: the loop of `saturn train` (micro-batches, gradient
// accumulation, clipping, schedule, AdamW), periodic validation, progress and metrics.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"

namespace saturn {

struct TrainJob {
  std::string id;
  ModelConfig model;
  TrainConfig train;
  std::filesystem::path train_data;
  std::filesystem::path val_data;
};

struct TrainOptions {
  std::filesystem::path job_dir;     // metrics.jsonl, final.h5 (empty: write nothing)
  std::size_t device_capacity = 0;   // bytes; 0 = unlimited
  std::size_t host_capacity = 0;     // bytes of host memory per rank (offload); 0 = unlimited
  double progress_interval_s = 2.0;  // progress lines at most this often (and at evaluations)
  bool quiet = false;
  std::int64_t max_steps = -1;  // stop early after this many steps (tests); -1: all
  bool resume = false;          // continue from the job's newest valid checkpoint, if any
  int keep_checkpoints = 3;     // step checkpoints kept in job_dir/checkpoints
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
};

struct TrainResult {
  std::vector<StepRecord> steps;  // the steps this call ran (after a resume: from there on)
  std::int64_t steps_done = 0;    // optimizer steps of the job done when the call returned
  bool stopped = false;           // stopped early at a step boundary (checkpointed)
  std::size_t peak_device_bytes = 0;
  std::vector<float> final_params;  // canonical flat layout
};

// Micro-batch size actually used: the configured one, or the largest divisor of the global
// batch that is at most 8 (so activations stay small and every micro-batch is full); for a
// reproducible job the canonical micro-batch (canonical_micro_batch).
std::int64_t resolve_micro_batch(const TrainConfig& train);

// Validates the job (data files readable and long enough, model fits the device capacity)
// without writing anything; throws InputError / OutOfMemoryError / IoError.
void check_trainable(const TrainJob& job, const TrainOptions& options);

TrainResult train_single_device(const TrainJob& job, const TrainOptions& options);

}  // namespace saturn
