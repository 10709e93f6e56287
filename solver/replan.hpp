// Re-planning ("introspection" in the Saturn paper): at time `now`, with some jobs done, some
// running and the rest waiting, solve the remaining work again and adopt the new plan only
// when it finishes sooner than the current one by a threshold.
//
// The remaining instance has the time origin at `now`. A waiting job keeps its configurations,
// times scaled to its remaining work. A running job may keep running where it is (a pinned
// configuration: its current devices, remaining time, no cost) or be checkpointed and
// restarted in any configuration, paying `restart_cost_s` (checkpoint + reload) on top.
// The current plan, projected forward (same configurations, nodes and order, started as soon
// as devices free up), is what a new plan has to beat.
#pragma once

#include <string>
#include <vector>

#include "solver/solve.hpp"

namespace saturn::solver {

struct JobState {
  enum class Phase { waiting, running, done };
  Phase phase = Phase::waiting;
  double progress = 0.0;     // fraction of the job's work done, 0..1
  int config = -1;           // running: index into the job's configs
  std::vector<int> devices;  // running: its devices (global ids)
  // Multiplies every configuration's estimated time (1: the estimate holds). Re-planning with
  // learned step times passes the observed ratio here.
  double time_scale = 1.0;
  std::vector<double> config_scale;  // per configuration, overrides time_scale when non-empty
};

struct ReplanOptions {
  double restart_cost_s = 120.0;  // checkpoint + reload of a job that changes configuration
  bool allow_restarts = true;     // false: running jobs always keep running where they are
  double threshold = 0.05;        // adopt when better by this fraction of the current plan...
  double threshold_s = 0.0;       // ...and by at least this many seconds
  SolveOptions solve;
};

// How the remaining instance maps back onto the original one.
struct RemainingMap {
  std::vector<int> job;                    // remaining job -> original job index
  std::vector<std::vector<int>> config;    // remaining job, config -> original config index
  std::vector<std::vector<char>> restart;  // ... and whether it restarts a running job
};

struct ReplanResult {
  Problem remaining;  // jobs not done, time origin at `now`
  RemainingMap map;
  Plan current;    // the current plan projected forward, in `remaining`'s terms
  Plan candidate;  // the new solve
  bool adopted = false;
  std::string reason;
  const Plan& chosen() const { return adopted ? candidate : current; }
};

// The remaining instance (see above). A running job's first configuration is the pinned one.
Problem remaining_problem(const Problem& original, const std::vector<JobState>& states,
                          const ReplanOptions& options, RemainingMap* map);

// current_plan: the plan being followed, in the original problem's terms (absolute times);
// waiting jobs keep its configurations, nodes and order in the projection.
ReplanResult replan(const Problem& original, const Plan& current_plan,
                    const std::vector<JobState>& states, double now, const ReplanOptions& options);

}  // namespace saturn::solver
