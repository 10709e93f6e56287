#include "solver/problem.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>
#include <set>

namespace saturn::solver {

int Cluster::total_devices() const {
  int total = 0;
  for (const Node& n : nodes) total += n.devices;
  return total;
}

int Cluster::first_device(int node) const {
  int first = 0;
  for (int i = 0; i < node; ++i) first += nodes[static_cast<size_t>(i)].devices;
  return first;
}

int Cluster::node_of_device(int device) const {
  if (device < 0) return -1;
  int first = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (device < first + nodes[i].devices) return static_cast<int>(i);
    first += nodes[i].devices;
  }
  return -1;
}

namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

int parse_count(const std::string& text, const std::string& spec, const char* what) {
  const std::string t = trim(text);
  if (t.empty() || t.size() > 6 || !std::all_of(t.begin(), t.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
      }))
    throw SolverError(fmt::format(
        "cluster spec '{}': '{}' is not a {} (expected NxG[:MEM] like 2x8:80GiB, or G+G+... "
        "like 8+4)",
        spec, t, what));
  const int v = std::stoi(t);
  if (v <= 0) throw SolverError(fmt::format("cluster spec '{}': {} must be positive", spec, what));
  return v;
}

double parse_memory_gib(const std::string& text, const std::string& spec) {
  const std::string t = trim(text);
  size_t i = 0;
  while (i < t.size() && (std::isdigit(static_cast<unsigned char>(t[i])) || t[i] == '.')) ++i;
  double value = 0.0;
  bool ok = i > 0;
  if (ok) {
    try {
      size_t used = 0;
      value = std::stod(t.substr(0, i), &used);
      ok = used == i && value > 0.0;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  std::string unit;
  for (char c : trim(t.substr(i)))
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0.0;
  if (unit.empty() || unit == "g" || unit == "gib" || unit == "gb")
    scale = 1.0;
  else if (unit == "m" || unit == "mib" || unit == "mb")
    scale = 1.0 / 1024.0;
  else if (unit == "t" || unit == "tib" || unit == "tb")
    scale = 1024.0;
  if (!ok || scale == 0.0)
    throw SolverError(fmt::format(
        "cluster spec '{}': '{}' is not a device memory size (e.g. 80GiB, 40G, 512MiB)", spec, t));
  if (value * scale > kMaxClusterMemoryGib)
    throw SolverError(
        fmt::format("cluster spec '{}': device memory '{}' is out of range (valid: "
                    "at most {:g} GiB per device)",
                    spec, t, kMaxClusterMemoryGib));
  return value * scale;
}

}  // namespace

Cluster parse_cluster_spec(const std::string& spec) {
  std::string body = trim(spec);
  if (body.empty()) throw SolverError("cluster spec is empty (expected e.g. 2x8:80GiB or 8+4)");
  double memory = 0.0;
  if (const size_t colon = body.find(':'); colon != std::string::npos) {
    memory = parse_memory_gib(body.substr(colon + 1), spec);
    body = body.substr(0, colon);
  }
  std::vector<int> devices;
  if (const size_t x = body.find_first_of("xX"); x != std::string::npos) {
    const int n = parse_count(body.substr(0, x), spec, "node count");
    const int g = parse_count(body.substr(x + 1), spec, "device count");
    if (static_cast<long long>(n) * g > kMaxDevices)
      throw SolverError(fmt::format("cluster spec '{}': {} devices in all, above the limit of {}",
                                    spec, static_cast<long long>(n) * g, kMaxDevices));
    if (n > kMaxClusterNodes)
      throw SolverError(fmt::format("cluster spec '{}': {} nodes is out of range (valid: 1..{})",
                                    spec, n, kMaxClusterNodes));
    devices.assign(static_cast<size_t>(n), g);
  } else {
    size_t pos = 0;
    while (true) {
      const size_t plus = body.find('+', pos);
      devices.push_back(parse_count(body.substr(pos, plus - pos), spec, "device count"));
      if (std::accumulate(devices.begin(), devices.end(), 0LL) > kMaxDevices)
        throw SolverError(
            fmt::format("cluster spec '{}': more than {} devices in all", spec, kMaxDevices));
      if (plus == std::string::npos) break;
      pos = plus + 1;
    }
  }
  if (devices.size() > static_cast<size_t>(kMaxClusterNodes))
    throw SolverError(fmt::format("cluster spec '{}': {} nodes is out of range (valid: 1..{})",
                                  spec, devices.size(), kMaxClusterNodes));
  long long total = 0;
  for (const int d : devices) {
    if (d > kMaxNodeDevices)
      throw SolverError(
          fmt::format("cluster spec '{}': {} devices on a node is out of range (valid: 1..{})",
                      spec, d, kMaxNodeDevices));
    total += d;
  }
  if (total > kMaxClusterDevices)
    throw SolverError(
        fmt::format("cluster spec '{}': {} devices in all is out of range (valid: at most {})",
                    spec, total, kMaxClusterDevices));
  Cluster c;
  for (size_t i = 0; i < devices.size(); ++i)
    c.nodes.push_back(Node{fmt::format("n{}", i), devices[i], memory});
  return c;
}

std::string format_cluster(const Cluster& cluster) {
  if (cluster.nodes.empty()) return "(empty)";
  bool same = true;
  for (const Node& n : cluster.nodes)
    same = same && n.devices == cluster.nodes[0].devices &&
           n.memory_gib == cluster.nodes[0].memory_gib;
  std::string s;
  if (same) {
    s = fmt::format("{}x{}", cluster.nodes.size(), cluster.nodes[0].devices);
  } else {
    for (size_t i = 0; i < cluster.nodes.size(); ++i)
      s += fmt::format("{}{}", i ? "+" : "", cluster.nodes[i].devices);
  }
  bool same_memory = true;
  for (const Node& n : cluster.nodes)
    same_memory = same_memory && n.memory_gib == cluster.nodes[0].memory_gib;
  if (same_memory && cluster.nodes[0].memory_gib > 0)
    s += fmt::format(":{:g}GiB", cluster.nodes[0].memory_gib);
  return s;
}

const char* to_string(SolveStatus status) {
  switch (status) {
    case SolveStatus::optimal:
      return "optimal";
    case SolveStatus::feasible:
      return "feasible";
    case SolveStatus::heuristic:
      return "heuristic";
  }
  return "heuristic";
}

double plan_makespan(const Plan& plan) {
  double m = 0.0;
  for (const ScheduledJob& j : plan.jobs) m = std::max(m, j.end_s);
  return m;
}

namespace {

bool memory_fits(const Node& node, const Config& config) {
  return node.memory_gib <= 0.0 || config.memory_gib <= 0.0 ||
         config.memory_gib <= node.memory_gib * (1.0 + 1e-9);
}

}  // namespace

std::vector<int> eligible_nodes(const Cluster& cluster, const Config& config) {
  std::vector<int> out;
  if (config.pinned()) {
    std::set<int> nodes;
    for (int d : config.pinned_devices) {
      const int n = cluster.node_of_device(d);
      if (n >= 0) nodes.insert(n);
    }
    out.assign(nodes.begin(), nodes.end());
    return out;
  }
  if (config.nodes <= 0 || config.devices <= 0 || config.devices % config.nodes != 0) return out;
  const int per_node = config.devices_per_node();
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const Node& node = cluster.nodes[n];
    if (node.devices >= per_node && memory_fits(node, config)) out.push_back(static_cast<int>(n));
  }
  if (static_cast<int>(out.size()) < config.nodes) out.clear();
  return out;
}

