// Lower bounds on the makespan of any plan (valid in continuous time, whatever the method).
//
//  - longest:  the longest unavoidable job, max_j min_c t_j(c).
//  - area:     the "dual approximation" bound: the least T such that the jobs, each in its
//              least-work configuration among those finishing within T, fit in devices x T
//              (Ludwig-Tiwari / Mounie-Rapine-Trystram). It dominates `longest`.
//  - packing:  the same test with device counts mapped through dual-feasible functions
//              (Fekete-Schepers u^(k)): a job using more than half a node's devices excludes
//              another such job from that node, which the plain area test ignores.
//  - per node group: the tests restricted to the nodes some jobs are confined to (jobs that
//              only fit the big nodes, or the nodes with enough memory).
//  - node assignment: a single-node job's whole area lies on one node, so the jobs' areas pack
//              into the nodes like items into bins; dual-feasible functions of the fractions
//              bound how many fit (catches, e.g., six jobs each needing over half a node's
//              time on four nodes).
//  - configuration LP: per node type, time is shared among "patterns" (sets of jobs that fit
//              a node together); every job must complete in options no longer than T. Solved
//              by column generation (bounds_lp.cpp). It captures how devices pack into nodes,
//              which the area tests only approximate, and heterogeneous node types exactly.
// The result is the maximum. Computed exactly, not by bisection: the work function is a step
// function of T with breakpoints at the configurations' times.
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "solver/clock.hpp"
#include "solver/options.hpp"
#include "solver/schedule.hpp"

namespace saturn::solver {

struct Bounds {
  double longest = 0.0;
  double area = 0.0;        // plain dual-approximation bound on the whole cluster
  double packing = 0.0;     // best dual-feasible-function bound, whole cluster
  double groups = 0.0;      // best bound on a node group
  double assignment = 0.0;  // job-to-node packing bound
  double lp = 0.0;          // configuration LP (0 when skipped or out of time)
  double best = 0.0;
  std::string which;  // name of the bound that is best
};

// lp_time_limit_s: budget for the configuration LP (0 skips it).
Bounds compute_bounds(const Prepared& prepared, double lp_time_limit_s = 2.0);

// The configuration-LP bound alone, searched from `from` (a valid bound) upwards; 0 when it
// could not be computed within the time limit.
double configuration_lp_bound(const Prepared& prepared, double from, double time_limit_s);

// The node-assignment bound solved exactly rather than through dual-feasible functions: in a
// plan of makespan T every single-node job puts at least its least node-time (devices/node
// devices x time, over options no longer than T) on one node, and a whole-node job its time on
// each of its nodes, so these items must pack into the nodes with at most T each. A search
// decides that packing for trial values of T between `lower` and `upper` (bisection); T is
// proven a bound only when the search shows no packing exists, so running out of time or
// search nodes never overstates the bound. The jobs a packing puts on a node must also pass,
// in the time whole-node jobs leave it, the node's configuration LP (preemptive) and an exact
// test of its six (then eight) biggest jobs without preemption: some choice of their options
// and some order must list-schedule within that time, the other jobs' least area fitting too;
// a node given more than eight jobs then passes only if all of them fit exactly
// (node_schedule_fits), since small jobs counted by area can pass where they do not fit.
// Returns the best bound (at least `lower`).
double packing_search_bound(const Prepared& prepared, double lower, double upper,
                            double time_limit_s);

// The node-packing search above turned into one for plans: a plan of makespan at most T (up to
// 1e-9 relative), found by assigning every job to nodes (or whole-node options) such that each
// node's jobs schedule exactly within the time left to them (the exact node search, at most
// `node_budget` states per node's job set). Whole-node jobs run first on their nodes. Meant for
// small clusters of few big jobs, where local search on lists misses narrow packings. 1: `out`
// holds such a plan; 0: none exists (a proof: the search ended with every node test decided);
// -1: none found within the limits, or the problem has pinned jobs.
//
// With `narrow_small`, jobs whose least area is at most 3% of a node's (devices x T) keep only
// options within 10% of that least area: the exact node tests branch far less on the many small
// jobs of bigger instances, and the result is never 0 (no proof).
int packing_schedule(const Prepared& prepared, double T, double time_limit_s, long node_budget,
                     Schedule& out, bool narrow_small = false);

// For a one-node problem: the least time the node needs to run all its jobs in options no
// longer than T, preemption allowed (the configuration LP's value at T). NaN when the LP could
// not be solved by the deadline. Used by the node-packing search to test the jobs it puts on a
// node.
double single_node_lp_time(const Prepared& node_problem, double T,
                           SolverClock::time_point deadline);

// Whether jobs, each with its options (devices, time) on one node of `devices` devices, can all
// run there within `avail` without preemption: an exact search over semi-active schedules
// (bounds_search.cpp), which the node-packing search runs on nodes given more than eight jobs.
// 1: a schedule exists; 0: none exists (a proof); -1: out of budget (search states) or time.
int node_schedule_fits(int devices, double avail,
                       const std::vector<std::vector<std::pair<int, double>>>& jobs, long budget,
                       double time_limit_s);

// When every option's time is a whole multiple of one grid g (integers, as in profiles rounded
// to seconds): every plan's makespan is then a multiple of g, since a plan can be left-shifted
// until each job starts at 0 or at another's end without lengthening it, so the optimum is a
// sum of option times. Returns g, or 0 when the times are not all whole numbers.
double makespan_grid(const Prepared& prepared);

// A bound raised to the next multiple of `grid` (unchanged when grid is 0). The bound may sit a
// hair above a multiple through rounding (1605.0000001 for 1605): that is not rounded up.
double round_up_to_grid(double bound, double grid);

}  // namespace saturn::solver
