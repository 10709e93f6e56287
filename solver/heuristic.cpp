#include "solver/heuristic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "solver/clock.hpp"

namespace saturn::solver {

namespace {

using Clock = SolverClock;

const Option& opt(const Prepared& p, size_t j, int o) {
  return p.options[j][static_cast<size_t>(o)];
}

// Schedules compare by makespan, then by how many jobs end at the makespan, then by the sum of
// ends. The count guides the search across plateaus: when several jobs end together at the
// makespan, speeding up one of them does not lower it but is progress (22 jobs on 2x8: three
// one-device jobs ending together at 9032 s held every 10 s solve there, 4% above CP-SAT's best,
// as any one of them moved alone raised the sum of ends).
struct Key {
  double makespan = kInfinity;
  int critical = 0;
  double sum_end = kInfinity;
  bool better_than(const Key& k) const {
    if (!std::isfinite(k.makespan)) return std::isfinite(makespan);
    if (!std::isfinite(makespan)) return false;
    const double eps = 1e-9 * std::max(1.0, k.makespan);
    if (makespan < k.makespan - eps) return true;
    if (makespan > k.makespan + eps) return false;
    if (critical != k.critical) return critical < k.critical;
    return sum_end < k.sum_end - eps;
  }
};

Key key_of(const Schedule& s) {
  Key k;
  k.makespan = s.makespan;
  if (!std::isfinite(s.makespan)) return k;
  k.sum_end = 0;
  const double at = s.makespan * (1 - 1e-9);
  for (const Placement& p : s.jobs) {
    k.sum_end += p.end;
    k.critical += p.end >= at;
  }
  return k;
}

// Options chosen while list scheduling: the earliest-finishing option whose work is within
// (1 + slack) of the job's least work.
std::vector<int> greedy_finish(const Prepared& p, const std::vector<int>& order, double slack) {
  std::vector<int> chosen(p.num_jobs(), 0);
  ClusterState state(p);
  std::vector<int> sorted = order;
  std::stable_partition(sorted.begin(), sorted.end(), [&](int j) {
    for (const Option& o : p.options[static_cast<size_t>(j)])
      if (o.pinned) return true;
    return false;
  });
  for (int j : sorted) {
    const size_t ju = static_cast<size_t>(j);
    double least = kInfinity;
    for (const Option& o : p.options[ju]) least = std::min(least, o.min_area);
    Placement best;
    best.end = kInfinity;
    double best_area = kInfinity;
    for (size_t o = 0; o < p.options[ju].size(); ++o) {
      const Option& option = p.options[ju][o];
      if (option.min_area > least * (1 + slack) && !option.pinned) continue;
      Placement pl = state.earliest(option, option.time_s, 0.0);
      if (option.pinned && pl.start > 0) continue;
      if (pl.end < best.end || (pl.end == best.end && option.min_area < best_area)) {
        best = pl;
        best.option = static_cast<int>(o);
        best_area = option.min_area;
      }
    }
    if (best.option < 0) continue;  // nothing fits (a pinned conflict): list_schedule reports it
    chosen[ju] = best.option;
    state.reserve(opt(p, ju, best.option), best);
  }
  return chosen;
}

std::vector<int> area_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]).min_area >
           opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]).min_area;
  });
  return order;
}

std::vector<int> wide_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Option& x = opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]);
    const Option& y = opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]);
    const int gx = x.devices * x.nodes, gy = y.devices * y.nodes;
    if (gx != gy) return gx > gy;
    return x.time_s > y.time_s;
  });
  return order;
}

// Large-neighbourhood step: the jobs in `freed` leave the schedule, every other job keeps its
// start and nodes, and the freed jobs are put back in the best way there is: every order of
// them, each in every option and (single-node) node at its earliest start given what is
// placed, by depth-first branch and bound on (makespan, sum of ends). Serial placement over all
// orders and choices yields every active placement of the freed jobs around the fixed ones, so
// within its budget the window is solved exactly. Identical jobs are placed in one order only.
// Then the whole schedule is listed again in start order with the nodes found (left shift).
// Returns the result when it beats `cur`; `budget` counts placements and is decreased.
struct WindowResult {
  bool improved = false;
  std::vector<int> option, order, node;
  Schedule schedule;
};