std::string infeasibility_reason(const Cluster& cluster, const Config& config) {
  if (config.devices <= 0) return fmt::format("{} devices", config.devices);
  if (config.nodes <= 0) return fmt::format("{} nodes", config.nodes);
  if (!(config.time_s > 0.0) || !std::isfinite(config.time_s))
    return fmt::format("time_s {} is not a positive number", config.time_s);
  if (config.devices % config.nodes != 0)
    return fmt::format("{} devices do not split evenly over {} nodes", config.devices,
                       config.nodes);
  if (config.pinned()) {
    if (static_cast<int>(config.pinned_devices.size()) != config.devices)
      return "pinned devices do not match the device count";
    for (int d : config.pinned_devices)
      if (cluster.node_of_device(d) < 0) return fmt::format("pinned device {} does not exist", d);
    if (static_cast<int>(eligible_nodes(cluster, config).size()) != config.nodes)
      return "pinned devices do not lie on as many nodes as the configuration spans";
    return "";
  }
  if (!eligible_nodes(cluster, config).empty()) return "";
  const int per_node = config.devices_per_node();
  int big_enough = 0, with_memory = 0;
  for (const Node& node : cluster.nodes) {
    if (node.devices >= per_node) {
      ++big_enough;
      if (memory_fits(node, config)) ++with_memory;
    }
  }
  if (config.nodes == 1) {
    if (big_enough == 0)
      return fmt::format(
          "needs {} devices on one node; the largest node has {}", per_node,
          std::max_element(cluster.nodes.begin(), cluster.nodes.end(),
                           [](const Node& a, const Node& b) { return a.devices < b.devices; })
              ->devices);
    return fmt::format("needs {:g} GiB per device; no node with {} devices has that much",
                       config.memory_gib, per_node);
  }
  if (big_enough < config.nodes)
    return fmt::format("needs {} whole nodes with >= {} devices each; the cluster has {}",
                       config.nodes, per_node, big_enough);
  return fmt::format("needs {} whole nodes with {:g} GiB per device; the cluster has {}",
                     config.nodes, config.memory_gib, with_memory);
}

