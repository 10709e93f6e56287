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
#include "runtime/comm/communicator.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct RunContext {
  MPI_Comm world = MPI_COMM_WORLD;
  MPI_Comm control = MPI_COMM_NULL;  // the coordinator's channel (rank 0)
  std::filesystem::path run_dir;
  const Workload* workload = nullptr;
  Resources resources;  // every job's backend, this rank's device, the memory per rank
  double progress_interval_s = 1.0;
};

// Collective over `group` (the launch's ranks). Never throws for a job's own failure: the
// group agrees on it and returns SegmentStatus::kFailed with the reason.
SegmentOutcome run_segment(const RunContext& ctx, const SegmentLaunch& launch,
                           comm::Communicator& group);

}  // namespace saturn::exec
