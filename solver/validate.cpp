#include "solver/validate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

namespace saturn::solver {

namespace {

// Plans travel through JSON with decimal times; allow that much slack in comparisons.
double tol(double t) {
  return 1e-6 * std::max(1.0, std::fabs(t));
}

struct Use {
  double start, end;
  size_t job;
};

}  // namespace

std::vector<std::string> validate_plan(const Problem& problem, const Plan& plan) {
  std::vector<std::string> errors;
  const Cluster& cluster = problem.cluster;
  if (plan.jobs.size() != problem.jobs.size()) {
    errors.push_back(fmt::format("the plan places {} jobs but the instance has {}",
                                 plan.jobs.size(), problem.jobs.size()));
    return errors;
  }
  const int total = cluster.total_devices();
  std::vector<std::vector<Use>> device_uses(static_cast<size_t>(std::max(total, 0)));
  std::vector<std::vector<Use>> exclusive_nodes(cluster.nodes.size());
  std::vector<std::vector<Use>> node_uses(cluster.nodes.size());
  double latest = 0.0;
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const Job& job = problem.jobs[j];
    const ScheduledJob& sj = plan.jobs[j];
    const std::string who = fmt::format("job '{}'", job.id);
    if (sj.config < 0 || sj.config >= static_cast<int>(job.configs.size())) {
      errors.push_back(fmt::format("{}: configuration {} does not exist", who, sj.config));
      continue;
    }
    const Config& config = job.configs[static_cast<size_t>(sj.config)];
    if (!(sj.start_s >= -tol(0)) || !std::isfinite(sj.start_s) || !std::isfinite(sj.end_s))
      errors.push_back(
          fmt::format("{}: start {} / end {} are not valid times", who, sj.start_s, sj.end_s));
    if (std::fabs((sj.end_s - sj.start_s) - config.time_s) > tol(config.time_s) + tol(sj.end_s))
      errors.push_back(fmt::format("{}: runs {:.3f} s but its configuration takes {:.3f} s", who,
                                   sj.end_s - sj.start_s, config.time_s));
    latest = std::max(latest, sj.end_s);
    if (static_cast<int>(sj.devices.size()) != config.devices)
      errors.push_back(fmt::format("{}: has {} devices, its configuration ({}) needs {}", who,
                                   sj.devices.size(), config.strategy, config.devices));
    if (static_cast<int>(sj.nodes.size()) != config.nodes)
      errors.push_back(fmt::format("{}: is on {} node(s), its configuration needs {}", who,
                                   sj.nodes.size(), config.nodes));
    std::set<int> listed(sj.nodes.begin(), sj.nodes.end());
    if (listed.size() != sj.nodes.size())
      errors.push_back(fmt::format("{}: lists a node twice", who));
    bool nodes_ok = true;
    for (int n : sj.nodes) {
      if (n < 0 || n >= static_cast<int>(cluster.nodes.size())) {
        errors.push_back(fmt::format("{}: node {} does not exist", who, n));
        nodes_ok = false;
        continue;
      }
      const Node& node = cluster.nodes[static_cast<size_t>(n)];
      if (config.memory_gib > 0 && node.memory_gib > 0 &&
          config.memory_gib > node.memory_gib * (1 + 1e-9))
        errors.push_back(fmt::format("{}: needs {:g} GiB per device, node {} has {:g} GiB", who,
                                     config.memory_gib, node.name, node.memory_gib));
    }
    std::set<int> seen;
    std::vector<int> per_node(cluster.nodes.size(), 0);
    for (int d : sj.devices) {
      const int n = cluster.node_of_device(d);
      if (n < 0) {
        errors.push_back(fmt::format("{}: device {} does not exist", who, d));
        continue;
      }
      if (!seen.insert(d).second)
        errors.push_back(fmt::format("{}: lists device {} twice", who, d));
      if (!listed.count(n))
        errors.push_back(fmt::format("{}: device {} is on node {}, which the job does not list",
                                     who, d, cluster.nodes[static_cast<size_t>(n)].name));
      ++per_node[static_cast<size_t>(n)];
      device_uses[static_cast<size_t>(d)].push_back({sj.start_s, sj.end_s, j});
    }
    if (nodes_ok && config.nodes > 1 && config.devices % config.nodes == 0) {
      for (int n : sj.nodes)
        if (per_node[static_cast<size_t>(n)] != config.devices_per_node())
          errors.push_back(fmt::format(
              "{}: uses {} devices on node {}, its configuration puts {} "
              "on each of its {} nodes",
              who, per_node[static_cast<size_t>(n)], cluster.nodes[static_cast<size_t>(n)].name,
              config.devices_per_node(), config.nodes));
    }
    if (nodes_ok) {
      for (int n : sj.nodes) {
        if (config.nodes > 1)
          exclusive_nodes[static_cast<size_t>(n)].push_back({sj.start_s, sj.end_s, j});
        node_uses[static_cast<size_t>(n)].push_back({sj.start_s, sj.end_s, j});
      }
    }
    if (config.pinned()) {
      std::vector<int> want = config.pinned_devices, got = sj.devices;
      std::sort(want.begin(), want.end());
      std::sort(got.begin(), got.end());
      if (want != got)
        errors.push_back(fmt::format("{}: is kept running but moved off its devices", who));
      if (std::fabs(sj.start_s) > tol(0))
        errors.push_back(fmt::format("{}: is kept running but does not continue at time 0", who));
    }
  }
  auto overlap = [](const Use& a, const Use& b) {
    return a.start < b.end - tol(b.end) && b.start < a.end - tol(a.end);
  };
  for (size_t d = 0; d < device_uses.size(); ++d) {
    auto& uses = device_uses[d];
    std::sort(uses.begin(), uses.end(),
              [](const Use& a, const Use& b) { return a.start < b.start; });
    for (size_t i = 0; i + 1 < uses.size(); ++i)
      for (size_t k = i + 1; k < uses.size() && uses[k].start < uses[i].end; ++k)
        if (overlap(uses[i], uses[k]))
          errors.push_back(
              fmt::format("jobs '{}' and '{}' use device {} at the same time "
                          "([{:.1f}, {:.1f}) and [{:.1f}, {:.1f}))",
                          problem.jobs[uses[i].job].id, problem.jobs[uses[k].job].id, d,
                          uses[i].start, uses[i].end, uses[k].start, uses[k].end));
  }
  for (size_t n = 0; n < cluster.nodes.size(); ++n)
    for (const Use& x : exclusive_nodes[n])
      for (const Use& y : node_uses[n])
        if (y.job != x.job && overlap(x, y))
          errors.push_back(
              fmt::format("job '{}' spans whole nodes but job '{}' shares node {} "
                          "with it",
                          problem.jobs[x.job].id, problem.jobs[y.job].id, cluster.nodes[n].name));
  if (std::fabs(plan.makespan_s - latest) > tol(latest))
    errors.push_back(
        fmt::format("makespan_s {:.3f} is not the latest end {:.3f}", plan.makespan_s, latest));
  if (plan.lower_bound_s > plan.makespan_s + tol(plan.makespan_s))
    errors.push_back(fmt::format("lower_bound_s {:.3f} exceeds the makespan {:.3f}",
                                 plan.lower_bound_s, plan.makespan_s));
  return errors;
}

void check_plan(const Problem& problem, const Plan& plan) {
  const auto errors = validate_plan(problem, plan);
  if (errors.empty()) return;
  std::string msg = fmt::format("invalid plan ({} problem(s)):", errors.size());
  for (size_t i = 0; i < errors.size() && i < 20; ++i) msg += "\n  - " + errors[i];
  if (errors.size() > 20) msg += fmt::format("\n  ... and {} more", errors.size() - 20);
  throw SolverError(msg);
}

}  // namespace saturn::solver
