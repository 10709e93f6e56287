// The coordinator of `saturn run`: a thread on rank 0 that owns the plan. It dispatches job
// segments to ranks as they become free (in plan order), follows progress, re-plans at the
// configured interval and whenever a job ends (moving running jobs through checkpoints when the
// new plan is better by the threshold), turns a stop signal into "checkpoint everything, exit
// 99", and writes the run directory's plans, timeline and summary. Rank 0's main thread trains
// like every other rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/exec/cluster.hpp"
#include "runtime/profile/profiler.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/baselines.hpp"
#include "solver/problem.hpp"
#include "solver/solve.hpp"

namespace saturn::exec {

// How to run configuration c of a job (strategy, knobs) and where its numbers came from; the
// solver itself only sees labels.
using ConfigDetail = profile::ConfigDetail;

// The remaining work, as the solver sees it: one solver::Job per workload job that is not yet
// finished (id = workload job id), times covering its remaining steps.
struct PlanningInput {
  std::vector<solver::Job> jobs;
  std::vector<std::vector<ConfigDetail>> details;  // [job][config]
};

// Who makes the plan: Saturn's solver, or one of the paper's baselines (solver/baselines.hpp)
// executed on the same profiles by the same executor, for bench/makespan.
// Policies: saturn, current-practice, optimus-greedy, min.
// nullopt for "saturn"; InputError for a name that is not a policy.
std::optional<solver::Baseline> parse_policy(const std::string& name);

struct CoordinatorSetup {
  std::filesystem::path run_dir;
  const Workload* workload = nullptr;
  RankMap ranks;
  PlanningInput planning;
  std::vector<std::int64_t> steps_done;  // per workload job (resume)
  std::vector<bool> finished;            // per workload job (resume: final.h5 exists)
  solver::SolveOptions solve;
  std::string policy = "saturn";  // one of kPolicies
  // The strategy label current practice prefers on a whole node ("": the fastest there).
  std::string current_practice = "fsdp";
  // Re-plan at the interval and at job ends. Baselines never re-plan: they are fixed plans whose
  // jobs start as their planned ranks free up, as a user's queue of jobs would.
  bool replan = true;
  double replan_interval_s = 600;
  double replan_threshold = 0.05;
  double elapsed_before_s = 0;  // wall time of earlier, interrupted runs of this directory
  double profiling_s = 0;       // this run's calibration and trials (before its clock started)
  int next_plan_index = 0;
  double progress_interval_s = 5;
  bool quiet = false;
  // The memory per rank the run was given (bytes, 0: unlimited): run_state.json keeps it, so a
  // resume plans for the same machine unless told otherwise.
  Resources resources;
  // On resume: run_state.json's "selection" (every rung metric and decision so far); null if none.
  nlohmann::json selection_state;
  // On resume: the jobs `saturn cancel` cancelled in earlier runs (run_state.json "cancelled").
  std::vector<std::string> cancelled;
  // On resume: the jobs their `early_stop:` stopped in earlier runs (run_state.json
  // "early_stopped": job id -> the rule's hit), checked by the executor.
  nlohmann::json early_stopped;
  // Plans jobs `saturn submit` adds (the workload's jobs from `first` on) as this run's profiles
  // give them; empty: the run takes no submissions.
  std::function<PlanningInput(const Workload& workload, std::size_t first)> plan_added_jobs;
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorSetup setup);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;
  // Runs until every rank has been sent its exit command; returns the batch's exit code
  // (0 all finished, 1 some job failed, 99 stopped by a signal with work left).
  int run(MPI_Comm control);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace saturn::exec
