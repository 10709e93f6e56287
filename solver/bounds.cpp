#include "solver/bounds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
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

// u^(k) on a real fraction; values within rounding of a step are taken at the lower side so
// the function stays dual-feasible.
double dff_real(int k, double x) {
  const double y = (k + 1) * x;
  if (std::fabs(y - std::round(y)) <= 1e-9 * std::max(1.0, y))
    return std::min(x, std::round(y) / (k + 1));
  return std::floor(y) / k;
}

double dff_any(int k, double x) {
  return k == 0 ? x : dff_real(k, x);
}

// Job-to-node assignment bound. In a plan of makespan T, every single-node job lies on one
// node, so per node its jobs' fractions satisfy, for dual-feasible functions f, f1, f2:
//   sum f(g t / (G T)) <= 1        (areas packed into the node like items into a bin), and
//   sum f1(g / G) f2(t / T) <= 1   (f1 keeps every instant within the node's devices; then
//                                   each device, as a unit, runs jobs one after another, so f2
//                                   of their durations sums to at most 1 on it).
// A whole-node job fills each of its nodes for t/T. Summing over the group's nodes, the
// least T with sum_j min_option <= nodes is a bound; the sum falls as T grows, so bisection
// finds it, keeping `lo` infeasible (lo is returned).
// kind 0: f = u^(k) on areas; kind 1: f1 = u^(k1), f2 = u^(k2) (0 = identity).
double assignment_bound(const Prepared& p, const std::vector<int>& group,
                        const std::vector<size_t>& jobs, int kind, int k1, int k2) {
  const Cluster& cluster = p.cluster();
  auto in_group = [&](int n) { return std::binary_search(group.begin(), group.end(), n); };
  // Per option the distinct capacities of its eligible nodes in the group.
  std::vector<std::vector<std::vector<int>>> caps(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i)
    for (const Option& o : p.options[jobs[i]]) {
      std::set<int> c;
      int fit = 0;
      for (int n : o.eligible)
        if (in_group(n)) {
          c.insert(cluster.nodes[static_cast<size_t>(n)].devices);
          ++fit;
        }
      if (o.whole_nodes() && fit < o.nodes) c.clear();
      caps[i].emplace_back(c.begin(), c.end());
    }
  auto value = [&](const Option& o, int G, double T) {
    const double x = static_cast<double>(o.devices) / G, y = o.time_s / T;
    return kind == 0 ? dff_any(k1, x * y) : dff_any(k1, x) * dff_any(k2, y);
  };
  auto load = [&](double T) {
    double total = 0;
    for (size_t i = 0; i < jobs.size(); ++i) {
      double best = kInfinity;
      const auto& opts = p.options[jobs[i]];
      for (size_t oi = 0; oi < opts.size(); ++oi) {
        const Option& o = opts[oi];
        if (o.time_s > T || caps[i][oi].empty()) continue;
        if (o.whole_nodes()) {
          best = std::min(
              best, o.nodes * (kind == 0 ? dff_any(k1, o.time_s / T) : dff_any(k2, o.time_s / T)));
        } else {
          for (int G : caps[i][oi]) best = std::min(best, value(o, G, T));
        }
      }
      total += best;
      if (!std::isfinite(total)) return total;
    }
    return total;
  };
  const double bins = static_cast<double>(group.size());
  double hi = 0;
  for (size_t j : jobs) {
    double shortest = kInfinity;
    for (const Option& o : p.options[j]) shortest = std::min(shortest, o.time_s);
    hi += shortest;
  }
  if (!std::isfinite(hi) || load(hi) > bins + 1e-9) return 0.0;
  double lo = 0.0;
  for (int it = 0; it < 60 && hi - lo > 1e-9 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    if (load(mid) > bins + 1e-9)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

double best_assignment_bound(const Prepared& p, const std::vector<int>& group,
                             const std::vector<size_t>& jobs) {
  double best = 0;
  for (int k = 1; k <= kMaxDff; ++k)
    best = std::max(best, assignment_bound(p, group, jobs, 0, k, 0));
  for (int k1 = 0; k1 <= kMaxDff; ++k1)
    for (int k2 = 1; k2 <= kMaxDff; ++k2)
      best = std::max(best, assignment_bound(p, group, jobs, 1, k1, k2));
  return best;
}

}  // namespace

Bounds compute_bounds(const Prepared& p, double lp_time_limit_s) {
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
  b.assignment = best_assignment_bound(p, all, every);
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
    b.assignment = std::max(b.assignment, best_assignment_bound(p, group, confined));
  }
  take(b.assignment, "node assignment");
  if (lp_time_limit_s > 0) {
    b.lp = configuration_lp_bound(p, b.best, lp_time_limit_s);
    take(b.lp, "configuration LP");
  }
  return b;
}

double makespan_grid(const Prepared& prepared) {
  long long grid = 0;
  for (const auto& options : prepared.options)
    for (const Option& o : options) {
      if (!(o.time_s >= 1 && o.time_s < 1e15) || o.time_s != std::floor(o.time_s)) return 0.0;
      grid = std::gcd(grid, static_cast<long long>(o.time_s));
    }
  return static_cast<double>(grid);
}

double round_up_to_grid(double bound, double grid) {
  if (!(grid > 0) || !std::isfinite(bound)) return bound;
  const double steps = std::ceil(bound / grid * (1 - 1e-9));
  return std::max(bound, steps * grid);
}

}  // namespace saturn::solver
