#include "solver/baselines.hpp"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <random>
#include <tuple>

#include "solver/heuristic.hpp"
#include "solver/validate.hpp"

namespace saturn::solver {

const char* to_string(Baseline b) {
  switch (b) {
    case Baseline::current_practice:
      return "current-practice";
    case Baseline::min:
      return "min";
    case Baseline::optimus_greedy:
      return "optimus-greedy";
    case Baseline::random:
      return "random";
  }
  return "?";
}

namespace {

// Labels carry knobs ("fsdp[recompute=true]"): the strategy is the part before '['.
bool is_strategy(const std::string& label, const std::string& strategy) {
  if (strategy.empty()) return false;
  std::string l;
  for (char c : label.substr(0, label.find('[')))
    l += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string s;
  for (char c : strategy) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l == s;
}

bool eligible_on(const Option& o, int n) {
  return std::binary_search(o.eligible.begin(), o.eligible.end(), n);
}

Schedule current_practice(const Prepared& p, const std::string& preferred) {
  const Problem& problem = *p.problem;
  const Cluster& cluster = p.cluster();
  Schedule s;
  s.jobs.resize(p.num_jobs());
  ClusterState state(p);
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    const auto& opts = p.options[j];
    Placement best;
    best.end = kInfinity;
    Option best_hold;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) {
      const int cap = cluster.nodes[n].devices;
      int pick = -1;
      auto rank = [&](const Option& o) {
        // The preferred strategy on the whole node first, then any configuration on the whole
        // node, then the widest that fits; fastest within each.
        const bool whole = o.devices == cap;
        const bool picked =
            is_strategy(problem.jobs[j].configs[static_cast<size_t>(o.config)].strategy, preferred);
        return std::make_tuple(whole && picked ? 0 : whole ? 1 : 2, -o.devices, o.time_s);
      };
      for (size_t o = 0; o < opts.size(); ++o) {
        if (opts[o].whole_nodes() || !eligible_on(opts[o], static_cast<int>(n))) continue;
        if (pick < 0 || rank(opts[o]) < rank(opts[static_cast<size_t>(pick)]))
          pick = static_cast<int>(o);
      }
      if (pick < 0) continue;
      Option hold = opts[static_cast<size_t>(pick)];
      hold.devices = cap;  // the job holds the whole node
      hold.eligible = {static_cast<int>(n)};
      Placement pl = state.earliest(hold, hold.time_s, 0.0);
      if (pl.end < best.end) {
        best = pl;
        best.option = pick;
        best_hold = hold;
      }
    }
    if (best.option < 0) {
      // Fits no single node: its fastest multi-node configuration.
      int pick = -1;
      for (size_t o = 0; o < opts.size(); ++o)
        if (pick < 0 || opts[o].time_s < opts[static_cast<size_t>(pick)].time_s)
          pick = static_cast<int>(o);
      best_hold = opts[static_cast<size_t>(pick)];
      best = state.earliest(best_hold, best_hold.time_s, 0.0);
      best.option = pick;
    }
    state.reserve(best_hold, best);
    s.makespan = std::max(s.makespan, best.end);
    s.jobs[j] = best;
  }
  return s;
}

int fewest_devices(const std::vector<Option>& opts) {
  int pick = 0;
  for (size_t o = 1; o < opts.size(); ++o) {
    const Option& a = opts[o];
    const Option& b = opts[static_cast<size_t>(pick)];
    if (std::make_pair(a.devices * a.nodes, a.time_s) <
        std::make_pair(b.devices * b.nodes, b.time_s))
      pick = static_cast<int>(o);
  }
  return pick;
}

Schedule min_baseline(const Prepared& p) {
  std::vector<int> option(p.num_jobs());
  for (size_t j = 0; j < p.num_jobs(); ++j) option[j] = fewest_devices(p.options[j]);
  return list_schedule(p, option, lpt_order(p, option));
}

