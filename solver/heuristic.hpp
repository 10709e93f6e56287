// The constructive heuristics and local search that give every solve its first plan (and the
// MILP its warm start). Pareto filtering of configurations happens in prepare() (options.hpp).
//
//  1. Allotment from the area bound: for T = f x lower bound (several f), each job takes its
//     least-work option among those finishing within T (dual approximation), then LPT list
//     scheduling with backfilling, node-aware (list_schedule in schedule.hpp).
//  2. Greedy allotment during list scheduling: each job, in LPT order, takes the option and
//     node that finish earliest among options within a work budget of its least-work one.
//  3. Iterated local search from the best over (option, node, list position) per job: moves of
//     the jobs ending at the makespan (option, node, earlier in the list), random moves, exact
//     re-solves of small windows, ruin and recreate, kicks and epochs; improvements of
//     (makespan, jobs ending at it, sum of ends) are accepted.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "solver/schedule.hpp"

namespace saturn::solver {

struct HeuristicOptions {
  double time_limit_s = 2.0;  // local search stops at this wall time
  unsigned seed = 1;
  bool local_search = true;
  // Local search also stops after this many evaluations without improving its best (0: never;
  // it runs while time remains), and when the makespan reaches `stop_at` (a lower bound times
  // the gap tolerance: nothing much better exists).
  long stall_limit = 0;
  double stop_at = 0.0;
  // Called with the makespan whenever local search finds a better plan (the solve's log of
  // incumbents over time).
  std::function<void(double)> on_improvement;
};

struct HeuristicResult {
  Schedule schedule;        // continuous time
  std::vector<int> option;  // per job, index into Prepared::options
  std::vector<int> order;   // list order that produced `schedule`
  std::vector<int> node;    // per job its node, -1 (or empty: all) chosen by the list scheduler
  std::string method;       // which construction won, "+local" when local search improved it
  long evaluations = 0;
};

// Per job the least-work option with time <= T (the fastest when none is that fast).
std::vector<int> allot_within(const Prepared& prepared, double T);

// Longest-processing-time-first order for the given options (ties: more devices first).
std::vector<int> lpt_order(const Prepared& prepared, const std::vector<int>& option);

HeuristicResult heuristic_schedule(const Prepared& prepared, double lower_bound,
                                   const HeuristicOptions& options = {});

// Improves a given (option, order) by local search; used by re-planning to start from the
// previous plan.
HeuristicResult local_search(const Prepared& prepared, HeuristicResult start,
                             const HeuristicOptions& options);

}  // namespace saturn::solver