WindowResult resolve_window(const Prepared& p, const std::vector<int>& freed,
                            const std::vector<int>& cur_option, const Schedule& cur,
                            double max_time, long& budget) {
  WindowResult out;
  const size_t J = p.num_jobs();
  std::vector<char> is_freed(J, 0);
  for (int j : freed) is_freed[static_cast<size_t>(j)] = 1;
  ClusterState base(p);
  double fixed_makespan = 0, fixed_sum = 0;
  for (size_t j = 0; j < J; ++j) {
    if (is_freed[j]) continue;
    const Placement& pl = cur.jobs[j];
    base.reserve(opt(p, j, pl.option), pl);
    fixed_makespan = std::max(fixed_makespan, pl.end);
    fixed_sum += pl.end;
  }
  const size_t k = freed.size();
  // The window's own objective is (makespan, sum of ends), which partial placements bound from
  // below; the critical count is compared on the whole result only.
  Key best = key_of(cur);
  best.critical = 0;
  std::vector<Placement> place(k), best_place;
  std::vector<char> done(k, 0);
  std::vector<int> one(1);
  std::function<void(const ClusterState&, size_t, double, double)> dfs =
      [&](const ClusterState& state, size_t depth, double makespan, double sum) {
        if (depth == k) {
          const Key key{makespan, 0, sum};
          if (key.better_than(best)) {
            best = key;
            best_place = place;
          }
          return;
        }
        for (size_t i = 0; i < k && budget > 0; ++i) {
          if (done[i]) continue;
          const size_t j = static_cast<size_t>(freed[i]);
          // Of identical jobs not placed yet, only the first is placed next.
          bool twin_first = false;
          for (size_t m = 0; m < i && !twin_first; ++m)
            twin_first = !done[m] && p.job_class[static_cast<size_t>(freed[m])] == p.job_class[j];
          if (twin_first) continue;
          for (size_t o = 0; o < p.options[j].size() && budget > 0; ++o) {
            const Option& option = p.options[j][o];
            if (option.pinned || option.time_s >= max_time) continue;
            const size_t choices = option.whole_nodes() ? 1 : option.eligible.size();
            for (size_t c = 0; c < choices && budget > 0; ++c) {
              --budget;
              const std::vector<int>* fixed = nullptr;
              if (!option.whole_nodes()) {
                one[0] = option.eligible[c];
                fixed = &one;
              }
              Placement pl = state.earliest(option, option.time_s, 0.0, fixed);
              if (!std::isfinite(pl.start)) continue;
              const double m = std::max(makespan, pl.end);
              // Ends only add up: a partial placement no better than the best is pruned.
              if (!Key{m, 0, sum + pl.end}.better_than(best)) continue;
              pl.option = static_cast<int>(o);
              ClusterState next = state;
              next.reserve(option, pl);
              place[i] = pl;
              done[i] = 1;
              dfs(next, depth + 1, m, sum + pl.end);
              done[i] = 0;
            }
          }
        }
      };
  dfs(base, 0, fixed_makespan, fixed_sum);
  if (best_place.empty()) return out;
  Schedule s = cur;
  for (size_t i = 0; i < k; ++i) s.jobs[static_cast<size_t>(freed[i])] = best_place[i];
  out.option = cur_option;
  out.node.assign(J, -1);
  for (size_t j = 0; j < J; ++j) {
    out.option[j] = s.jobs[j].option;
    if (s.jobs[j].nodes.size() == 1) out.node[j] = s.jobs[j].nodes[0];
  }
  out.order = start_order(s);
  out.schedule = list_schedule_on(p, out.option, out.order, out.node);
  out.improved = key_of(out.schedule).better_than(key_of(cur));
  return out;
}

}  // namespace

std::vector<int> allot_within(const Prepared& p, double T) {
  std::vector<int> out(p.num_jobs(), 0);
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    int best = -1, fastest = 0;
    for (size_t o = 0; o < p.options[j].size(); ++o) {
      const Option& x = p.options[j][o];
      if (x.time_s < p.options[j][static_cast<size_t>(fastest)].time_s)
        fastest = static_cast<int>(o);
      if (x.time_s > T * (1 + 1e-12)) continue;
      if (best < 0 || x.min_area < opt(p, j, best).min_area ||
          (x.min_area == opt(p, j, best).min_area && x.time_s < opt(p, j, best).time_s))
        best = static_cast<int>(o);
    }
    out[j] = best >= 0 ? best : fastest;
  }
  return out;
}

std::vector<int> lpt_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Option& x = opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]);
    const Option& y = opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]);
    if (x.time_s != y.time_s) return x.time_s > y.time_s;
    return x.devices * x.nodes > y.devices * y.nodes;
  });
  return order;
}

