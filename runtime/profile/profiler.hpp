// The trial runner's front door: from a workload and a cluster to the solver's problem.
//
//   profile_workload (collective, under mpirun): fingerprint the hardware, calibrate it unless
//   the store already has, estimate every candidate configuration of every distinct job shape,
//   prune (infeasible by memory; dominated; not among the analytically best few per device
//   count; slower than a smaller device count), try the rest for real on disjoint rank groups
//   unless the store already holds them, write the store, and return one solver::Job per job
//   with per-configuration details (how to run it, estimate and measurement).
//
//   profile_from_store (one process, no trials): the same problem from the store and the
//   analytic model, for `saturn plan` on a machine that is not the one profiled.
//
// Jobs that differ only in learning rate, schedule, seed or steps share one shape signature, so
// they share estimates and trials; each job's time_s is its own steps × step time plus its own
// evaluations.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/profile/calibration.hpp"
#include "runtime/profile/cost_model.hpp"
#include "runtime/profile/file_system.hpp"
#include "runtime/profile/hardware.hpp"
#include "runtime/profile/store.hpp"
#include "runtime/profile/trials.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/problem.hpp"

namespace saturn::profile {

struct ProfileOptions {
  std::filesystem::path store;  // the profile store (HDF5); empty: nothing read or written
  bool trials = true;           // false: estimates and stored measurements only
  int trials_per_degree = 1;    // at most this many configurations per (shape, device count)...
  double trial_window = 0.10;   // ...among those within this fraction of the best estimate
  // A device count whose best estimate is this much slower than a smaller count's is not tried
  // (using more devices for longer never helps the makespan).
  double dominance_margin = 0.10;
  // The strategy a user would pick by hand for every job ("current practice", the paper's
  // baseline: usually FSDP on a whole node). Its whole-node configuration of every job shape is
  // tried and offered to the solver even when another configuration of that size is faster or
  // smaller, so the current-practice baseline runs and predicts what it names. "": none.
  std::string current_practice;
  bool refresh = false;      // measure again what the store already holds
  bool recalibrate = false;  // calibrate again even if the store has this hardware
  // A store shared by every run of this user that keeps only calibrations (once per hardware,
  // not once per run directory). Read when `store` lacks this hardware; a full (not quick)
  // calibration is added to it. Empty: none.
  std::filesystem::path calibration_cache;
  TrialOptions trial;
  CalibrationOptions calibration;
  // profile_from_store: the stored hardware to plan for ("" = this machine's, or the store's
  // only one).
  std::string hardware_id;
  bool quiet = true;  // progress lines on rank 0 when false
};

// SATURN_CALIBRATION_CACHE when set ("" or "none": no cache), else
// ${XDG_CACHE_HOME:-$HOME/.cache}/saturn/calibration.h5 (empty when neither is set).
std::filesystem::path default_calibration_cache();

struct ProfileRequest {
  const Workload* workload = nullptr;
  solver::Cluster cluster;          // what the solver plans for
  std::vector<int> device_rank;     // global device id -> world rank (empty: ranks by host)
  std::vector<std::int64_t> steps;  // per workload job (empty: train.steps); 0 leaves a job out
  // The backend the jobs (and the trials) run on, and the memory per rank: device_bytes 0 means
  // the cluster's memory_gib, if any; host_bytes 0, unlimited.
  Resources resources;
  // How fast the run's checkpoints reach its file system (the same on every rank). Not
  // measured: checkpoints are priced at 0.
  WriteRates checkpoint_writes;
  // When set, profile_workload measures checkpoint_writes with it: on whichever rank the trials'
  // schedule gives it, with the probes after the trials, the other ranks computing (the
  // contention checkpoints have in the batch).
  // It must not throw for a directory that cannot be written: it returns unmeasured rates. Not
  // called when the calibration has the rates of checkpoint_file_system (file_system_id of the
  // directory it measures; "": always measure): they are measured once per file system.
  std::function<WriteRates()> measure_checkpoint_writes;
  std::string checkpoint_file_system;
};

// How to run one configuration of the problem, and where its numbers came from.
struct ConfigDetail {
  std::string strategy;            // for parallel::make_strategy
  std::vector<std::string> knobs;  // for parallel::parse_knobs
  int degree = 1;
  int nodes = 1;
  std::string signature;
  std::string key_id;  // the store entry
  CostEstimate estimate;
  std::optional<Measurement> measured;
  double correction = 1.0;  // applied to the estimate when not measured (median trial/estimate)
  // What time_s was computed from (run_parts): an optimizer step, an evaluation, a checkpoint
  // write, a segment's start.
  double step_s = 0;
  double eval_s = 0;
  double checkpoint_s = 0;
  double start_s = 0;
  std::string source;  // "trial" | "estimate"
  UnitCosts costs() const { return {step_s, eval_s, checkpoint_s, start_s}; }
};

// Every configuration considered, for tables and benchmarks.
struct ConfigRow {
  std::string signature;
  std::string model_name;
  std::vector<std::string> jobs;
  ConfigSpec config;
  std::string key_id;
  CostEstimate estimate;
  std::optional<Measurement> measured;
  bool tried_now = false;   // measured by this run
  bool in_problem = false;  // offered to the solver
  std::string status;       // what the profiler did with it and why
};

struct ProfileStats {
  int jobs = 0;
  int signatures = 0;
  int configs = 0;           // estimated
  int feasible = 0;          // feasible by the estimate
  int trials_run = 0;        // by this run
  int trials_failed = 0;     // of those, infeasible in reality
  int trials_reused = 0;     // taken from the store
  bool calibrated = false;   // this run calibrated
  double load_factor = 1.0;  // Calibration::load_factor applied to this run's estimates
  double calibration_s = 0;
  double trials_s = 0;
  double trials_expected_s = 0;  // the trial schedule's length by the estimates
  double total_s = 0;
};

struct ProfileResult {
  std::vector<solver::Job> jobs;                   // one per profiled workload job
  std::vector<std::vector<ConfigDetail>> details;  // details[j][c] describes jobs[j].configs[c]
  std::vector<std::size_t> job_index;              // jobs[j] is workload job job_index[j]
  std::vector<ConfigRow> rows;
  Hardware hardware;
  Calibration calibration;
  bool nominal_calibration = false;  // no calibration for this hardware: round numbers
  ProfileStats stats;
  WriteRates checkpoint_writes;  // what the checkpoints were priced at
};

// Collective over `world` (every rank passes the same request and options; rank 0's store file
// is read and written). The result is identical on every rank. InputError when a job fits no
// configuration (the message lists each strategy's reason).
ProfileResult profile_workload(const ProfileRequest& request, comm::Communicator& world,
                               const ProfileOptions& options);

// No MPI collectives and no trials: estimates and the store's measurements for the hardware
// options.hardware_id names (or the only one in the store; nominal numbers when it has none).
ProfileResult profile_from_store(const ProfileRequest& request, const ProfileOptions& options);

// Jobs added while a batch runs (`saturn submit`): what profile_workload gives them from the
// run's own store and calibration, without trials, MPI or file I/O (rank 0's coordinator
// thread, while other threads write checkpoints). A shape the store holds measurements of (the
// usual case: a submission varies learning rate, seed or steps of the batch's models) keeps
// them; configurations not measured get calibrated estimates, corrected like untried ones at
// start (source "estimate" in the plans). request.steps leaves the batch's own jobs out.
ProfileResult profile_added_jobs(const ProfileRequest& request, const ProfileOptions& options,
                                 const ProfileStore& store, const Hardware& hardware,
                                 const Calibration& calibration);

// `saturn plan WORKLOAD.yaml`: the workload (its data files need not exist here), the cluster
// (cluster_spec, else the workload's cluster:, else the stored hardware's layout) and the
// solver problem from the store (default runs/<name>/profiles.h5 when it exists) and the
// analytic model. InputError for a bad workload, spec or store choice.
struct WorkloadProblem {
  Workload workload;
  solver::Problem problem;
  ProfileResult profile;
  std::filesystem::path store;  // the store read ("" when none)
};
WorkloadProblem problem_from_store(const std::filesystem::path& workload,
                                   const std::string& cluster_spec,
                                   const std::filesystem::path& store,
                                   const std::string& hardware_id = "");
// One line on where a problem's times came from: "6 configurations from trials, 14 estimated
// (hardware ..., store ...)".
std::string describe_sources(const WorkloadProblem& input);

// The cluster a stored hardware fingerprint describes (nodes of ranks_per_node devices).
solver::Cluster cluster_of(const Hardware& hardware);

// Every world rank by node, from the request's device map or else by host.
RankTopology topology_of(const ProfileRequest& request, const std::vector<int>& node_of_rank);

// The table `saturn profile` prints: per shape, every configuration with its estimate, its
// measurement and the error, and what happened to it.
std::string format_profile_table(const ProfileResult& result, bool all_rows = false);
std::string format_profile_summary(const ProfileResult& result);

}  // namespace saturn::profile
