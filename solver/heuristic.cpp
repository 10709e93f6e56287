#include "solver/heuristic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

namespace saturn::solver {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

const Option& opt(const Prepared& p, size_t j, int o) {
  return p.options[j][static_cast<size_t>(o)];
}

struct Key {
  double makespan = kInfinity;
  double sum_end = kInfinity;
  bool better_than(const Key& k) const {
    if (!std::isfinite(k.makespan)) return std::isfinite(makespan);
    if (!std::isfinite(makespan)) return false;
    const double eps = 1e-9 * std::max(1.0, k.makespan);
    if (makespan < k.makespan - eps) return true;
    if (makespan > k.makespan + eps) return false;
    return sum_end < k.sum_end - eps;
  }
};

Key key_of(const Schedule& s) {
  Key k;
  k.makespan = s.makespan;
  if (!std::isfinite(s.makespan)) return k;
  k.sum_end = 0;
  for (const Placement& p : s.jobs) k.sum_end += p.end;
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
  // Iterated local search in epochs: descend with critical-job and random moves until a local
  // stall, then restart from the epoch's best with a few random moves applied. An epoch that
  // stops improving ends; the next starts from the overall best with a bigger kick (searches
  // from one start settle in different local optima, measured on the 12-job families). Until
  // the time limit or a long stall of the overall best.
  const auto t0 = Clock::now();
  const size_t J = p.num_jobs();
  if (J == 0) return start;
  std::mt19937 rng(opts.seed);
  const long local_stall = 100 + 2 * static_cast<long>(J);
  const long global_stall = opts.stall_limit > 0 ? opts.stall_limit : 5000000;
  const long epoch_stall = 20000 + 200 * static_cast<long>(J);
  HeuristicResult best = start;
  Key best_key = key_of(best.schedule);
  HeuristicResult epoch_best = start;
  Key epoch_key = best_key;
  HeuristicResult cur = std::move(start);
  Key cur_key = best_key;
  long evaluations = cur.evaluations, since_best = 0, since_epoch_best = 0;
  bool improved_any = false;
  std::uniform_int_distribution<size_t> pick(0, J - 1);
  // A random change of the list; false when it cannot change the schedule (the same position,
  // or two identical jobs in the same option trading places), so no evaluation is spent on it.
  auto random_move = [&](std::vector<int>& option, std::vector<int>& order) {
    const int kind = static_cast<int>(rng() % 3);
    if (kind == 0) {
      const size_t j = pick(rng);
      if (p.options[j].size() < 2) return false;
      std::uniform_int_distribution<int> po(0, static_cast<int>(p.options[j].size()) - 1);
      int o = po(rng);
      if (o == option[j]) o = (o + 1) % static_cast<int>(p.options[j].size());
      option[j] = o;
      return true;
    }
    const size_t a = pick(rng), b = pick(rng);
    const size_t ja = static_cast<size_t>(order[a]), jb = static_cast<size_t>(order[b]);
    const bool twins = p.job_class[ja] == p.job_class[jb] && option[ja] == option[jb];
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
  long stall = 0;
  auto try_candidate = [&](std::vector<int>& option, std::vector<int>& order) {
    Schedule s = list_schedule(p, option, order);
    ++evaluations;
    ++since_best;
    ++since_epoch_best;
    const Key k = key_of(s);
    if (!k.better_than(cur_key)) {
      ++stall;
      return false;
    }
    cur_key = k;
    cur.option = option;
    cur.order = order;
    cur.schedule = std::move(s);
    stall = 0;
    if (cur_key.better_than(epoch_key)) {
      epoch_key = cur_key;
      epoch_best.option = cur.option;
      epoch_best.order = cur.order;
      epoch_best.schedule = cur.schedule;
      since_epoch_best = 0;
    }
    if (cur_key.better_than(best_key)) {
      best_key = cur_key;
      best.option = cur.option;
      best.order = cur.order;
      best.schedule = cur.schedule;
      since_best = 0;
      improved_any = true;
    }
    return true;
  };
  std::vector<size_t> pos(J);
  auto at_bound = [&] { return best.schedule.makespan <= opts.stop_at * (1 + 1e-9); };
  while (seconds_since(t0) < opts.time_limit_s && since_best < global_stall && !at_bound()) {
    if (since_epoch_best >= epoch_stall) {
      // New epoch: from the overall best with a bigger kick.
      epoch_best.option = best.option;
      epoch_best.order = best.order;
      const int kicks = 3 + static_cast<int>(rng() % (1 + J / 3));
      for (int i = 0; i < kicks; ++i) random_move(epoch_best.option, epoch_best.order);
      epoch_best.schedule = list_schedule(p, epoch_best.option, epoch_best.order);
      ++evaluations;
      epoch_key = key_of(epoch_best.schedule);
      since_epoch_best = 0;
      stall = local_stall;  // start the epoch with a kick from its (new) best
    }
    if (stall >= local_stall) {
      // Kick: restart from the epoch's best with 2-4 random moves, accepted whatever they do.
      cur.option = epoch_best.option;
      cur.order = epoch_best.order;
      const int kicks = 2 + static_cast<int>(rng() % 3);
      for (int i = 0; i < kicks; ++i) random_move(cur.option, cur.order);
      cur.schedule = list_schedule(p, cur.option, cur.order);
      ++evaluations;
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
        if (static_cast<int>(o) == cur.option[ju]) continue;
        std::vector<int> option = cur.option, order = cur.order;
        option[ju] = static_cast<int>(o);
        progress = try_candidate(option, order);
      }
      if (progress) break;
      const size_t at = pos[ju];
      for (size_t target : {size_t{0}, at / 2, at > 0 ? at - 1 : 0}) {
        if (target >= at) continue;
        std::vector<int> option = cur.option, order = cur.order;
        order.erase(order.begin() + static_cast<std::ptrdiff_t>(at));
        order.insert(order.begin() + static_cast<std::ptrdiff_t>(target), j);
        if ((progress = try_candidate(option, order))) break;
      }
      if (progress) break;
    }
    // Random moves: change one job's option, swap two jobs, or move a job earlier.
    for (int tries = 0; tries < 16 && !progress && stall < local_stall; ++tries) {
      std::vector<int> option = cur.option, order = cur.order;
      if (!random_move(option, order)) continue;
      progress = try_candidate(option, order);
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
