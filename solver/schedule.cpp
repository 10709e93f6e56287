#include "solver/schedule.hpp"
#include "solver/clock.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

namespace saturn::solver {

Timeline::Timeline(int capacity) : capacity_(capacity), t_{0.0}, used_{0} {}

double Timeline::earliest_fit(int need, double duration, double from) const {
  if (need > capacity_) return kInfinity;
  if (need <= 0) return from;
  double cand = std::max(from, 0.0);
  size_t i = static_cast<size_t>(std::upper_bound(t_.begin(), t_.end(), cand) - t_.begin()) - 1;
  while (true) {
    const double end = cand + duration;
    size_t j = i;
    bool blocked = false;
    while (true) {
      if (used_[j] + need > capacity_) {
        blocked = true;
        break;
      }
      if (j + 1 == t_.size() || t_[j + 1] >= end) break;
      ++j;
    }
    if (!blocked) return cand;
    // The last segment is always empty, so a blocked segment has a successor.
    cand = t_[j + 1];
    i = j + 1;
  }
}

void Timeline::reset() {
  t_.assign(1, 0.0);
  used_.assign(1, 0);
}

int Timeline::used_at(double t) const {
  if (t < 0) return 0;
  const size_t i = static_cast<size_t>(std::upper_bound(t_.begin(), t_.end(), t) - t_.begin()) - 1;
  return used_[i];
}

void Timeline::add(double start, double end, int need) {
  if (!(end > start) || need == 0) return;
  auto split = [this](double x) {
    const auto it = std::lower_bound(t_.begin(), t_.end(), x);
    if (it != t_.end() && *it == x) return static_cast<size_t>(it - t_.begin());
    const size_t pos = static_cast<size_t>(it - t_.begin());
    t_.insert(it, x);
    used_.insert(used_.begin() + static_cast<std::ptrdiff_t>(pos), used_[pos - 1]);
    return pos;
  };
  const size_t a = split(start);
  const size_t b = split(end);
  for (size_t k = a; k < b; ++k) used_[k] += need;
  // Merge equal neighbours so scans stay short.
  size_t w = 1;
  for (size_t r = 1; r < t_.size(); ++r) {
    if (used_[r] == used_[w - 1]) continue;
    t_[w] = t_[r];
    used_[w] = used_[r];
    ++w;
  }
  t_.resize(w);
  used_.resize(w);
}

bool Schedule::complete() const {
  return std::all_of(jobs.begin(), jobs.end(), [](const Placement& p) { return p.option >= 0; });
}

double duration_of(const Option& o, double slot) {
  if (slot <= 0.0) return o.time_s;
  // A relative tolerance keeps a time of exactly k slots, computed in floating point, at k.
  return std::max(1.0, std::ceil(o.time_s / slot - 1e-9));
}

ClusterState::ClusterState(const Prepared& prepared) : prepared_(&prepared) {
  for (const Node& n : prepared.cluster().nodes) nodes_.emplace_back(n.devices);
}

void ClusterState::reset() {
  for (Timeline& t : nodes_) t.reset();
}

Placement ClusterState::earliest(const Option& o, double duration, double from,
                                 const std::vector<int>* fixed) const {
  Placement best;
  earliest_into(o, duration, from, fixed, best);
  return best;
}

void ClusterState::earliest_into(const Option& o, double duration, double from,
                                 const std::vector<int>* fixed, Placement& best) const {
  const Cluster& cluster = prepared_->cluster();
  best.option = -1;
  best.nodes.clear();
  best.start = kInfinity;
  const std::vector<int>& candidates = fixed && !fixed->empty() ? *fixed : o.eligible;
  if (o.pinned || (fixed && !fixed->empty()) || !o.whole_nodes()) {
    if (o.whole_nodes() || o.pinned) {
      // All of these nodes at once: raise t until every one fits.
      double t = from;
      for (int round = 0; round < 100000; ++round) {
        double next = t;
        for (int n : candidates)
          next = std::max(next, nodes_[static_cast<size_t>(n)].earliest_fit(prepared_->usage(o, n),
                                                                            duration, t));
        if (next == t || !std::isfinite(next)) {
          t = next;
          break;
        }
        t = next;
      }
      best.start = t;
      best.nodes.assign(candidates.begin(), candidates.end());
    } else {
      int best_cap = 0;
      for (int n : candidates) {
        const double t = nodes_[static_cast<size_t>(n)].earliest_fit(o.devices, duration, from);
        const int cap = cluster.nodes[static_cast<size_t>(n)].devices;
        if (t < best.start || (t == best.start && cap < best_cap)) {
          best.start = t;
          best.nodes.assign(1, n);
          best_cap = cap;
        }
      }
    }
  } else {
    // k whole nodes out of the eligible ones: advance t to the k-th smallest time at which an
    // eligible node is idle for the duration, until k nodes are idle at the same t.
    const size_t k = static_cast<size_t>(o.nodes);
    double t = from;
    std::vector<std::pair<double, int>> ready;
    for (int round = 0; round < 100000 && std::isfinite(t); ++round) {
      ready.clear();
      for (int n : candidates)
        ready.emplace_back(nodes_[static_cast<size_t>(n)].earliest_fit(
                               cluster.nodes[static_cast<size_t>(n)].devices, duration, t),
                           n);
      std::sort(ready.begin(), ready.end(), [&](const auto& a, const auto& b) {
        const int ca = cluster.nodes[static_cast<size_t>(a.second)].devices;
        const int cb = cluster.nodes[static_cast<size_t>(b.second)].devices;
        return std::tie(a.first, ca, a.second) < std::tie(b.first, cb, b.second);
      });
      const double kth = ready[k - 1].first;
      if (kth == t) break;
      t = kth;
    }
    best.start = t;
    if (std::isfinite(t)) {
      for (size_t i = 0; i < k; ++i) best.nodes.push_back(ready[i].second);
      std::sort(best.nodes.begin(), best.nodes.end());
    }
  }
  best.end = best.start + duration;
}

void ClusterState::reserve(const Option& o, const Placement& p) {
  for (int n : p.nodes) nodes_[static_cast<size_t>(n)].add(p.start, p.end, prepared_->usage(o, n));
}

namespace {

// Places the jobs in `order` one by one at their earliest start, kept (pinned) jobs first since
// they hold their devices from time 0; nodes_for(j, o) restricts job j to some nodes (nullptr:
// any it is eligible for). A job that fits nowhere makes the makespan infinite. `state` starts
// idle; `s` is overwritten (its storage reused). Stops early, returning false, once a job ends
// after `cutoff`.
template <class NodesFor>
bool place_in_order(const Prepared& prepared, const std::vector<int>& option,
                    const std::vector<int>& order, double slot, NodesFor nodes_for,
                    ClusterState& state, Schedule& s, double cutoff) {
  s.jobs.resize(prepared.num_jobs());
  s.makespan = 0.0;
  // Jobs not in `order` stay unplaced, as in a fresh schedule.
  for (Placement& p : s.jobs) {
    p.option = -1;
    p.nodes.clear();
    p.start = p.end = 0.0;
  }
  const auto option_of = [&](int j) -> const Option& {
    const size_t ju = static_cast<size_t>(j);
    return prepared.options[ju][static_cast<size_t>(option[ju])];
  };
  const auto place = [&](int j) {
    SolverClock::tick(kPlacementUnits);  // the heuristics' work
    const size_t ju = static_cast<size_t>(j);
    const Option& o = option_of(j);
    Placement& p = s.jobs[ju];
    state.earliest_into(o, duration_of(o, slot), 0.0, nodes_for(ju, o), p);
    p.option = option[ju];
    if (!std::isfinite(p.start)) {
      s.makespan = kInfinity;
      p.option = -1;
      return true;
    }
    state.reserve(o, p);
    s.makespan = std::max(s.makespan, p.end);
    return !(p.end > cutoff);
  };
  for (int j : order)
    if (option_of(j).pinned && !place(j)) return false;
  for (int j : order)
    if (!option_of(j).pinned && !place(j)) return false;
  return true;
}

template <class NodesFor>
Schedule place_in_order_fresh(const Prepared& prepared, const std::vector<int>& option,
                              const std::vector<int>& order, double slot, NodesFor nodes_for) {
  Schedule s;
  ClusterState state(prepared);
  place_in_order(prepared, option, order, slot, nodes_for, state, s, kInfinity);
  return s;
}

}  // namespace

Schedule list_schedule(const Prepared& prepared, const std::vector<int>& option,
                       const std::vector<int>& order, double slot,
                       const std::vector<std::vector<int>>* fixed_nodes) {
  return place_in_order_fresh(
      prepared, option, order, slot, [&](size_t j, const Option&) -> const std::vector<int>* {
        return fixed_nodes && !(*fixed_nodes)[j].empty() ? &(*fixed_nodes)[j] : nullptr;
      });
}

namespace {

// The node choice of list_schedule_on: node[j] when job j's option may run there alone.
struct ChosenNode {
  const std::vector<int>& node;
  const std::vector<int>* operator()(size_t j, const Option& o) const {
    if (node[j] < 0 || o.pinned || o.whole_nodes() ||
        !std::binary_search(o.eligible.begin(), o.eligible.end(), node[j]))
      return nullptr;
    // Read at once by earliest_into (copied into the placement); one per thread, so that
    // listing a candidate allocates nothing.
    static thread_local std::vector<int> one(1);
    one[0] = node[j];
    return &one;
  }
};

}  // namespace

Schedule list_schedule_on(const Prepared& prepared, const std::vector<int>& option,
                          const std::vector<int>& order, const std::vector<int>& node) {
  return place_in_order_fresh(prepared, option, order, 0.0, ChosenNode{node});
}

bool list_schedule_on_into(const Prepared& prepared, const std::vector<int>& option,
                           const std::vector<int>& order, const std::vector<int>& node,
                           Schedule& out, ClusterState& scratch, double cutoff) {
  scratch.reset();
  return place_in_order(prepared, option, order, 0.0, ChosenNode{node}, scratch, out, cutoff);
}

std::vector<int> start_order(const Schedule& schedule) {
  std::vector<int> order(schedule.jobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return schedule.jobs[static_cast<size_t>(a)].start <
           schedule.jobs[static_cast<size_t>(b)].start;
  });
  return order;
}

