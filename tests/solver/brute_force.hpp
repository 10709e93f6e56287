// Test oracle: the exact optimum of a small instance by enumeration, independent of the MILP.
//
// Any schedule can be left-shifted, job by job, until every job starts at time 0 or at the end
// of another job without lengthening it (capacity only frees up at ends). So an optimum is
// found by walking the decision times (0, then every end time in increasing order) and, at
// each, trying every set of not yet started jobs to start there, each in every configuration
// and on every feasible node (set). Branch and bound keeps it quick for up to ~6 jobs.
// Exact in continuous time; with integral durations it is also the slot model's optimum.
#pragma once

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "solver/schedule.hpp"

namespace saturn::solver::testing {

class BruteForce {
 public:
  explicit BruteForce(const Prepared& p) : p_(p) {}

  // Optimal makespan; `upper` (a known feasible makespan) speeds the search up.
  double solve(double upper = kInfinity) {
    best_ = upper * (1 + 1e-9);
    found_ = kInfinity;
    std::vector<Timeline> nodes;
    for (const Node& n : p_.cluster().nodes) nodes.emplace_back(n.devices);
    std::vector<char> started(p_.num_jobs(), 0);
    std::multiset<double> ends;
    capacity_ = p_.cluster().total_devices();
    search(0.0, nodes, started, ends, 0.0);
    return std::min(found_, upper);
  }
  long nodes_visited() const { return visited_; }

 private:
  const Prepared& p_;
  double best_ = kInfinity, found_ = kInfinity;
  int capacity_ = 0;
  long visited_ = 0;

  bool fits(const std::vector<Timeline>& nodes, const Option& o, const std::vector<int>& use,
            double t) const {
    for (int n : use) {
      const int need = o.whole_nodes() ? nodes[static_cast<size_t>(n)].capacity() : o.devices;
      if (nodes[static_cast<size_t>(n)].earliest_fit(need, o.time_s, t) != t) return false;
    }
    return true;
  }

  // Node choices for an option: each eligible node, or each k-subset for whole nodes.
  std::vector<std::vector<int>> choices(const Option& o) const {
    std::vector<std::vector<int>> out;
    if (!o.whole_nodes()) {
      for (int n : o.eligible) out.push_back({n});
      return out;
    }
    const size_t k = static_cast<size_t>(o.nodes), m = o.eligible.size();
    std::vector<char> pick(m, 0);
    std::fill(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(k), 1);
    do {
      std::vector<int> s;
      for (size_t i = 0; i < m; ++i)
        if (pick[i]) s.push_back(o.eligible[i]);
      out.push_back(s);
    } while (std::prev_permutation(pick.begin(), pick.end()));
    return out;
  }

  double remaining_lb(double t, const std::vector<char>& started) const {
    double longest = 0, area = 0;
    for (size_t j = 0; j < p_.num_jobs(); ++j) {
      if (started[j]) continue;
      double shortest = kInfinity, least = kInfinity;
      for (const Option& o : p_.options[j]) {
        shortest = std::min(shortest, o.time_s);
        least = std::min(least, o.min_area);
      }
      longest = std::max(longest, shortest);
      area += least;
    }
    return t + std::max(longest, area / capacity_);
  }

  void search(double t, std::vector<Timeline>& nodes, std::vector<char>& started,
              std::multiset<double>& ends, double makespan) {
    ++visited_;
    if (std::all_of(started.begin(), started.end(), [](char c) { return c != 0; })) {
      if (makespan < best_) {
        best_ = makespan;
        found_ = makespan;
      }
      return;
    }
    if (std::max(makespan, remaining_lb(t, started)) >= best_ * (1 - 1e-12)) return;
    choose(0, t, nodes, started, ends, makespan);
  }

  // Decide for jobs j.. whether they start at t; then move on to the next end time.
  void choose(size_t j, double t, std::vector<Timeline>& nodes, std::vector<char>& started,
              std::multiset<double>& ends, double makespan) {
    if (j == p_.num_jobs()) {
      const auto next = ends.upper_bound(t);
      if (next == ends.end()) return;  // nothing ends later: the rest could never start
      search(*next, nodes, started, ends, makespan);
      return;
    }
    choose(j + 1, t, nodes, started, ends, makespan);  // job j does not start at t
    if (started[j]) return;
    for (const Option& o : p_.options[j]) {
      if (std::max(makespan, t + o.time_s) >= best_ * (1 - 1e-12)) continue;
      for (const std::vector<int>& use : choices(o)) {
        if (!fits(nodes, o, use, t)) continue;
        std::vector<Timeline> saved = nodes;
        for (int n : use)
          nodes[static_cast<size_t>(n)].add(
              t, t + o.time_s,
              o.whole_nodes() ? nodes[static_cast<size_t>(n)].capacity() : o.devices);
        started[j] = 1;
        const auto it = ends.insert(t + o.time_s);
        choose(j + 1, t, nodes, started, ends, std::max(makespan, t + o.time_s));
        ends.erase(it);
        started[j] = 0;
        nodes = std::move(saved);
      }
    }
  }
};

}  // namespace saturn::solver::testing