HeuristicResult local_search(const Prepared& p, HeuristicResult start,
                             const HeuristicOptions& opts) {
  // Iterated local search in epochs over (option, node, order) per job: descend with
  // critical-job and random moves until a local stall, then restart from the epoch's best with
  // a few random moves applied. An epoch that stops improving ends; the next starts from the
  // overall best with a bigger kick (searches from one start settle in different local optima,
  // measured on the 12-job families). Until the time limit or `stop_at`: a stall is no reason
  // to stop while the gap is open, only to restart (issue 21: a stall limit ended 60 s solves
  // after 15 s with a 5.9% gap).
  const auto t0 = Clock::now();
  const size_t J = p.num_jobs();
  if (J == 0) return start;
  std::mt19937 rng(opts.seed);
  const long local_stall = 100 + 2 * static_cast<long>(J);
  const long global_stall =
      opts.stall_limit > 0 ? opts.stall_limit : std::numeric_limits<long>::max();
  // Share of the search's time the ruin-and-recreate steps may take (as the windows' 30%).
  const double recreate_share = 0.3;
  const long epoch_stall = 4000 + 100 * static_cast<long>(J);
  const size_t N = p.cluster().nodes.size();
  if (start.node.size() != J) start.node.assign(J, -1);
  HeuristicResult best = start;
  Key best_key = key_of(best.schedule);
  HeuristicResult epoch_best = start;
  Key epoch_key = best_key;
  HeuristicResult cur = std::move(start);
  Key cur_key = best_key;
  long evaluations = cur.evaluations, since_best = 0, since_epoch_best = 0;
  bool improved_any = false;
  std::uniform_int_distribution<size_t> pick(0, J - 1);
  // Nodes a job's single-node options may use (the node move's choices).
  std::vector<std::vector<int>> node_choices(J);
  for (size_t j = 0; j < J; ++j) {
    std::vector<char> any(N, 0);
    for (const Option& o : p.options[j])
      if (!o.whole_nodes() && !o.pinned)
        for (int n : o.eligible) any[static_cast<size_t>(n)] = 1;
    for (size_t n = 0; n < N; ++n)
      if (any[n]) node_choices[j].push_back(static_cast<int>(n));
    if (node_choices[j].size() < 2) node_choices[j].clear();  // nothing to choose
  }
  // An option at least as long as the best makespan so far cannot be part of a better plan:
  // option moves skip it, and a new epoch takes such options out of its start (below). Without
  // this the search stays in the basin of a job alone for the whole makespan on one device
  // (2x8-05-j22: a one-device ViT-H job of 9032 s held every 10 s solve at 9032 s, 4% above
  // CP-SAT's best), as every single move out of it lengthens the schedule at first.
  auto too_long = [&](size_t j, int o) {
    const Option& x = opt(p, j, o);
    return !x.pinned && x.time_s >= best_key.makespan * (1 - 1e-9);
  };
  // Jobs in options as long as the best makespan take their least-work option that is shorter
  // (a plan better than the best has none of them).
  auto shorten = [&](std::vector<int>& option) {
    for (size_t j = 0; j < J; ++j) {
      if (!too_long(j, option[j])) continue;
      int shorter = -1;
      for (size_t o = 0; o < p.options[j].size(); ++o)
        if (!too_long(j, static_cast<int>(o)) &&
            (shorter < 0 || opt(p, j, static_cast<int>(o)).min_area < opt(p, j, shorter).min_area))
          shorter = static_cast<int>(o);
      if (shorter >= 0) option[j] = shorter;
    }
  };
  // A random change of the list; false when it cannot change the schedule (the same position,
  // or two identical jobs in the same option trading places), so no evaluation is spent on it.
  auto random_move = [&](std::vector<int>& option, std::vector<int>& order,
                         std::vector<int>& node) {
    const int kind = static_cast<int>(rng() % (N > 1 ? 4 : 3));
    if (kind == 3) {
      // Put a job on a given node (or let the scheduler choose again).
      const size_t j = pick(rng);
      const auto& choices = node_choices[j];
      if (choices.empty()) return false;
      const int n = static_cast<int>(rng() % (choices.size() + 1)) - 1;
      const int to = n < 0 ? -1 : choices[static_cast<size_t>(n)];
      if (to == node[j]) return false;
      node[j] = to;
      return true;
    }
    if (kind == 0) {
      const size_t j = pick(rng);
      if (p.options[j].size() < 2) return false;
      std::uniform_int_distribution<int> po(0, static_cast<int>(p.options[j].size()) - 1);
      int o = po(rng);
      if (o == option[j]) o = (o + 1) % static_cast<int>(p.options[j].size());
      if (too_long(j, o)) return false;
      option[j] = o;
      return true;
    }
    const size_t a = pick(rng), b = pick(rng);
    const size_t ja = static_cast<size_t>(order[a]), jb = static_cast<size_t>(order[b]);
    const bool twins =
        p.job_class[ja] == p.job_class[jb] && option[ja] == option[jb] && node[ja] == node[jb];
    if (a == b || (twins && (kind == 1 || std::max(a, b) - std::min(a, b) == 1))) return false;
    if (kind == 1) {
      std::swap(order[a], order[b]);
    } else {
      const int j = order[std::max(a, b)];
      order.erase(order.begin() + static_cast<std::ptrdiff_t>(std::max(a, b)));
      order.insert(order.begin() + static_cast<std::ptrdiff_t>(std::min(a, b)), j);
    }
    return true;
  };
  // Candidates are listed into reused storage (list_schedule_on_into): allocation took about
  // 40% of the search's time. On one node the node choice is free (all -1).
  ClusterState scratch(p);
  const std::vector<int> any_node(J, -1);
  auto evaluate_into = [&](const std::vector<int>& option, const std::vector<int>& order,
                           const std::vector<int>& node, Schedule& out, double cutoff = kInfinity) {
    ++evaluations;
    return list_schedule_on_into(p, option, order, N > 1 ? node : any_node, out, scratch, cutoff);
  };
  auto evaluate = [&](const std::vector<int>& option, const std::vector<int>& order,
                      const std::vector<int>& node) {
    Schedule s;
    evaluate_into(option, order, node, s);
    return s;
  };
  // Forward-backward improvement (double justification, as in list-scheduling heuristics for
  // project scheduling): list the jobs again latest end first, which in mirrored time is a
  // schedule no longer than this one, then forward again in the order of its mirrored starts,
  // each job on the node it had. A job listed in the start order of a feasible schedule starts
  // no later there, so neither pass lengthens the schedule; together they pack the jobs tighter
  // from both ends. Not with pinned jobs: they must start at time 0, which mirroring breaks.
  bool pinned = false;
  for (size_t j = 0; j < J; ++j)
    for (const Option& o : p.options[j]) pinned = pinned || o.pinned;
  const bool justify_on = !pinned;
  std::vector<int> j_order(J), j_node(J);
  Schedule backward, forward;
  auto by_end_desc = [&](const Schedule& s) {
    std::iota(j_order.begin(), j_order.end(), 0);
    std::stable_sort(j_order.begin(), j_order.end(), [&](int a, int b) {
      return s.jobs[static_cast<size_t>(a)].end > s.jobs[static_cast<size_t>(b)].end;
    });
    for (size_t j = 0; j < J; ++j)
      j_node[j] = s.jobs[j].nodes.size() == 1 ? s.jobs[j].nodes[0] : -1;
  };
  auto justify = [&](const std::vector<int>& option, std::vector<int>& order,
                     std::vector<int>& node, Schedule& s) {
    if (!justify_on || !std::isfinite(s.makespan)) return;
    by_end_desc(s);
    list_schedule_on_into(p, option, j_order, j_node, backward, scratch);
    ++evaluations;
    if (!std::isfinite(backward.makespan)) return;
    by_end_desc(backward);
    list_schedule_on_into(p, option, j_order, j_node, forward, scratch);
    ++evaluations;
    if (!key_of(forward).better_than(key_of(s))) return;
    order = j_order;
    node = j_node;
    std::swap(s, forward);
  };
  long stall = 0;
  auto accept = [&](const std::vector<int>& option, const std::vector<int>& order,
                    const std::vector<int>& node, Schedule& s) {
    const Key k = key_of(s);
    if (!k.better_than(cur_key)) {
      ++stall;
      return false;
    }
    cur_key = k;
    cur.option = option;
    cur.order = order;
    cur.node = node;
    std::swap(cur.schedule, s);  // s keeps storage for the next candidate
    stall = 0;
    if (cur_key.better_than(epoch_key)) {
      epoch_key = cur_key;
      epoch_best.option = cur.option;
      epoch_best.order = cur.order;
      epoch_best.node = cur.node;
      epoch_best.schedule = cur.schedule;
      since_epoch_best = 0;
    }
    if (cur_key.better_than(best_key)) {
      best_key = cur_key;
      best.option = cur.option;
      best.order = cur.order;
      best.node = cur.node;
      best.schedule = cur.schedule;
      since_best = 0;
      improved_any = true;
      if (opts.on_improvement) opts.on_improvement(best.schedule.makespan);
    }
    return true;
  };
  Schedule candidate;
  auto try_candidate = [&](std::vector<int>& option, std::vector<int>& order,
                           std::vector<int>& node) {
    evaluate_into(option, order, node, candidate);
    justify(option, order, node, candidate);
    ++since_best;
    ++since_epoch_best;
    return accept(option, order, node, candidate);
  };
  // Large-neighbourhood steps (resolve_window) from the epoch's best, within a share of the
  // time: a window of 4-5 jobs starting near a critical (or random) job's start, across all
  // nodes, re-placed exactly. They change several jobs at once, which single moves reach only
  // through worse schedules.
  double lns_seconds = 0;
  std::vector<int> freed, by_distance(J);
  auto lns_step = [&] {
    const auto l0 = Clock::now();
    const Schedule& base = epoch_best.schedule;
    size_t centre = pick(rng);
    if (rng() % 2 == 0) {
      std::vector<size_t> critical;
      for (size_t j = 0; j < J; ++j)
        if (base.jobs[j].end >= base.makespan * (1 - 1e-12)) critical.push_back(j);
      if (!critical.empty()) centre = critical[rng() % critical.size()];
    }
    // One window in three is the schedule's tail: the jobs ending last, on every node. Moving
    // a job that ends the makespan on one node to the other often needs other jobs there to
    // move or change shape at once (2x8-02-j16: a short job after the two long ones of one
    // node, in seven devices, and a one-device job away from it), which start windows around
    // one job miss when the jobs involved start far apart.
    const bool tail = rng() % 3 == 0;
    const double t = tail ? base.makespan : base.jobs[centre].start;
    auto when = [&](int j) {
      const Placement& pl = base.jobs[static_cast<size_t>(j)];
      return tail ? pl.end : pl.start;
    };
    std::iota(by_distance.begin(), by_distance.end(), 0);
    // Nearest first, ties broken at random so that repeated windows differ.
    std::shuffle(by_distance.begin(), by_distance.end(), rng);
    std::stable_sort(by_distance.begin(), by_distance.end(),
                     [&](int a, int b) { return std::fabs(when(a) - t) < std::fabs(when(b) - t); });
    const size_t k = std::min(J, size_t{4} + rng() % 2);
    freed.clear();
    for (size_t i = 0; i < J && freed.size() < k; ++i) {
      const size_t j = static_cast<size_t>(by_distance[i]);
      if (!opt(p, j, epoch_best.option[j]).pinned) freed.push_back(static_cast<int>(j));
    }
    if (freed.empty()) return false;
    long budget = 40000;
    WindowResult w =
        resolve_window(p, freed, epoch_best.option, base, best_key.makespan * (1 - 1e-9), budget);
    ++evaluations;
    lns_seconds += seconds_since(l0);
    if (!w.improved) return false;
    cur_key = key_of(epoch_best.schedule);  // compare with the window's start
    stall = 0;
    return accept(w.option, w.order, w.node, w.schedule);
  };
  // Ruin and recreate (list form of large-neighbourhood search): 2-4 related jobs leave the
  // epoch's best list; each goes back, in random order, at the list position, option and node
  // that give the best partial schedule; then the whole list is justified. Unlike the windows
  // above, the other jobs are listed again rather than kept at their starts, so freeing a job
  // early in the schedule can shift every later one (2x8-12-j22: five 2-device jobs of 3837 s
  // wait behind short jobs whose reshuffling moves them all).
  double recreate_seconds = 0;
  std::vector<int> removed, rr_option, rr_order, rr_node, trial_order;
  std::vector<char> is_removed(J);
  std::vector<size_t> positions;
  Schedule rr_schedule, trial;
  // Takes k jobs out of `from` (related or random) and puts each back at its best (position,
  // option, node); the result is in rr_option, rr_order, rr_node, rr_schedule.
  auto ruin_recreate = [&](const HeuristicResult& from, size_t k) {
    const Schedule& base = from.schedule;
    k = std::min(J, k);
    removed.clear();
    std::fill(is_removed.begin(), is_removed.end(), 0);
    auto take = [&](size_t j) {
      if (is_removed[j] || removed.size() >= k || opt(p, j, from.option[j]).pinned) return;
      is_removed[j] = 1;
      removed.push_back(static_cast<int>(j));
    };
    const int how = static_cast<int>(rng() % (N > 1 ? 5 : 3));
    if (how == 4) {
      // A job ending at the makespan on one node and the jobs of the other nodes that run
      // while it does (nearest in time first), 2 more than the other ways take: moving a job
      // to another node pays only with that node repacked at once (2x8-12-j22: five 2-device
      // jobs of 3837 s wait behind short jobs, and a short job moved across must find room
      // there), which a single move or a ruin of one node's jobs cannot do.
      std::vector<size_t> critical;
      for (size_t j = 0; j < J; ++j)
        if (base.jobs[j].end >= base.makespan * (1 - 1e-12) && base.jobs[j].nodes.size() == 1)
          critical.push_back(j);
      if (critical.empty()) return false;
      const size_t centre = critical[rng() % critical.size()];
      const int node_of = base.jobs[centre].nodes[0];
      const Placement& c = base.jobs[centre];
      k = std::min(J, k + 2);
      take(centre);
      auto distance = [&](int j) {
        const Placement& pl = base.jobs[static_cast<size_t>(j)];
        if (pl.end > c.start && pl.start < c.end) return 0.0;  // overlaps it
        return std::min(std::fabs(pl.start - c.end), std::fabs(c.start - pl.end));
      };
      std::iota(by_distance.begin(), by_distance.end(), 0);
      std::shuffle(by_distance.begin(), by_distance.end(), rng);
      std::stable_sort(by_distance.begin(), by_distance.end(),
                       [&](int a, int b) { return distance(a) < distance(b); });
      for (size_t i = 0; i < J && removed.size() < k; ++i) {
        const Placement& pl = base.jobs[static_cast<size_t>(by_distance[i])];
        if (pl.nodes.size() == 1 && pl.nodes[0] != node_of)
          take(static_cast<size_t>(by_distance[i]));
      }
    } else if (how == 0) {
      // Random jobs.
      for (size_t tries = 0; tries < 4 * k && removed.size() < k; ++tries) take(pick(rng));
    } else if (how == 3) {
      // Random jobs of one node, mostly of a node that ends at the makespan: jobs that share
      // devices over time there (a long job's devices are a column that others must fill).
      size_t centre = pick(rng);
      if (rng() % 3 != 0)
        for (size_t j = 0; j < J; ++j)
          if (base.jobs[j].end >= base.makespan * (1 - 1e-12)) centre = j;
      if (base.jobs[centre].nodes.size() != 1) return false;
      const int node_of = base.jobs[centre].nodes[0];
      std::iota(by_distance.begin(), by_distance.end(), 0);
      std::shuffle(by_distance.begin(), by_distance.end(), rng);
      for (size_t i = 0; i < J && removed.size() < k; ++i) {
        const Placement& pl = base.jobs[static_cast<size_t>(by_distance[i])];
        if (pl.nodes.size() == 1 && pl.nodes[0] == node_of)
          take(static_cast<size_t>(by_distance[i]));
      }
    } else {
      // A critical job (how 1) or a random one (how 2) and the jobs nearest to it in start time
      // (on any node): the ones whose devices it would take or leave.
      size_t centre = pick(rng);
      if (how == 1) {
        std::vector<size_t> critical;
        for (size_t j = 0; j < J; ++j)
          if (base.jobs[j].end >= base.makespan * (1 - 1e-12)) critical.push_back(j);
        if (!critical.empty()) centre = critical[rng() % critical.size()];
      }
      const double t = base.jobs[centre].start;
      std::iota(by_distance.begin(), by_distance.end(), 0);
      std::shuffle(by_distance.begin(), by_distance.end(), rng);
      std::stable_sort(by_distance.begin(), by_distance.end(), [&](int a, int b) {
        return std::fabs(base.jobs[static_cast<size_t>(a)].start - t) <
               std::fabs(base.jobs[static_cast<size_t>(b)].start - t);
      });
      take(centre);
      for (size_t i = 0; i < J && removed.size() < k; ++i)
        take(static_cast<size_t>(by_distance[i]));
    }
    if (removed.empty()) return false;
    std::shuffle(removed.begin(), removed.end(), rng);
    rr_option = from.option;
    rr_node = from.node;
    rr_order.clear();
    for (int j : from.order)
      if (!is_removed[static_cast<size_t>(j)]) rr_order.push_back(j);
    for (int j : removed) {
      const size_t ju = static_cast<size_t>(j);
      // Every list position on small instances; on big ones 24 random positions (one insertion
      // tries positions x options x nodes lists, each linear in the jobs).
      positions.resize(rr_order.size() + 1);
      std::iota(positions.begin(), positions.end(), size_t{0});
      if (positions.size() > 32) {
        std::shuffle(positions.begin(), positions.end(), rng);
        positions.resize(24);
      }
      if (seconds_since(t0) >= opts.time_limit_s) return false;
      Key best_key_here;
      int best_o = rr_option[ju], best_n = rr_node[ju];
      size_t best_pos = rr_order.size();
      static const std::vector<int> kAnyNode = {-1};
      const std::vector<int>& nodes = node_choices[ju].empty() ? kAnyNode : node_choices[ju];
      for (size_t o = 0; o < p.options[ju].size(); ++o) {
        if (too_long(ju, static_cast<int>(o))) continue;
        rr_option[ju] = static_cast<int>(o);
        for (int n : nodes) {
          rr_node[ju] = n;
          for (size_t at : positions) {
            trial_order = rr_order;
            trial_order.insert(trial_order.begin() + static_cast<std::ptrdiff_t>(at), j);
            // A trial that ends a job after the best trial's makespan cannot beat it: stop
            // listing it there (makespan first in the key).
            const double cutoff =
                best_key_here.makespan + 2e-9 * std::max(1.0, std::isfinite(best_key_here.makespan)
                                                                  ? best_key_here.makespan
                                                                  : 1.0);
            if (!evaluate_into(rr_option, trial_order, rr_node, trial, cutoff)) continue;
            const Key key = key_of(trial);
            if (key.better_than(best_key_here)) {
              best_key_here = key;
              best_o = static_cast<int>(o);
              best_n = n;
              best_pos = at;
            }
          }
        }
      }
      rr_option[ju] = best_o;
      rr_node[ju] = best_n;
      rr_order.insert(rr_order.begin() + static_cast<std::ptrdiff_t>(best_pos), j);
    }
    evaluate_into(rr_option, rr_order, rr_node, rr_schedule);
    justify(rr_option, rr_order, rr_node, rr_schedule);
    return true;
  };
  auto recreate_step = [&] {
    const auto r0 = Clock::now();
    const bool done = ruin_recreate(epoch_best, 2 + rng() % 3);
    recreate_seconds += seconds_since(r0);
    if (!done || !key_of(rr_schedule).better_than(epoch_key)) return false;
    cur_key = epoch_key;  // compare with the step's start
    stall = 0;
    return accept(rr_option, rr_order, rr_node, rr_schedule);
  };
  std::vector<size_t> pos(J);
  // The candidate's (option, order, node), storage reused from one candidate to the next.
  std::vector<int> option, order, node;
  auto at_bound = [&] { return best.schedule.makespan <= opts.stop_at * (1 + 1e-9); };
  while (seconds_since(t0) < opts.time_limit_s && since_best < global_stall && !at_bound()) {
    if (since_epoch_best >= epoch_stall) {
      // New epoch: from the overall best with a bigger kick.
      epoch_best.option = best.option;
      epoch_best.order = best.order;
      epoch_best.node = best.node;
      shorten(epoch_best.option);
      const int kicks = 3 + static_cast<int>(rng() % (1 + J / 3));
      for (int i = 0; i < kicks; ++i)
        random_move(epoch_best.option, epoch_best.order, epoch_best.node);
      epoch_best.schedule = evaluate(epoch_best.option, epoch_best.order, epoch_best.node);
      justify(epoch_best.option, epoch_best.order, epoch_best.node, epoch_best.schedule);
      epoch_key = key_of(epoch_best.schedule);
      since_epoch_best = 0;
      stall = local_stall;  // start the epoch with a kick from its (new) best
    }
    if (stall >= local_stall && recreate_seconds < recreate_share * seconds_since(t0) &&
        recreate_step())
      continue;
    if (stall >= local_stall && lns_seconds < 0.3 * seconds_since(t0) && lns_step()) continue;
    if (stall >= local_stall) {
      // Kick: restart from the epoch's best with 2-4 random moves, accepted whatever they do.
      cur.option = epoch_best.option;
      cur.order = epoch_best.order;
      cur.node = epoch_best.node;
      // From a best that holds a job alone for its whole makespan, every kick leaves that job
      // in a shorter option: the basin of that option holds nothing better.
      shorten(cur.option);
      const int kicks = 2 + static_cast<int>(rng() % 3);
      for (int i = 0; i < kicks; ++i) random_move(cur.option, cur.order, cur.node);
      cur.schedule = evaluate(cur.option, cur.order, cur.node);
      cur_key = key_of(cur.schedule);
      stall = 0;
      continue;
    }
    bool progress = false;
    // Critical jobs: those ending at the makespan.
    std::vector<int> critical;
    for (size_t j = 0; j < J; ++j)
      if (cur.schedule.jobs[j].end >= cur.schedule.makespan * (1 - 1e-12))
        critical.push_back(static_cast<int>(j));
    for (size_t i = 0; i < cur.order.size(); ++i) pos[static_cast<size_t>(cur.order[i])] = i;
    for (int j : critical) {
      const size_t ju = static_cast<size_t>(j);
      for (size_t o = 0; o < p.options[ju].size() && !progress; ++o) {
        if (static_cast<int>(o) == cur.option[ju] || too_long(ju, static_cast<int>(o))) continue;
        option = cur.option;
        order = cur.order;
        node = cur.node;
        option[ju] = static_cast<int>(o);
        progress = try_candidate(option, order, node);
      }
      if (progress) break;
      for (size_t k = 0; k < node_choices[ju].size() && !progress; ++k) {
        const int n = node_choices[ju][k];
        if (n == cur.node[ju] ||
            (cur.schedule.jobs[ju].nodes.size() == 1 && cur.schedule.jobs[ju].nodes[0] == n))
          continue;
        option = cur.option;
        order = cur.order;
        node = cur.node;
        node[ju] = n;
        progress = try_candidate(option, order, node);
      }
      if (progress) break;
      const size_t at = pos[ju];
      for (size_t target : {size_t{0}, at / 2, at > 0 ? at - 1 : 0}) {
        if (target >= at) continue;
        option = cur.option;
        order = cur.order;
        node = cur.node;
        order.erase(order.begin() + static_cast<std::ptrdiff_t>(at));
        order.insert(order.begin() + static_cast<std::ptrdiff_t>(target), j);
        if ((progress = try_candidate(option, order, node))) break;
      }
      if (progress) break;
    }
    // Random moves: change one job's option or node, swap two jobs, or move a job earlier.
    for (int tries = 0; tries < 16 && !progress && stall < local_stall; ++tries) {
      option = cur.option;
      order = cur.order;
      node = cur.node;
      if (!random_move(option, order, node)) continue;
      progress = try_candidate(option, order, node);
    }
  }
  best.evaluations = evaluations;
  if (improved_any && best.method.find("+local") == std::string::npos) best.method += "+local";
  return best;
}

