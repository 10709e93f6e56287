#include "solver/simulator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>
#include <random>

namespace saturn::solver {

const char* to_string(SimOptions::Policy p) {
  switch (p) {
    case SimOptions::Policy::static_plan:
      return "static";
    case SimOptions::Policy::replan:
      return "replan";
    case SimOptions::Policy::oracle:
      return "oracle";
  }
  return "?";
}

namespace {

struct Truth {
  std::vector<int> cls;                     // per job
  std::vector<std::vector<double>> factor;  // per job, config: actual / estimate
};

Truth draw_truth(const Problem& est, const SimOptions& o) {
  const Prepared p = prepare(est, /*pareto=*/false);
  Truth t;
  t.cls = p.job_class;
  std::mt19937 rng(o.seed);
  std::uniform_real_distribution<double> job_err(-o.error, o.error),
      cfg_err(-o.config_error, o.config_error);
  size_t widest = 0;
  for (const Job& j : est.jobs) widest = std::max(widest, j.configs.size());
  std::vector<double> class_factor(static_cast<size_t>(p.num_classes));
  std::vector<std::vector<double>> config_factor(static_cast<size_t>(p.num_classes),
                                                 std::vector<double>(widest));
  for (size_t k = 0; k < class_factor.size(); ++k) {
    class_factor[k] = 1.0 + job_err(rng);
    for (double& f : config_factor[k]) f = 1.0 + cfg_err(rng);
  }
  t.factor.resize(est.jobs.size());
  for (size_t j = 0; j < est.jobs.size(); ++j) {
    const size_t k = static_cast<size_t>(t.cls[j]);
    for (size_t c = 0; c < est.jobs[j].configs.size(); ++c)
      t.factor[j].push_back(class_factor[k] * config_factor[k][c]);
  }
  return t;
}

Problem apply(const Problem& est, const Truth& t) {
  Problem out = est;
  for (size_t j = 0; j < out.jobs.size(); ++j)
    for (size_t c = 0; c < out.jobs[j].configs.size(); ++c)
      out.jobs[j].configs[c].time_s *= t.factor[j][c];
  return out;
}

struct Run {
  JobState::Phase phase = JobState::Phase::waiting;
  int config = -1;
  std::vector<int> devices, held;
  double progress = 0.0;
  double last = 0.0;    // progress is accounted up to here
  double resume = 0.0;  // restart penalty ends here
  double pending_penalty = 0.0;
  double end = 0.0;
};

}  // namespace

Problem actual_problem(const Problem& estimated, const SimOptions& options) {
  return apply(estimated, draw_truth(estimated, options));
}

SimResult simulate(const Problem& estimated, const SimOptions& o, const Plan* initial) {
  const Truth truth = draw_truth(estimated, o);
  const Problem actual = apply(estimated, truth);
  const Cluster& cluster = estimated.cluster;
  const size_t J = estimated.jobs.size();
  SimResult res;
  Plan plan = o.policy == SimOptions::Policy::oracle ? solve(actual, o.initial)
              : initial                              ? *initial
                                                     : solve(estimated, o.initial);
  if (initial && o.policy != SimOptions::Policy::oracle && plan.jobs.size() != J)
    throw SolverError(fmt::format("simulator: the initial plan places {} jobs, the instance has {}",
                                  plan.jobs.size(), J));
  res.planned_makespan_s = plan.makespan_s;
  res.solve_time_s += plan.solver.solve_time_s;
  const int max_replans = o.max_replans > 0 ? o.max_replans : 4 * static_cast<int>(J);

  std::vector<Run> run(J);
  std::vector<int> device_job(static_cast<size_t>(cluster.total_devices()), -1);
  std::vector<std::deque<int>> queue(device_job.size());
  auto held_of = [&](size_t j, int config, const std::vector<int>& devices) {
    std::vector<int> held = devices;
    if (estimated.jobs[j].configs[static_cast<size_t>(config)].nodes > 1) {
      held.clear();
      std::vector<int> nodes;
      for (int d : devices) nodes.push_back(cluster.node_of_device(d));
      std::sort(nodes.begin(), nodes.end());
      nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
      for (int n : nodes)
        for (int d = cluster.first_device(n);
             d < cluster.first_device(n) + cluster.nodes[static_cast<size_t>(n)].devices; ++d)
          held.push_back(d);
    }
    return held;
  };
  auto rebuild_queues = [&] {
    for (auto& q : queue) q.clear();
    std::vector<size_t> waiting;
    for (size_t j = 0; j < J; ++j)
      if (run[j].phase == JobState::Phase::waiting) waiting.push_back(j);
    std::stable_sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
      return plan.jobs[a].start_s < plan.jobs[b].start_s;
    });
    for (size_t j : waiting) {
      run[j].config = plan.jobs[j].config;
      run[j].devices = plan.jobs[j].devices;
      run[j].held = held_of(j, run[j].config, run[j].devices);
      for (int d : run[j].held) queue[static_cast<size_t>(d)].push_back(static_cast<int>(j));
    }
  };
  rebuild_queues();
  auto true_time = [&](size_t j) {
    return actual.jobs[j].configs[static_cast<size_t>(run[j].config)].time_s;
  };
  auto finish_time = [&](size_t j, double now) {
    return std::max(now, run[j].resume) + (1.0 - run[j].progress) * true_time(j);
  };
  double now = 0.0, last_replan = 0.0;
  auto do_replan = [&] {
    std::vector<JobState> states(J);
    // What has been observed: actual/estimate for configurations that ran, per class.
    std::map<int, std::map<int, double>> seen;
    for (size_t j = 0; j < J; ++j)
      if (run[j].phase != JobState::Phase::waiting || run[j].progress > 0)
        seen[truth.cls[j]][run[j].config] = truth.factor[j][static_cast<size_t>(run[j].config)];
    for (size_t j = 0; j < J; ++j) {
      JobState& s = states[j];
      s.phase = run[j].phase;
      s.progress = run[j].progress;
      if (s.phase == JobState::Phase::running) {
        s.config = run[j].config;
        s.devices = run[j].devices;
      }
      const auto it = seen.find(truth.cls[j]);
      if (o.learn && it != seen.end()) {
        double mean = 0;
        for (const auto& [c, f] : it->second) mean += f;
        mean /= static_cast<double>(it->second.size());
        s.config_scale.assign(estimated.jobs[j].configs.size(), mean);
        for (const auto& [c, f] : it->second) s.config_scale[static_cast<size_t>(c)] = f;
      }
    }
    ReplanResult r = replan(estimated, plan, states, now, o.replan);
    ++res.replans;
    res.solve_time_s += r.candidate.solver.solve_time_s;
    res.log.push_back(fmt::format("t={:.0f}s: {}", now, r.reason));
    last_replan = now;
    if (r.remaining.jobs.empty()) return;
    const Plan& chosen = r.chosen();
    for (size_t i = 0; i < r.remaining.jobs.size(); ++i) {
      const size_t j = static_cast<size_t>(r.map.job[i]);
      const ScheduledJob& sj = chosen.jobs[i];
      if (r.adopted) {
        const bool restart = r.map.restart[i][static_cast<size_t>(sj.config)] != 0;
        if (run[j].phase == JobState::Phase::running && restart) {
          for (int d : run[j].held) device_job[static_cast<size_t>(d)] = -1;
          run[j].phase = JobState::Phase::waiting;
          run[j].pending_penalty = o.replan.restart_cost_s;
          ++res.restarts;
        }
        plan.jobs[j].config = r.map.config[i][static_cast<size_t>(sj.config)];
        plan.jobs[j].nodes = sj.nodes;
        plan.jobs[j].devices = sj.devices;
      }
      // Either way, the expected times are now the chosen plan's.
      plan.jobs[j].start_s = now + sj.start_s;
      plan.jobs[j].end_s = now + sj.end_s;
    }
    if (r.adopted) {
      ++res.adopted;
      rebuild_queues();
    }
  };

  size_t done = 0;
  while (done < J) {
    // Start every job that is next on all its devices, and whose devices are free.
    for (bool started = true; started;) {
      started = false;
      for (size_t d = 0; d < queue.size(); ++d) {
        if (queue[d].empty() || device_job[d] >= 0) continue;
        const size_t j = static_cast<size_t>(queue[d].front());
        bool ready = true;
        for (int h : run[j].held)
          ready = ready && device_job[static_cast<size_t>(h)] < 0 &&
                  queue[static_cast<size_t>(h)].front() == static_cast<int>(j);
        if (!ready) continue;
        for (int h : run[j].held) {
          device_job[static_cast<size_t>(h)] = static_cast<int>(j);
          queue[static_cast<size_t>(h)].pop_front();
        }
        run[j].phase = JobState::Phase::running;
        run[j].last = now;
        run[j].resume = now + run[j].pending_penalty;
        run[j].pending_penalty = 0.0;
        started = true;
      }
    }
    double next = kInfinity;
    size_t running = 0;
    for (size_t j = 0; j < J; ++j)
      if (run[j].phase == JobState::Phase::running) {
        next = std::min(next, finish_time(j, now));
        ++running;
      }
    if (running == 0)
      throw SolverError("simulator: no job can start (the plan's device queues are stuck)");
    const bool periodic = o.policy == SimOptions::Policy::replan && o.interval_s > 0;
    const double tick = periodic ? last_replan + o.interval_s : kInfinity;
    const double t = std::min(next, tick);
    for (size_t j = 0; j < J; ++j) {
      if (run[j].phase != JobState::Phase::running) continue;
      const double from = std::max(run[j].last, run[j].resume);
      if (t > from) run[j].progress = std::min(1.0, run[j].progress + (t - from) / true_time(j));
      run[j].last = t;
    }
    now = t;
    bool off_plan = false;
    for (size_t j = 0; j < J; ++j) {
      if (run[j].phase != JobState::Phase::running) continue;
      if (finish_time(j, now) > now + 1e-9 * std::max(1.0, now)) continue;
      run[j].phase = JobState::Phase::done;
      run[j].progress = 1.0;
      run[j].end = now;
      ++done;
      for (int h : run[j].held) device_job[static_cast<size_t>(h)] = -1;
      const double planned = plan.jobs[j].end_s - plan.jobs[j].start_s;
      off_plan =
          off_plan || std::fabs(now - plan.jobs[j].end_s) > o.deviation * std::max(planned, 1e-9);
    }
    if (o.policy != SimOptions::Policy::replan || done == J || res.replans >= max_replans) continue;
    if (off_plan || (periodic && now >= tick - 1e-9)) do_replan();
  }
  for (const Run& r : run) res.makespan_s = std::max(res.makespan_s, r.end);
  return res;
}

}  // namespace saturn::solver
