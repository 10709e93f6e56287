// The coordinator's re-planner: the remaining work as a solver problem, and re-plans solved in
// the background. The solver may take seconds, and while it does the coordinator must go on
// dispatching and hearing reports, or every rank that frees up waits for it (measured: two 5 s
// solves at each job end left all 4 ranks idle for 10 s). A request is served after the next
// dispatch, so jobs that the current plan starts on the freed ranks are part of the snapshot;
// a result whose snapshot is stale (a job started, ended or stopped meanwhile) is dropped and
// the re-plan made again.
#pragma once

#include <cstdint>
#include <future>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/exec/job_table.hpp"
#include "solver/problem.hpp"

namespace saturn::exec {

// map[k] = (job index in the table, config index in planning for each of the problem job's
// configurations).
using PlanJobMap = std::vector<std::pair<int, std::vector<int>>>;

// A plan to adopt: made for `problem`, whose jobs `map` names, at batch time `t` (its zero).
struct PlanAdoption {
  solver::Problem problem;
  solver::Plan plan;
  PlanJobMap map;
  std::string why;
  bool write_file = true;  // a new plan file (false: re-timed, nothing pending moved)
  double t = 0;
};

class Replanner {
 public:
  Replanner(const CoordinatorSetup& setup, const JobTable& table);
  ~Replanner();
  Replanner(const Replanner&) = delete;
  Replanner& operator=(const Replanner&) = delete;

  // The remaining work (pending, running, stopping jobs). Running jobs: `allow_moves` adds,
  // besides keeping their devices (pinned, remaining time), every other configuration at the
  // cost of a move (a checkpoint and a segment's start, as this run measured them). `keep_choices`:
  // pending jobs may only use their current configuration (re-timing the current plan rather than
  // re-planning).
  solver::Problem build_problem(bool allow_moves, bool keep_choices, PlanJobMap* map) const;

  // Asks for a re-plan; the first reason not yet served is kept.
  void request(const std::string& why);
  // Starts the solve of a requested re-plan at batch time t, unless one is in flight.
  // `version`: the coordinator's state version the snapshot is made from.
  void start(double t, std::uint64_t version);
  // The finished re-plan to adopt, if one finished: one that moves running jobs only when it
  // beats re-timing the current choices by the threshold. A stale one is requested again.
  std::optional<PlanAdoption> poll(std::uint64_t version, bool stopping);
  // The coordinator's own work so far: re-plans solved and their solve seconds (rank 0's CPU,
  // beside the training of the jobs there).
  int replans_solved() const { return solved_; }
  double replan_solve_s() const { return solve_s_; }

 private:
  struct Snapshot {
    std::string why;
    double t = 0;  // when the problems were built: the plans' time zero
    std::uint64_t version = 0;
    solver::Problem keep, move;
    PlanJobMap keep_map, move_map;
  };
  struct Result {
    solver::Plan keep, move;
    std::string error;
  };
  const CoordinatorSetup* setup_;
  const JobTable* table_;
  std::string wanted_;  // reason of a requested re-plan not yet started ("" = none)
  Snapshot snapshot_;   // what the re-plan in flight was made from
  std::future<Result> solving_;
  int solved_ = 0;
  double solve_s_ = 0;
};

}  // namespace saturn::exec
