// The solver's working form of a Problem: per job, the configurations that can run on the
// cluster and survive Pareto filtering ("options"), with their eligible nodes, and classes of
// identical jobs (hyper-parameter sweeps repeat the same job many times; the MILP aggregates
// them and the heuristics treat them alike).
#pragma once

#include <vector>

#include "solver/problem.hpp"

namespace saturn::solver {

struct Option {
  int config = -1;  // index into Job::configs
  int devices = 0;  // devices used on each node it runs on
  int nodes = 1;    // nodes it spans (> 1: whole nodes)
  double time_s = 0.0;
  std::vector<int> eligible;  // nodes it may use; for a pinned option exactly its nodes
  bool pinned = false;        // must start at time 0 on Config::pinned_devices
  // Device-seconds it holds at the least: devices*time, or for whole nodes the capacity of the
  // smallest eligible nodes times time. Used by allotment and area bounds.
  double min_area = 0.0;

  bool whole_nodes() const { return nodes > 1; }
};

struct Prepared {
  const Problem* problem = nullptr;
  std::vector<std::vector<Option>> options;  // per job; never empty after prepare()
  std::vector<int> job_class;                // jobs with identical options share a class
  int num_classes = 0;

  const Cluster& cluster() const { return problem->cluster; }
  size_t num_jobs() const { return options.size(); }
  // Devices an option holds on node n while it runs (whole node for multi-node options).
  int usage(const Option& o, int node) const;
};

// Keeps, per job, the feasible configurations not dominated by another one that is no slower
// and needs no more resources (fewer or equal devices, a superset of eligible nodes, fewer or
// equal whole nodes). Dropping dominated configurations never loses an optimal plan: the
// dominating one fits wherever the dominated one ran, and finishes no later.
// Pinned configurations are always kept. Throws SolverError via check_problem on bad input.
Prepared prepare(const Problem& problem, bool pareto = true);

}  // namespace saturn::solver
