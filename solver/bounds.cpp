#include "solver/bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "solver/schedule.hpp"

namespace saturn::solver {

namespace {

struct Item {
  double time;
  double work;
};

// Least T with sum_j min{work : time <= T} <= capacity * T. Jobs with no item make it infinite.
double dual_bound(const std::vector<std::vector<Item>>& jobs, double capacity) {
  if (jobs.empty()) return 0.0;
  struct Event {
    double time;
    size_t job;
    double work;
  };
  std::vector<Event> events;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (const Item& it : jobs[j]) events.push_back({it.time, j, it.work});
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.time < b.time; });
  std::vector<double> best(jobs.size(), kInfinity);
  size_t finite = 0;
  double sum = 0.0;
  for (size_t i = 0; i < events.size();) {
    const double t = events[i].time;
    for (; i < events.size() && events[i].time == t; ++i) {
      const Event& e = events[i];
      if (e.work < best[e.job]) {
        if (std::isfinite(best[e.job]))
          sum -= best[e.job];
        else
          ++finite;
        best[e.job] = e.work;
        sum += e.work;
      }
    }
    if (finite < jobs.size()) continue;
    const double next = i < events.size() ? events[i].time : kInfinity;
    const double T = std::max(t, sum / capacity);
    if (T < next) return T;
  }
  return kInfinity;  // unreachable when every job has an item
}

// Dual-feasible function u^(k) applied to g/G (k = 0: identity).
double dff(int k, int g, int G) {
  if (k == 0 || g >= G) return static_cast<double>(g) / G;
  if (((k + 1) * g) % G == 0) return static_cast<double>(g) / G;
  return std::floor(static_cast<double>((k + 1) * g) / G) / k;
}

double group_bound(const Prepared& p, const std::vector<int>& group,
                   const std::vector<size_t>& jobs, int k) {
  const Cluster& cluster = p.cluster();
  double capacity = 0;
  for (int n : group) capacity += cluster.nodes[static_cast<size_t>(n)].devices;
  std::vector<std::vector<Item>> items;
  for (size_t j : jobs) {
    std::vector<Item> its;
    for (const Option& o : p.options[j]) {
      double w = kInfinity;
      if (o.whole_nodes()) {
        std::vector<int> caps;
        for (int n : o.eligible)
          if (std::binary_search(group.begin(), group.end(), n))
            caps.push_back(cluster.nodes[static_cast<size_t>(n)].devices);
        if (caps.size() < static_cast<size_t>(o.nodes)) continue;
        std::sort(caps.begin(), caps.end());
        double held = 0;
        for (int i = 0; i < o.nodes; ++i) held += caps[static_cast<size_t>(i)];
        w = held * o.time_s;
      } else {
        for (int n : o.eligible) {
          if (!std::binary_search(group.begin(), group.end(), n)) continue;
          const int G = cluster.nodes[static_cast<size_t>(n)].devices;
          w = std::min(w, dff(k, o.devices, G) * G * o.time_s);
        }
        if (!std::isfinite(w)) continue;
      }
      its.push_back({o.time_s, w});
    }
    items.push_back(std::move(its));
  }
  return dual_bound(items, capacity);
}

constexpr int kMaxDff = 4;

}  // namespace

Bounds compute_bounds(const Prepared& p) {
  Bounds b;
  const size_t J = p.num_jobs();
  for (size_t j = 0; j < J; ++j) {
    double shortest = kInfinity;
    for (const Option& o : p.options[j]) shortest = std::min(shortest, o.time_s);
    b.longest = std::max(b.longest, shortest);
  }
  std::vector<int> all(p.cluster().nodes.size());
  for (size_t n = 0; n < all.size(); ++n) all[n] = static_cast<int>(n);
  std::vector<size_t> every(J);
  for (size_t j = 0; j < J; ++j) every[j] = j;
  b.area = group_bound(p, all, every, 0);
  for (int k = 1; k <= kMaxDff; ++k) b.packing = std::max(b.packing, group_bound(p, all, every, k));
  std::set<std::vector<int>> groups;
  for (const auto& opts : p.options)
    for (const Option& o : opts) groups.insert(o.eligible);
  for (const auto& group : groups) {
    if (group.size() == all.size()) continue;
    std::vector<size_t> confined;
    for (size_t j = 0; j < J; ++j) {
      bool inside = true;
      for (const Option& o : p.options[j])
        inside = inside &&
                 std::includes(group.begin(), group.end(), o.eligible.begin(), o.eligible.end());
      if (inside) confined.push_back(j);
    }
    if (confined.empty()) continue;
    for (int k = 0; k <= kMaxDff; ++k)
      b.groups = std::max(b.groups, group_bound(p, group, confined, k));
  }
  b.best = b.longest;
  b.which = "longest job";
  auto take = [&b](double v, const char* name) {
    if (v > b.best * (1 + 1e-12)) {
      b.best = v;
      b.which = name;
    }
  };
  take(b.area, "area");
  take(b.packing, "packing");
  take(b.groups, "node group");
  return b;
}

}  // namespace saturn::solver
