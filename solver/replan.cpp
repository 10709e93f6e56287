#include "solver/replan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "solver/validate.hpp"

namespace saturn::solver {

Problem remaining_problem(const Problem& original, const std::vector<JobState>& states,
                          const ReplanOptions& options, RemainingMap* map) {
  if (states.size() != original.jobs.size())
    throw SolverError(
        fmt::format("re-planning: {} job states for {} jobs", states.size(), original.jobs.size()));
  Problem out;
  out.cluster = original.cluster;
  RemainingMap m;
  for (size_t j = 0; j < original.jobs.size(); ++j) {
    const JobState& st = states[j];
    if (st.phase == JobState::Phase::done) continue;
    const Job& job = original.jobs[j];
    const double left = std::clamp(1.0 - st.progress, 1e-9, 1.0);
    auto scale = [&](size_t c) {
      return st.config_scale.size() == job.configs.size() ? st.config_scale[c] : st.time_scale;
    };
    Job rj;
    rj.id = job.id;
    rj.steps =
        job.steps > 0 ? std::max(1LL, std::llround(static_cast<double>(job.steps) * left)) : 0;
    std::vector<int> config_map;
    std::vector<char> restart;
    const bool running = st.phase == JobState::Phase::running;
    if (running) {
      if (st.config < 0 || st.config >= static_cast<int>(job.configs.size()))
        throw SolverError(
            fmt::format("re-planning: job '{}' runs configuration {}, which it does not have",
                        job.id, st.config));
      Config keep = job.configs[static_cast<size_t>(st.config)];
      keep.time_s = keep.time_s * scale(static_cast<size_t>(st.config)) * left;
      keep.pinned_devices = st.devices;
      std::sort(keep.pinned_devices.begin(), keep.pinned_devices.end());
      rj.configs.push_back(std::move(keep));
      config_map.push_back(st.config);
      restart.push_back(0);
    }
    if (!running || options.allow_restarts) {
      for (size_t c = 0; c < job.configs.size(); ++c) {
        Config cfg = job.configs[c];
        cfg.pinned_devices.clear();
        cfg.time_s = cfg.time_s * scale(c) * left + (running ? options.restart_cost_s : 0.0);
        rj.configs.push_back(std::move(cfg));
        config_map.push_back(static_cast<int>(c));
        restart.push_back(running ? 1 : 0);
      }
    }
    out.jobs.push_back(std::move(rj));
    m.job.push_back(static_cast<int>(j));
    m.config.push_back(std::move(config_map));
    m.restart.push_back(std::move(restart));
  }
  if (map) *map = std::move(m);
  return out;
}

ReplanResult replan(const Problem& original, const Plan& current_plan,
                    const std::vector<JobState>& states, double now, const ReplanOptions& options) {
  ReplanResult r;
  r.remaining = remaining_problem(original, states, options, &r.map);
  if (r.remaining.jobs.empty()) {
    r.reason = "nothing left to plan";
    return r;
  }
  const Problem& rem = r.remaining;
  // Project the current plan: running jobs continue, waiting ones keep configuration, nodes
  // and order.
  const Prepared all = prepare(rem, /*pareto=*/false);
  const size_t J = rem.jobs.size();
  std::vector<int> option(J, -1);
  std::vector<std::vector<int>> nodes(J);
  std::vector<double> planned_start(J, 0.0);
  for (size_t i = 0; i < J; ++i) {
    const size_t j = static_cast<size_t>(r.map.job[i]);
    const JobState& st = states[j];
    int want = 0;  // a running job's pinned configuration comes first
    if (st.phase != JobState::Phase::running) {
      if (current_plan.jobs.size() != original.jobs.size() || current_plan.jobs[j].config < 0)
        throw SolverError(fmt::format("re-planning: the current plan has no place for job '{}'",
                                      original.jobs[j].id));
      want = current_plan.jobs[j].config;  // waiting jobs keep the original config indices
      nodes[i] = current_plan.jobs[j].nodes;
      planned_start[i] = current_plan.jobs[j].start_s;
    }
    const auto& opts = all.options[i];
    for (size_t o = 0; o < opts.size(); ++o)
      if (opts[o].config == want) option[i] = static_cast<int>(o);
    if (option[i] < 0)
      throw SolverError(
          fmt::format("re-planning: job '{}' has lost its planned configuration", rem.jobs[i].id));
  }
  std::vector<int> order(J);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return planned_start[static_cast<size_t>(a)] < planned_start[static_cast<size_t>(b)];
  });
  const Schedule projected = list_schedule(all, option, order, 0.0, &nodes);
  r.current = to_plan(all, projected);
  r.current.created_s = now;
  r.current.solver.method = "current plan";

  r.candidate = solve(rem, options.solve);
  r.candidate.created_s = now;
  r.current.lower_bound_s = std::min(r.candidate.lower_bound_s, r.current.makespan_s);
  const double gain = r.current.makespan_s - r.candidate.makespan_s;
  const double needed = std::max(options.threshold * r.current.makespan_s, options.threshold_s);
  r.adopted = gain > needed;
  const double base = std::max(1e-9, r.current.makespan_s);
  r.reason = fmt::format(
      "new plan ends {:.0f} s from now, the current one {:.0f} s: {} ({:.1f}% "
      "sooner, threshold {:.1f}%)",
      r.candidate.makespan_s, r.current.makespan_s, r.adopted ? "adopted" : "kept the current plan",
      100.0 * gain / base, 100.0 * needed / base);
  return r;
}

}  // namespace saturn::solver
