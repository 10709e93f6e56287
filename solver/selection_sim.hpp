// Simulates model selection (successive halving, ASHA) on a batch, to compare selection inside
// the batch (Saturn: decisions as soon as they are determined, freed devices re-planned at
// once) with selection outside it (a tuner on top: each rung a separate batch, devices idle
// until the whole rung has finished). Run times are the estimates (no error model), so the
// difference between the policies is the selection's own.
//
// Metric: a seeded validation loss per job and rung (selection_metric), lower is better; ties
// go to the lower job index. Both policies see the same values, so successive halving stops the
// same jobs under both.
//
// inside: every job runs toward its next rung. Successive halving knows how many jobs reach
//   rung k (N_0 = all, N_k = rung_keep(N_{k-1})): a job that has reported is a certain winner
//   once its worst possible rank is within the keep, a certain loser once its best possible
//   rank is beyond it. Winners continue in place, losers stop at once, undecided jobs pause
//   (checkpoint, devices freed) until decided, or train on speculatively (speculate);
//   promoted paused jobs resume paying restart_cost_s. ASHA promotes a job at rung k when it is in
//   the top floor(n/eta) of the n results at rung k so far (also later, when more results come in);
//   when no more job can reach rung k, the best max(1, floor(n/eta)) not yet promoted are, and the
//   rest stop. Every event that changes who runs re-plans with replan() (restart cost, threshold),
//   the remaining work planned as expected work (selection.hpp) or as full steps.
// outside: batch s runs every surviving job from rung s-1 to rung s (the last batch to the
//   full steps), planned by solve() and executed as planned; after a batch the tuner applies
//   the rule to all its results (for ASHA that is successive halving: all results are in);
//   jobs resumed from a checkpoint pay restart_cost_s.
#pragma once

#include <string>
#include <vector>

#include "solver/replan.hpp"
#include "solver/selection.hpp"

namespace saturn::solver {

// The seeded validation loss of job `job` at rung `rung`: a per-job quality plus a smaller
// per-rung term, so rankings mostly persist across rungs, as in real sweeps.
double selection_metric(unsigned seed, int job, int rung);

struct SelectionSimOptions {
  enum class Policy { inside, outside };
  Policy policy = Policy::inside;
  SelectionRule rule;
  // inside: what each (re-)plan is told a job's remaining work is. expected_work: its
  // expected steps under the rule (selection.hpp); full_steps: all its steps, as if no job
  // stopped; next_rung: the steps to its next decision (its next rung, or its end).
  enum class Planning { expected_work, full_steps, next_rung };
  Planning planning = Planning::expected_work;
  // inside: a job whose decision is pending trains on in place (to its next boundary at
  // most) instead of checkpointing and freeing its devices; wasted steps if it loses, no
  // restart and no idle wait if it wins. Re-plans may still move it (restart cost).
  bool speculate = false;
  unsigned metric_seed = 1;
  ReplanOptions replan;  // restart cost, threshold and the solver settings of every (re-)plan
};

struct SelectionDecision {
  int job = -1;
  int rung = -1;
  double time_s = 0.0;
  bool promoted = false;  // false: stopped
  int reported = 0;       // results at the rung when decided
};

struct SelectionSimResult {
  // Every job has stopped or completed its full steps (under successive halving: the last
  // survivor completes).
  double selection_time_s = 0.0;
  std::vector<int> stopped_rung;  // per job: the rung it stopped at, -1 when it ran to the end
  std::vector<SelectionDecision> decisions;       // in time order
  std::vector<std::vector<int>> reports;          // per rung: jobs in the order they reported
  std::vector<std::vector<double>> report_times;  // per rung: when each of those reported
  int plans = 0, restarts = 0;
  double solve_time_s = 0.0;
  double busy_device_s = 0.0;  // device-seconds held by jobs (restart cost included)
};

const char* to_string(SelectionSimOptions::Policy policy);
const char* to_string(SelectionSimOptions::Planning planning);

// Throws SolverError on a bad rule, a job without steps, or a job whose last rung is not
// below its steps (every job must reach every rung before it ends).
SelectionSimResult simulate_selection(const Problem& problem, const SelectionSimOptions& options);

// A lower bound on the time any policy needs to finish successive halving on `problem` when the
// jobs stop where `stopped_rung` says (-1: runs to its full steps; e.g. a simulated result's),
// restart costs and solve times left out. The larger of:
//  - area: every job's work up to its stop, each in its configuration with the fewest
//    device-seconds (eligible on the cluster), over the cluster's devices;
//  - each job's own work in its fastest eligible configuration;
//  - the last decision: a job runs past the last rung only once successive halving has
//    determined it a winner there, which takes at least N - keep + 1 of the N jobs reaching
//    that rung to have reported; none can report sooner than its fastest time to the rung, and
//    the survivor's rest takes at least its fastest time after that.
// What no inside policy can beat, so outside / bound is the most selection inside the batch
// could gain. Throws SolverError as simulate_selection does.
double selection_time_lower_bound(const Problem& problem, const SelectionRule& rule,
                                  const std::vector<int>& stopped_rung);

}  // namespace saturn::solver