Schedule optimus_greedy(const Prepared& p, unsigned seed) {
  const Cluster& cluster = p.cluster();
  const size_t J = p.num_jobs();
  std::mt19937 rng(seed);
  std::vector<int> waiting(J);
  std::iota(waiting.begin(), waiting.end(), 0);
  std::shuffle(waiting.begin(), waiting.end(), rng);
  Schedule s;
  s.jobs.resize(J);
  std::vector<int> free(cluster.nodes.size());
  for (size_t n = 0; n < free.size(); ++n) free[n] = cluster.nodes[n].devices;
  struct Running {
    size_t job;
    double end;
  };
  std::vector<Running> running;
  double t = 0.0;
  while (!waiting.empty()) {
    std::vector<size_t> started;
    std::vector<int> still;
    for (int j : waiting) {
      const size_t ju = static_cast<size_t>(j);
      const int o = fewest_devices(p.options[ju]);
      const Option& x = p.options[ju][static_cast<size_t>(o)];
      std::vector<int> nodes;
      if (x.whole_nodes()) {
        std::vector<int> idle;
        for (int n : x.eligible)
          if (free[static_cast<size_t>(n)] == cluster.nodes[static_cast<size_t>(n)].devices)
            idle.push_back(n);
        if (idle.size() >= static_cast<size_t>(x.nodes))
          nodes.assign(idle.begin(), idle.begin() + x.nodes);
      } else {
        int pick = -1;
        for (int n : x.eligible)
          if (free[static_cast<size_t>(n)] >= x.devices &&
              (pick < 0 || free[static_cast<size_t>(n)] < free[static_cast<size_t>(pick)]))
            pick = n;
        if (pick >= 0) nodes = {pick};
      }
      if (nodes.empty()) {
        still.push_back(j);
        continue;
      }
      for (int n : nodes) free[static_cast<size_t>(n)] -= p.usage(x, n);
      s.jobs[ju].option = o;
      s.jobs[ju].nodes = nodes;
      s.jobs[ju].start = t;
      started.push_back(ju);
    }
    waiting = std::move(still);
    // Hand the remaining free devices out, one configuration step at a time.
    while (true) {
      double best_gain = 0.0;
      size_t best_job = 0;
      int best_option = -1;
      for (size_t ju : started) {
        Placement& pl = s.jobs[ju];
        const Option& cur = p.options[ju][static_cast<size_t>(pl.option)];
        if (cur.whole_nodes()) continue;
        const int n = pl.nodes[0];
        int step = -1;
        for (size_t o = 0; o < p.options[ju].size(); ++o) {
          const Option& x = p.options[ju][o];
          if (x.whole_nodes() || x.devices <= cur.devices || x.time_s >= cur.time_s ||
              x.devices - cur.devices > free[static_cast<size_t>(n)] || !eligible_on(x, n))
            continue;
          const Option* y = step >= 0 ? &p.options[ju][static_cast<size_t>(step)] : nullptr;
          if (!y || x.devices < y->devices || (x.devices == y->devices && x.time_s < y->time_s))
            step = static_cast<int>(o);
        }
        if (step < 0) continue;
        const Option& x = p.options[ju][static_cast<size_t>(step)];
        const double gain = (cur.time_s - x.time_s) / (x.devices - cur.devices);
        if (gain > best_gain) {
          best_gain = gain;
          best_job = ju;
          best_option = step;
        }
      }
      if (best_option < 0) break;
      Placement& pl = s.jobs[best_job];
      const int n = pl.nodes[0];
      free[static_cast<size_t>(n)] -=
          p.options[best_job][static_cast<size_t>(best_option)].devices -
          p.options[best_job][static_cast<size_t>(pl.option)].devices;
      pl.option = best_option;
    }
    for (size_t ju : started) {
      Placement& pl = s.jobs[ju];
      pl.end = t + p.options[ju][static_cast<size_t>(pl.option)].time_s;
      s.makespan = std::max(s.makespan, pl.end);
      running.push_back({ju, pl.end});
    }
    if (waiting.empty()) break;
    // Advance to the next completion and release what ended.
    double next = kInfinity;
    for (const Running& r : running) next = std::min(next, r.end);
    t = next;
    std::vector<Running> keep;
    for (const Running& r : running) {
      if (r.end <= t) {
        const Placement& pl = s.jobs[r.job];
        const Option& x = p.options[r.job][static_cast<size_t>(pl.option)];
        for (int n : pl.nodes) free[static_cast<size_t>(n)] += p.usage(x, n);
      } else {
        keep.push_back(r);
      }
    }
    running = std::move(keep);
  }
  return s;
}

Schedule random_baseline(const Prepared& p, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> option(p.num_jobs()), order(p.num_jobs());
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    std::uniform_int_distribution<int> pick(0, static_cast<int>(p.options[j].size()) - 1);
    option[j] = pick(rng);
  }
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  return list_schedule(p, option, order);
}

}  // namespace

Schedule baseline_schedule(const Prepared& p, Baseline which, unsigned seed,
                           const std::string& current_practice_strategy) {
  switch (which) {
    case Baseline::current_practice:
      return current_practice(p, current_practice_strategy);
    case Baseline::min:
      return min_baseline(p);
    case Baseline::optimus_greedy:
      return optimus_greedy(p, seed);
    case Baseline::random:
      return random_baseline(p, seed);
  }
  return min_baseline(p);
}

Plan baseline_plan(const Problem& problem, Baseline which, unsigned seed,
                   const std::string& current_practice_strategy) {
  const Prepared p = prepare(problem, /*pareto=*/false);
  Plan plan = to_plan(p, baseline_schedule(p, which, seed, current_practice_strategy));
  plan.solver.method = to_string(which);
  check_plan(problem, plan);
  return plan;
}

}  // namespace saturn::solver
