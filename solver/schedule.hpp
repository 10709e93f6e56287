// Schedules without device ids, the serial list scheduler every method shares, and the
// greedy mapping of a schedule onto device ids.
//
// Device ids are never decided while scheduling: with per-node capacity respected at every
// instant, handing each job, in start order, any devices of its node(s) that are free at its
// start always succeeds (to_plan). So the heuristics and the MILP only track how many devices
// of each node are in use over time.
#pragma once

#include <limits>
#include <vector>

#include "solver/options.hpp"

namespace saturn::solver {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// Devices in use on one node over time: a step function, breakpoints ascending from 0.
class Timeline {
 public:
  explicit Timeline(int capacity);
  int capacity() const { return capacity_; }
  // Earliest t >= from with usage + need <= capacity throughout [t, t + duration).
  double earliest_fit(int need, double duration, double from) const;
  void add(double start, double end, int need);
  int used_at(double t) const;
  // Back to idle from time 0, keeping the storage (list scheduling reuses timelines).
  void reset();

 private:
  int capacity_;
  std::vector<double> t_;
  std::vector<int> used_;
};

struct Placement {
  int option = -1;         // index into Prepared::options[job]
  std::vector<int> nodes;  // ascending
  double start = 0.0;
  double end = 0.0;
};

struct Schedule {
  std::vector<Placement> jobs;  // per job
  double makespan = 0.0;
  bool complete() const;
};

// Durations in seconds, or in slots of `slot` seconds rounded up when slot > 0 (the MILP's
// discretisation; then every start and end is an integral number of slots).
double duration_of(const Option& o, double slot);

// Per-node timelines of the whole cluster and placement of options on them.
class ClusterState {
 public:
  explicit ClusterState(const Prepared& prepared);
  // Earliest start >= from for option o of duration `duration`, and the nodes to use. With
  // `fixed` non-null, exactly those nodes. Ties prefer smaller nodes (keeping big ones free
  // for the configurations that need them), then lower indices.
  Placement earliest(const Option& o, double duration, double from,
                     const std::vector<int>* fixed = nullptr) const;
  // The same into `out`, reusing its storage (no allocation once warm).
  void earliest_into(const Option& o, double duration, double from, const std::vector<int>* fixed,
                     Placement& out) const;
  void reserve(const Option& o, const Placement& p);
  // Every node idle again, storage kept.
  void reset();
  const Prepared* prepared() const { return prepared_; }
  const Timeline& node(int n) const { return nodes_[static_cast<size_t>(n)]; }

 private:
  const Prepared* prepared_;
  std::vector<Timeline> nodes_;
};

// Serial schedule generation: jobs in `order` (pinned options first, whatever the order), each
// at the earliest time its chosen option fits, gaps included (backfilling). `fixed_nodes`, if
// given, holds per job the nodes to use (empty = free choice).
Schedule list_schedule(const Prepared& prepared, const std::vector<int>& option,
                       const std::vector<int>& order, double slot = 0.0,
                       const std::vector<std::vector<int>>* fixed_nodes = nullptr);

// The same with a node chosen per job (`node[j]` >= 0) for single-node options that may run
// there; -1, or an option that spans whole nodes or cannot use that node, chooses freely.
// With the node part of the choice every active schedule is some (option, node, order): the
// greedy choice alone (earliest start, then the smaller node) misses schedules where a job
// should wait for the other node, which local search needs on clusters of several nodes.
Schedule list_schedule_on(const Prepared& prepared, const std::vector<int>& option,
                          const std::vector<int>& order, const std::vector<int>& node);

// list_schedule_on into `out`, reusing its storage and the timelines of `scratch` (a
// ClusterState of the same Prepared): local search lists hundreds of thousands of candidates,
// and allocating for each took a large share of its time. With a finite `cutoff` it stops
// as soon as a job ends after it and returns false; `out` then holds a partial schedule that
// must not be used (its makespan is the end that passed the cutoff). True when complete (a job
// that fits nowhere still makes the makespan infinite, as above).
bool list_schedule_on_into(const Prepared& prepared, const std::vector<int>& option,
                           const std::vector<int>& order, const std::vector<int>& node,
                           Schedule& out, ClusterState& scratch, double cutoff = kInfinity);

// Re-times a schedule in continuous time keeping each job's option and nodes, in the order of
// its start times. Never later than the input for any job when the input is a valid schedule
// with durations at least the continuous ones (the MILP's rounded-up slots, scaled to seconds).
Schedule compact(const Prepared& prepared, const Schedule& schedule);

// Jobs in start order (ties by job index).
std::vector<int> start_order(const Schedule& schedule);

// Maps a schedule onto device ids (greedy in start order; pinned options get their devices).
Plan to_plan(const Prepared& prepared, const Schedule& schedule);

// The schedule a plan describes (option indices recovered from config indices). Throws
// SolverError if a plan's configuration is not among the options (prepare with pareto=false
// to keep every feasible configuration).
Schedule from_plan(const Prepared& prepared, const Plan& plan);

}  // namespace saturn::solver
