// A discrete-event simulator that executes plans with actual run times drawn around the
// estimates, to compare re-planning policies at scales this machine cannot run.
//
// Error model: jobs with identical configurations (a sweep over learning rates, say) share
// one factor, actual = estimate x (1 + U(-error, error)) x (1 + U(-config_error,
// config_error)) per configuration. So one job's observed speed tells about its siblings,
// as in a real sweep.
// Execution: every device runs the jobs the plan gives it in the plan's start order; a job
// starts as soon as all its devices (all devices of its nodes when it spans whole nodes) are
// free and it is next in each of their queues. Early finishes pull work forward, late ones
// push it back, without re-planning.
// Policies: static (the first plan, executed as above); replan (re-plan when a job ends off
// its planned end by more than `deviation`, and every `interval_s` if set; adopt by the
// threshold of ReplanOptions; restarted jobs pay the restart cost); oracle (plan with the
// actual times, executed statically: what perfect estimates would give).
#pragma once

#include <string>
#include <vector>

#include "solver/replan.hpp"

namespace saturn::solver {

struct SimOptions {
  enum class Policy { static_plan, replan, oracle };
  Policy policy = Policy::replan;
  double error = 0.2;
  double config_error = 0.05;
  unsigned seed = 1;
  double interval_s = 0.0;  // periodic re-planning; 0: only on early or late finishes
  double deviation = 0.05;  // of the job's planned run time
  bool learn = true;        // re-plans use the step times observed so far
  int max_replans = 0;      // 0: 4 x jobs
  SolveOptions initial;     // the first solve
  ReplanOptions replan;     // re-planning (restart cost, threshold, solver settings)
};

struct SimResult {
  double makespan_s = 0.0;          // as executed
  double planned_makespan_s = 0.0;  // the first plan's estimate
  int replans = 0, adopted = 0, restarts = 0;
  double solve_time_s = 0.0;     // all solves together
  std::vector<std::string> log;  // one line per re-plan
};

const char* to_string(SimOptions::Policy p);

// Actual run time of every configuration of every job under the error model (same seed, same
// draw), for tests and the oracle.
Problem actual_problem(const Problem& estimated, const SimOptions& options);

// `initial`, when given, is the first plan (made for `estimated`) instead of a fresh solve, so
// that policies are compared on the same plan; the oracle always plans with the actual times.
SimResult simulate(const Problem& estimated, const SimOptions& options,
                   const Plan* initial = nullptr);

}  // namespace saturn::solver