void check_problem(const Problem& problem) {
  const Cluster& cluster = problem.cluster;
  if (cluster.nodes.empty())
    throw SolverError("the cluster is empty: it has no nodes, so no job can run");
  std::set<std::string> names;
  long long total_devices = 0;
  for (const Node& n : cluster.nodes) {
    if (n.devices <= 0)
      throw SolverError(
          fmt::format("cluster node '{}' has {} devices (must be >= 1)", n.name, n.devices));
    total_devices += n.devices;
    if (total_devices > kMaxDevices)
      throw SolverError(
          fmt::format("the cluster has more than {} devices (node '{}' passes the limit)",
                      kMaxDevices, n.name));
    if (n.memory_gib < 0.0 || !std::isfinite(n.memory_gib))
      throw SolverError(fmt::format("cluster node '{}' has memory {} GiB", n.name, n.memory_gib));
    if (!names.insert(n.name).second)
      throw SolverError(fmt::format("cluster node name '{}' appears twice", n.name));
  }
  if (problem.jobs.empty()) throw SolverError("the instance has no jobs to plan");
  std::set<std::string> ids;
  for (const Job& job : problem.jobs) {
    if (job.id.empty()) throw SolverError("a job has an empty id");
    if (!ids.insert(job.id).second)
      throw SolverError(fmt::format("job id '{}' appears twice", job.id));
    if (job.configs.empty())
      throw SolverError(fmt::format("job '{}' has no candidate configurations", job.id));
    bool any = false;
    std::string reasons;
    for (size_t c = 0; c < job.configs.size(); ++c) {
      const Config& config = job.configs[c];
      if (!(config.time_s > 0.0) || !std::isfinite(config.time_s) || config.devices <= 0 ||
          config.nodes <= 0 || config.memory_gib < 0.0)
        throw SolverError(fmt::format(
            "job '{}' configuration {} ({}): devices {}, nodes {}, time_s {}, memory_gib {}: "
            "devices and nodes must be >= 1, time_s > 0, memory_gib >= 0",
            job.id, c, config.strategy, config.devices, config.nodes, config.time_s,
            config.memory_gib));
      if (config.time_s > kMaxTimeS)
        throw SolverError(
            fmt::format("job '{}' configuration {} ({}): time_s {:g} is above the limit of {:g} s",
                        job.id, c, config.strategy, config.time_s, kMaxTimeS));
      const std::string why = infeasibility_reason(cluster, config);
      if (why.empty()) {
        any = true;
      } else {
        reasons += fmt::format("\n  - {} x{} on {} node(s): {}", config.strategy, config.devices,
                               config.nodes, why);
      }
    }
    if (!any)
      throw SolverError(fmt::format("job '{}' has no configuration that fits the cluster {}:{}",
                                    job.id, format_cluster(cluster), reasons));
  }
  // A pinned configuration says the job is running on those devices now. Two jobs cannot both
  // be running on one device (nor beside a job that holds whole nodes): such an instance
  // describes a state that cannot exist, and no plan could keep both running from time 0.
  const int total = cluster.total_devices();
  std::vector<int> holder(static_cast<size_t>(total), -1);
  for (size_t j = 0; j < problem.jobs.size(); ++j) {
    std::set<int> held;
    for (const Config& config : problem.jobs[j].configs) {
      if (!config.pinned() || !infeasibility_reason(cluster, config).empty()) continue;
      if (config.nodes > 1) {
        for (int n : eligible_nodes(cluster, config))
          for (int d = cluster.first_device(n);
               d < cluster.first_device(n) + cluster.nodes[static_cast<size_t>(n)].devices; ++d)
            held.insert(d);
      } else {
        held.insert(config.pinned_devices.begin(), config.pinned_devices.end());
      }
    }
    for (int d : held) {
      int& h = holder[static_cast<size_t>(d)];
      if (h >= 0)
        throw SolverError(fmt::format(
            "jobs '{}' and '{}' are both kept running on device {} (node {}): a pinned "
            "configuration must give the devices the job runs on now, and no two running jobs "
            "share a device",
            problem.jobs[static_cast<size_t>(h)].id, problem.jobs[j].id, d,
            cluster.nodes[static_cast<size_t>(cluster.node_of_device(d))].name));
      h = static_cast<int>(j);
    }
  }
}

}  // namespace saturn::solver
