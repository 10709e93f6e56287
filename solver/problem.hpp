// SPASE problem types: a cluster of (possibly heterogeneous) nodes, jobs with candidate
// configurations, and the plan that assigns each job one configuration, devices and a start.
// Pure C++: no MPI, no HDF5, nothing from runtime/, so plans can be made on a login node.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace saturn::solver {

// Bad instance or impossible request (a job no configuration fits, an empty cluster, a
// malformed file). The CLI maps it to its own input error (exit code 2).
class SolverError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits on what an instance may state. Beyond them arithmetic stops being meaningful (a sum of
// run times overflows to infinity; device ids no longer fit an int), and no real batch comes
// near: a million devices in one cluster, a job of 31 years.
inline constexpr int kMaxDevices = 1 << 20;  // devices in the whole cluster
inline constexpr double kMaxTimeS = 1e9;     // seconds, a configuration's run time

struct Node {
  std::string name;
  int devices = 0;
  double memory_gib = 0.0;  // per device; 0 means not stated (no memory check)
};

// Devices are numbered globally, node by node in the order of `nodes`: node 0's devices are
// 0..d0-1, node 1's follow. These global ids are the "ranks" of a plan.
struct Cluster {
  std::vector<Node> nodes;

  int total_devices() const;
  int first_device(int node) const;
  int node_of_device(int device) const;  // -1 when out of range
};

// Parses a --cluster SPEC: "NxG[:MEM]" (N nodes of G devices, e.g. "2x8:80GiB") or
// "G1+G2+..." for heterogeneous nodes (e.g. "8+4", "2+2+4+8:40GiB"). Nodes are named n0, n1, ...
// A bare memory number means GiB. Throws SolverError naming the spec on anything else, and on
// sizes past these limits (docs/workload.md):
inline constexpr int kMaxClusterNodes = 10000;
inline constexpr int kMaxNodeDevices = 1024;
inline constexpr long long kMaxClusterDevices = 65536;
inline constexpr double kMaxClusterMemoryGib = 1048576;  // per device (1 PiB)
Cluster parse_cluster_spec(const std::string& spec);
// The inverse, for messages and tables: "2x8:80GiB", "8+4".
std::string format_cluster(const Cluster& cluster);

struct Config {
  std::string strategy;     // a label carried into the plan unchanged
  int devices = 1;          // total devices
  int nodes = 1;            // > 1: takes that many whole nodes, devices/nodes ranks on each
  double time_s = 0.0;      // the job's whole remaining run time in this configuration
  double memory_gib = 0.0;  // per device; 0 = unknown
  std::string source;       // "trial" | "estimate" (empty: estimate)
  // Set only by re-planning for a running job that keeps its devices: the configuration must
  // start at time 0 on exactly these global device ids.
  std::vector<int> pinned_devices;

  bool pinned() const { return !pinned_devices.empty(); }
  int devices_per_node() const { return nodes > 0 ? devices / nodes : devices; }
};

struct Job {
  std::string id;
  std::vector<Config> configs;
  long long steps = 0;  // optimizer steps the times cover (0: unknown); gives step_time_s
};

// An instance: what `saturn plan --instance` reads and what the solver takes.
struct Problem {
  Cluster cluster;
  std::vector<Job> jobs;
};

// One job's place in a plan. `config` indexes the job's configs in the Problem it was made for.
struct ScheduledJob {
  int config = -1;
  std::vector<int> nodes;    // node indices, ascending
  std::vector<int> devices;  // global device ids, ascending
  double start_s = 0.0;
  double end_s = 0.0;
};

enum class SolveStatus {
  optimal,    // makespan equals a proven lower bound (within rounding)
  feasible,   // the MILP ran; the plan is the best found, not proven optimal
  heuristic,  // no MILP ran (or it found nothing better); bounds and heuristics only
};
const char* to_string(SolveStatus status);

struct SolverInfo {
  std::string backend = "none";  // glpk | cbc | none
  SolveStatus status = SolveStatus::heuristic;
  double gap = 0.0;  // (makespan - lower bound) / makespan
  // On the solve's clock (`clock`: work, wall or cpu; work seconds are the work's units at
  // kWorkUnitNs, solver/clock.hpp).
  double solve_time_s = 0.0;
  std::string clock = "work";
  // The work basis's wall cap ended the solve: the plan is not reproducible on another load.
  bool wall_capped = false;
  std::string method;  // which method produced the plan (e.g. "list+local", "milp")
  // The MILP's own view, in its slot discretisation (see docs/solver.md): it proves optimality
  // of the discretised model, which is the instance itself only when `exact_slots` is true.
  std::string milp_status;  // "", optimal, feasible, no-solution, skipped (why)
  double slot_s = 0.0;
  bool exact_slots = false;
  double milp_bound_s = 0.0;  // bound of the discretised model, in seconds
};

struct Plan {
  std::vector<ScheduledJob> jobs;  // one per job of the Problem, same order
  double created_s = 0.0;
  double makespan_s = 0.0;
  double lower_bound_s = 0.0;
  SolverInfo solver;
};

// Recomputes makespan_s from the jobs' end times.
double plan_makespan(const Plan& plan);

// Nodes on which a configuration may run: enough devices per node and enough memory per
// device. For a pinned configuration, the nodes of its pinned devices.
std::vector<int> eligible_nodes(const Cluster& cluster, const Config& config);

// Why a configuration cannot run on the cluster, or "" when it can.
std::string infeasibility_reason(const Cluster& cluster, const Config& config);

// Throws SolverError on a malformed problem: empty cluster, a node without devices, more than
// kMaxDevices devices, no jobs' ids, duplicate ids, non-positive times or devices, times above
// kMaxTimeS, a multi-node configuration whose devices
// do not split evenly over its nodes, or a job none of whose configurations fits the cluster.
void check_problem(const Problem& problem);

}  // namespace saturn::solver
