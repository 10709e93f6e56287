#include "solver/options.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace saturn::solver {

int Prepared::usage(const Option& o, int node) const {
  if (o.whole_nodes()) return cluster().nodes[static_cast<size_t>(node)].devices;
  return o.devices;
}

namespace {

bool superset(const std::vector<int>& a, const std::vector<int>& b) {
  return std::includes(a.begin(), a.end(), b.begin(), b.end());
}

// a dominates b: no slower, and it can run wherever b ran using a subset of b's resources.
bool dominates(const Option& a, const Option& b) {
  if (a.pinned || b.pinned) return false;
  if (a.time_s > b.time_s) return false;
  if (!superset(a.eligible, b.eligible)) return false;
  if (!a.whole_nodes() && !b.whole_nodes()) return a.devices <= b.devices;
  if (!a.whole_nodes() && b.whole_nodes()) return true;  // one node of b's is enough for a
  if (a.whole_nodes() && b.whole_nodes()) return a.nodes <= b.nodes;
  return false;
}

bool same_footprint(const Option& a, const Option& b) {
  return a.time_s == b.time_s && a.devices == b.devices && a.nodes == b.nodes &&
         a.eligible == b.eligible && !a.pinned && !b.pinned;
}

}  // namespace

Prepared prepare(const Problem& problem, bool pareto) {
  check_problem(problem);
  const Cluster& cluster = problem.cluster;
  Prepared p;
  p.problem = &problem;
  p.options.resize(problem.jobs.size());
  for (size_t j = 0; j < problem.jobs.size(); ++j) {
    const Job& job = problem.jobs[j];
    std::vector<Option> all;
    for (size_t c = 0; c < job.configs.size(); ++c) {
      const Config& config = job.configs[c];
      if (!infeasibility_reason(cluster, config).empty()) continue;
      Option o;
      o.config = static_cast<int>(c);
      o.nodes = config.nodes;
      o.devices = config.devices_per_node();
      o.time_s = config.time_s;
      o.eligible = eligible_nodes(cluster, config);
      o.pinned = config.pinned();
      if (o.whole_nodes()) {
        std::vector<int> caps;
        for (int n : o.eligible) caps.push_back(cluster.nodes[static_cast<size_t>(n)].devices);
        std::sort(caps.begin(), caps.end());
        double held = 0;
        for (int i = 0; i < o.nodes; ++i) held += caps[static_cast<size_t>(i)];
        o.min_area = held * o.time_s;
      } else {
        o.min_area = static_cast<double>(o.devices) * o.time_s;
      }
      all.push_back(std::move(o));
    }
    std::vector<Option> kept;
    for (size_t a = 0; a < all.size(); ++a) {
      bool dominated = false;
      for (size_t b = 0; b < all.size() && pareto && !dominated; ++b) {
        if (a == b) continue;
        // Of two options with the same footprint keep the first.
        if (same_footprint(all[a], all[b]))
          dominated = b < a;
        else
          dominated = dominates(all[b], all[a]);
      }
      if (!dominated) kept.push_back(all[a]);
    }
    std::sort(kept.begin(), kept.end(), [](const Option& x, const Option& y) {
      return std::tie(x.nodes, x.devices, x.time_s, x.config) <
             std::tie(y.nodes, y.devices, y.time_s, y.config);
    });
    p.options[j] = std::move(kept);
  }
  // Classes of identical jobs: same options (sizes, times, eligible nodes), nothing pinned.
  using Key = std::vector<std::tuple<int, int, double, std::vector<int>>>;
  std::map<Key, int> classes;
  p.job_class.assign(problem.jobs.size(), -1);
  for (size_t j = 0; j < problem.jobs.size(); ++j) {
    bool pinned = false;
    Key key;
    for (const Option& o : p.options[j]) {
      pinned = pinned || o.pinned;
      key.emplace_back(o.devices, o.nodes, o.time_s, o.eligible);
    }
    if (pinned) {
      p.job_class[j] = p.num_classes++;
      continue;
    }
    auto [it, inserted] = classes.emplace(std::move(key), p.num_classes);
    if (inserted) ++p.num_classes;
    p.job_class[j] = it->second;
  }
  return p;
}

}  // namespace saturn::solver