Schedule compact(const Prepared& prepared, const Schedule& schedule) {
  std::vector<int> option(schedule.jobs.size());
  std::vector<std::vector<int>> nodes(schedule.jobs.size());
  for (size_t j = 0; j < schedule.jobs.size(); ++j) {
    option[j] = schedule.jobs[j].option;
    nodes[j] = schedule.jobs[j].nodes;
  }
  return list_schedule(prepared, option, start_order(schedule), 0.0, &nodes);
}

Plan to_plan(const Prepared& prepared, const Schedule& schedule) {
  const Cluster& cluster = prepared.cluster();
  const Problem& problem = *prepared.problem;
  Plan plan;
  plan.jobs.resize(schedule.jobs.size());
  // busy_until per global device id.
  std::vector<double> busy(static_cast<size_t>(cluster.total_devices()), 0.0);
  std::vector<int> order = start_order(schedule);
  std::stable_partition(order.begin(), order.end(), [&](int j) {
    const Placement& p = schedule.jobs[static_cast<size_t>(j)];
    return p.option >= 0 &&
           prepared.options[static_cast<size_t>(j)][static_cast<size_t>(p.option)].pinned;
  });
  for (int j : order) {
    const size_t ju = static_cast<size_t>(j);
    const Placement& p = schedule.jobs[ju];
    if (p.option < 0)
      throw SolverError(fmt::format("job '{}' is not scheduled", problem.jobs[ju].id));
    const Option& o = prepared.options[ju][static_cast<size_t>(p.option)];
    const Config& config = problem.jobs[ju].configs[static_cast<size_t>(o.config)];
    ScheduledJob& out = plan.jobs[ju];
    out.config = o.config;
    out.nodes = p.nodes;
    out.start_s = p.start;
    out.end_s = p.end;
    if (o.pinned) {
      out.devices = config.pinned_devices;
    } else {
      for (int n : p.nodes) {
        const int first = cluster.first_device(n);
        const int count = cluster.nodes[static_cast<size_t>(n)].devices;
        int taken = 0;
        for (int d = first; d < first + count && taken < o.devices; ++d) {
          // Tolerance: ends and starts come from the same arithmetic, but plans read from JSON
          // may carry rounding.
          if (busy[static_cast<size_t>(d)] <= p.start + 1e-9 * std::max(1.0, p.start)) {
            out.devices.push_back(d);
            ++taken;
          }
        }
        if (taken < o.devices)
          throw SolverError(fmt::format(
              "internal: node {} has {} free devices at {:.1f} s for job '{}', which needs {}",
              cluster.nodes[static_cast<size_t>(n)].name, taken, p.start, problem.jobs[ju].id,
              o.devices));
      }
    }
    std::sort(out.devices.begin(), out.devices.end());
    // Whole-node options hold every device of their nodes, used or not.
    for (int n : p.nodes) {
      const int first = cluster.first_device(n);
      const int count = cluster.nodes[static_cast<size_t>(n)].devices;
      for (int d = first; d < first + count; ++d) {
        const bool mine = std::binary_search(out.devices.begin(), out.devices.end(), d);
        if (mine || o.whole_nodes())
          busy[static_cast<size_t>(d)] = std::max(busy[static_cast<size_t>(d)], p.end);
      }
    }
  }
  plan.makespan_s = plan_makespan(plan);
  return plan;
}

Schedule from_plan(const Prepared& prepared, const Plan& plan) {
  const Problem& problem = *prepared.problem;
  if (plan.jobs.size() != prepared.num_jobs())
    throw SolverError(fmt::format("the plan has {} jobs, the instance {}", plan.jobs.size(),
                                  prepared.num_jobs()));
  Schedule s;
  s.jobs.resize(plan.jobs.size());
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const ScheduledJob& sj = plan.jobs[j];
    const auto& opts = prepared.options[j];
    const auto it = std::find_if(opts.begin(), opts.end(),
                                 [&](const Option& o) { return o.config == sj.config; });
    if (it == opts.end())
      throw SolverError(fmt::format("job '{}': the plan's configuration {} is not available",
                                    problem.jobs[j].id, sj.config));
    s.jobs[j].option = static_cast<int>(it - opts.begin());
    s.jobs[j].nodes = sj.nodes;
    s.jobs[j].start = sj.start_s;
    s.jobs[j].end = sj.end_s;
    s.makespan = std::max(s.makespan, sj.end_s);
  }
  return s;
}

}  // namespace saturn::solver
