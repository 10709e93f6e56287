// `saturn run`: the whole batch on every rank of MPI_COMM_WORLD. Rank 0 validates the workload,
// gathers the cluster, the trial runner fills the profiles, rank 0 plans and coordinates (in a
// thread) while every rank — rank 0 too — trains the job segments it is given.
#pragma once

#include "runtime/backend/device.hpp"

#include <filesystem>
#include <string>

namespace saturn::exec {

struct RunOptions {
  std::filesystem::path workload;  // WORKLOAD.yaml (resume: the run directory's copy)
  std::filesystem::path run_dir;   // default runs/<workload name>
  bool resume = false;
  // Per device (rank), e.g. 2GiB; "0": unlimited; empty: not given (0, or on --resume the
  // interrupted run's, from run_state.json).
  std::string device_memory;
  std::string host_memory;      // host memory per rank (offload's parameters and state), likewise
  std::filesystem::path store;  // profile store (default RUN_DIR/profiles.h5)
  bool trials = true;           // real trials (false: analytic estimates only)
  bool quick_calibration = false;  // fewer shapes and sizes when calibrating (coarser estimates)
  bool quiet = false;
  double progress_interval_s = 5;
  // Who plans: "saturn" (the SPASE solver) or a baseline (current-practice, optimus-greedy,
  // min) on the same profiles and executor. Baselines never re-plan.
  std::string policy = "saturn";
  // The strategy current practice gives every job on a whole node ("fastest": the job's fastest
  // whole-node configuration). Named explicitly, or implied by policy current-practice ("fsdp",
  // the paper's), its whole-node configuration of every job shape is tried and offered.
  std::string current_practice;
  DeviceKind device = DeviceKind::kCpu;  // the backend every rank trains (and profiles) on
  int device_index = -1;          // this rank's device as the launch binding chose it (-1: its own)
  bool replan = true;             // false: execute the first plan as made (no introspection)
  double replan_interval_s = -1;  // > 0 overrides the workload's introspection interval
};

// Collective over MPI_COMM_WORLD (MPI already initialised with MPI_THREAD_MULTIPLE). Returns
// this rank's exit code: 0 done, 1 some job failed, 2 bad input, 99 checkpointed by a signal.
int run_batch(const RunOptions& options);

}  // namespace saturn::exec
