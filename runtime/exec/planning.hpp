// What the planner needs for the remaining work of a batch: each unfinished job's candidate
// configurations (strategy, devices, nodes, time for its remaining steps, memory) from the
// trial runner's profiles, and how to run each one (strategy name and knobs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/exec/cluster.hpp"
#include "runtime/exec/coordinator.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct PlanningRequest {
  const Workload* workload = nullptr;
  const RankMap* ranks = nullptr;
  std::vector<std::int64_t> remaining_steps;  // per workload job; 0 = finished (left out)
  std::filesystem::path store;                // profile store (HDF5)
  Resources resources;                        // the jobs' backend, this rank's device, memory
  bool quick_calibration = false;
  bool trials = true;
  std::string current_practice;           // profile::ProfileOptions::current_practice
  profile::WriteRates checkpoint_writes;  // the run directory's (profile::ProfileRequest)
  // Measures them beside the trials (profile::ProfileRequest::measure_checkpoint_writes).
  std::function<profile::WriteRates()> measure_checkpoint_writes;
  std::string checkpoint_file_system;  // what it measures (profile::file_system_id)
};

// Collective over `world`: trials run on disjoint rank groups, results land in the store.
// The result is valid on rank 0 (other ranks get an empty one). Throws InputError when a job
// fits no configuration on the cluster.
// `startup` (rank 0, optional): the whole profile result, for AddedJobPlanner.
PlanningInput build_planning_input(const PlanningRequest& request, comm::Communicator& world,
                                   profile::ProfileResult* startup = nullptr);

// Plans the jobs `saturn submit` adds while the batch runs (rank 0's coordinator): from the
// run's profile store, hardware and calibration as build_planning_input left them, with no
// trials (profile::profile_added_jobs says what that gives a job).
class AddedJobPlanner {
 public:
  // Reads the store file: call before other threads of this process use HDF5.
  AddedJobPlanner(PlanningRequest request, const profile::ProfileResult& startup);
  // Workload jobs from `first` on.
  PlanningInput plan(const Workload& workload, std::size_t first) const;

 private:
  PlanningRequest request_;
  profile::ProfileStore store_;
  profile::Hardware hardware_;
  profile::Calibration calibration_;
};

}  // namespace saturn::exec
