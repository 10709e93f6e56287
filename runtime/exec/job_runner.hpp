// One segment of one job on its group of ranks: set up the strategy, resume from the job's
// newest checkpoint if it has one, train until the job's last step or until the coordinator (or
// a stop signal) asks it to stop, checkpoint, report. Every rank of the group calls it.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct SegmentLaunch {
  std::string job_id;
  std::string strategy;            // a parallel::strategy_names() entry
  std::vector<std::string> knobs;  // KEY=VALUE (parallel::parse_knobs)
  std::vector<int> ranks;          // world ranks, ascending; ranks[0] leads
  int segment = 0;                 // 0, 1, ... per job (a re-plan starts a new one)
  int tag = 0;                     // MPI_Comm_create_group tag, unique among live launches
  // Stop (checkpointed) at this step: the job's next selection rung. 0: none.
  std::int64_t pause_step = 0;

  nlohmann::json to_json() const;
  static SegmentLaunch from_json(const nlohmann::json& j);
};

struct SegmentOutcome {
  std::string status;     // finished | stopped | failed
  std::int64_t step = 0;  // optimizer steps done when the segment ended
  std::string reason;     // failed: why; stopped: "signal N (SIGNAME)" or "re-plan"
  int signal = 0;         // stopped by a stop signal some rank of the job received: its number
  bool has_val = false;
  double val_loss = 0;
  double peak_device_bytes = 0;
  // Stopped by the job's `early_stop:` rule: EarlyStopHit::to_json(); null otherwise.
  nlohmann::json early_stop;

  nlohmann::json to_json() const;
};

struct RunContext {
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm control = MPI_COMM_NULL;  // the coordinator's channel (rank 0)
  std::filesystem::path run_dir;
  const Workload* workload = nullptr;
  std::size_t device_capacity = 0;       // per rank, bytes (0: unlimited)
  std::size_t host_capacity = 0;         // per rank, bytes (0: unlimited)
  DeviceKind device = DeviceKind::kCpu;  // the backend every job trains on
  int device_index = -1;                 // this rank's device (launch binding), -1: its own
  double progress_interval_s = 1.0;
};

// Collective over `group` (the launch's ranks). Never throws for a job's own failure: the
// group agrees on it and returns status "failed" with the reason.
SegmentOutcome run_segment(const RunContext& ctx, const SegmentLaunch& launch, MPI_Comm group);

}  // namespace saturn::exec