HeuristicResult heuristic_schedule(const Prepared& p, double lower_bound,
                                   const HeuristicOptions& opts) {
  const auto t0 = Clock::now();
  HeuristicResult best;
  Key best_key;
  auto consider = [&](std::vector<int> option, std::vector<int> order, std::string method) {
    Schedule s = list_schedule(p, option, order);
    ++best.evaluations;
    const Key k = key_of(s);
    if (k.better_than(best_key)) {
      best_key = k;
      best.schedule = std::move(s);
      best.option = std::move(option);
      best.order = std::move(order);
      best.method = std::move(method);
    }
  };
  const double factors[] = {1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 2.0, 3.0, kInfinity};
  for (double f : factors) {
    const std::vector<int> option =
        std::isfinite(f) ? allot_within(p, f * lower_bound) : allot_within(p, 0.0);
    const std::string name = std::isfinite(f) ? fmt::format("area{:g}", f) : "fastest";
    consider(option, lpt_order(p, option), name + "+lpt");
    consider(option, area_order(p, option), name + "+work");
    consider(option, wide_order(p, option), name + "+wide");
  }
  // Greedy finish-time allotment, in the LPT order of the least-work options.
  const std::vector<int> least = allot_within(p, kInfinity);
  const std::vector<int> base_order = lpt_order(p, least);
  for (double slack : {0.0, 0.1, 0.25, 0.5, 1.0, kInfinity}) {
    const std::vector<int> option = greedy_finish(p, base_order, slack);
    consider(option, base_order, fmt::format("greedy{:g}", slack));
    consider(option, lpt_order(p, option), fmt::format("greedy{:g}+lpt", slack));
  }
  if (!opts.local_search) return best;
  HeuristicOptions ls = opts;
  ls.time_limit_s = std::max(0.0, opts.time_limit_s - seconds_since(t0));
  return local_search(p, std::move(best), ls);
}

}  // namespace saturn::solver
