// The front door of the SPASE solver: bounds, heuristics, then the MILP as an improver under a
// hard time limit; the best plan found, with its lower bound and gap.
#pragma once

#include <vector>

#include "solver/bounds.hpp"
#include "solver/clock.hpp"
#include "solver/heuristic.hpp"
#include "solver/milp.hpp"

namespace saturn::solver {

struct SolveOptions {
  Backend backend = Backend::glpk;
  double time_limit_s = 10.0;  // for the whole solve
  bool use_milp = true;
  // Share of the time limit the heuristics' local search may use before the MILP starts; time
  // the MILP leaves unused goes back to local search.
  double heuristic_share = 0.25;
  MilpOptions milp;  // slot and size settings (its time limit is set by solve)
  // When the MILP's slots are not exact: run it as a plan improver (durations rounded up), and
  // run a bound round on durations rounded down. Both off by default: on the benchmark
  // families (12 and 50 jobs) neither gave the best plan or bound once the node-packing
  // search tests nodes exactly, and local search uses their seconds better.
  bool milp_improver = false;
  bool milp_relaxed_bound = false;
  // Stop searching once the plan is within this fraction of the lower bound (the status is
  // "optimal" only for a zero gap).
  double gap_tolerance = 1e-4;
  unsigned seed = 1;
  // A portfolio of searches, one per thread, each a whole solve with its own seed (seed, seed +
  // kPortfolioSeedStride, ...) and its own work clock; the best plan wins (the lowest thread on a
  // tie) and the best bound of all is its bound. Thread 0 is the one-thread solve, so more
  // threads never give a worse plan, and a thread count gives the same plan on any load.
  int threads = 1;
  // What the time limit (and the log's times) count (solver/clock.hpp): the solver's work
  // (default: the same instance, options and seed give the same plan on any machine load), the
  // wall clock, or the solving thread's CPU time (a measurement device for shared machines).
  ClockBasis clock = ClockBasis::work;
  // Under the work basis, the wall seconds after which the solve ends whatever work is left
  // (then its plan depends on the machine's speed; SolverInfo::wall_capped says so). 0: three
  // times time_limit_s plus 5 s.
  double wall_cap_s = 0.0;
};

inline constexpr unsigned kPortfolioSeedStride = 7919;

// One line of a solve's log: at `time_s` into the solve, the best plan and the best bound.
struct SolveEvent {
  double time_s = 0.0;
  double makespan_s = 0.0;
  double lower_bound_s = 0.0;
  std::string what;  // which method improved the plan or the bound
};

// What happened inside a solve, for benchmarks and the CLI's verbose output.
struct SolveReport {
  std::vector<SolveEvent> log;  // every new incumbent and bound, in time order
  Bounds bounds;
  double heuristic_makespan_s = 0.0;
  std::string heuristic_method;
  long heuristic_evaluations = 0;
  double heuristic_time_s = 0.0;
  MilpResult milp;  // the last MILP round that ran (or why none did)
  bool milp_ran = false;
  int milp_rounds = 0;
  RelaxedBound relaxed;          // the MILP bound round on durations rounded down, if it ran
  double packing_bound_s = 0.0;  // after the node-packing search, if it ran
};

// Throws SolverError on a bad instance (see check_problem). The plan passes check_plan.
Plan solve(const Problem& problem, const SolveOptions& options = {}, SolveReport* report = nullptr);

// The entry point for planning from a workload: a cluster and jobs with their candidate
// configurations (from a cost model or profiles). The plan's jobs are in the given order.
Plan plan_jobs(const Cluster& cluster, const std::vector<Job>& jobs,
               const SolveOptions& options = {}, SolveReport* report = nullptr);

}  // namespace saturn::solver
