#include "solver/gantt.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace saturn::solver {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds)) return "inf";
  if (seconds < 60.0) return fmt::format("{:.1f}s", seconds);
  const long long s = std::llround(seconds);
  return fmt::format("{}:{:02}:{:02}", s / 3600, (s / 60) % 60, s % 60);
}

char job_symbol(size_t job) {
  static const char kSymbols[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  return kSymbols[job % (sizeof(kSymbols) - 1)];
}

namespace {

std::string ranks_text(const std::vector<int>& d) {
  // Contiguous runs as a-b.
  std::string out;
  for (size_t i = 0; i < d.size();) {
    size_t k = i;
    while (k + 1 < d.size() && d[k + 1] == d[k] + 1) ++k;
    if (!out.empty()) out.push_back(',');
    out += k > i ? fmt::format("{}-{}", d[i], d[k]) : fmt::format("{}", d[i]);
    i = k + 1;
  }
  return out;
}

}  // namespace

std::string plan_summary(const Problem& problem, const Plan& plan) {
  const SolverInfo& s = plan.solver;
  std::string out = fmt::format(
      "{} jobs on {} ({} devices): makespan {} ({:.0f} s), lower bound {} ({:.0f} s), gap "
      "{:.2f}%\n",
      problem.jobs.size(), format_cluster(problem.cluster), problem.cluster.total_devices(),
      format_duration(plan.makespan_s), plan.makespan_s, format_duration(plan.lower_bound_s),
      plan.lower_bound_s, 100.0 * s.gap);
  out += fmt::format("status {}, method {}, solver {}, solve time {:.2f} s", to_string(s.status),
                     s.method.empty() ? "-" : s.method, s.backend, s.solve_time_s);
  if (!s.milp_status.empty()) {
    out += fmt::format("; MILP {}", s.milp_status);
    if (s.slot_s > 0)
      out += fmt::format(" (slot {}{})", format_duration(s.slot_s), s.exact_slots ? ", exact" : "");
  }
  return out + "\n";
}

std::string plan_table(const Problem& problem, const Plan& plan) {
  std::vector<size_t> order(plan.jobs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return plan.jobs[a].start_s < plan.jobs[b].start_s; });
  size_t id_w = 2, st_w = 8;
  for (const Job& j : problem.jobs) id_w = std::max(id_w, j.id.size());
  for (size_t j = 0; j < plan.jobs.size(); ++j)
    if (plan.jobs[j].config >= 0)
      st_w = std::max(
          st_w, problem.jobs[j].configs[static_cast<size_t>(plan.jobs[j].config)].strategy.size());
  std::string out =
      fmt::format("{:<3} {:<{}} {:<{}} {:>4} {:<10} {:<12} {:>10} {:>10} {:>10}\n", "sym", "id",
                  id_w, "strategy", st_w, "devs", "nodes", "ranks", "start", "end", "duration");
  for (size_t j : order) {
    const ScheduledJob& sj = plan.jobs[j];
    const Config& c = problem.jobs[j].configs[static_cast<size_t>(sj.config)];
    std::string nodes;
    for (int n : sj.nodes) {
      if (!nodes.empty()) nodes.push_back(',');
      nodes += problem.cluster.nodes[static_cast<size_t>(n)].name;
    }
    out += fmt::format("{:<3} {:<{}} {:<{}} {:>4} {:<10} {:<12} {:>10} {:>10} {:>10}\n",
                       job_symbol(j), problem.jobs[j].id, id_w, c.strategy, st_w, c.devices, nodes,
                       ranks_text(sj.devices), format_duration(sj.start_s),
                       format_duration(sj.end_s), format_duration(sj.end_s - sj.start_s));
  }
  return out;
}

std::string gantt_chart(const Problem& problem, const Plan& plan, int width) {
  const Cluster& cluster = problem.cluster;
  width = std::max(width, 10);
  const double span = plan.makespan_s > 0 ? plan.makespan_s : 1.0;
  const size_t W = static_cast<size_t>(width);
  std::vector<std::string> rows(static_cast<size_t>(cluster.total_devices()), std::string(W, '.'));
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const ScheduledJob& sj = plan.jobs[j];
    if (sj.config < 0) continue;
    const bool whole = problem.jobs[j].configs[static_cast<size_t>(sj.config)].nodes > 1;
    std::vector<int> held = sj.devices;
    if (whole)
      for (int n : sj.nodes)
        for (int d = cluster.first_device(n);
             d < cluster.first_device(n) + cluster.nodes[static_cast<size_t>(n)].devices; ++d)
          held.push_back(d);
    for (int d : held) {
      if (d < 0 || static_cast<size_t>(d) >= rows.size()) continue;
      const bool used = std::find(sj.devices.begin(), sj.devices.end(), d) != sj.devices.end();
      for (size_t c = 0; c < W; ++c) {
        const double mid = (static_cast<double>(c) + 0.5) * span / static_cast<double>(W);
        if (mid >= sj.start_s && mid < sj.end_s)
          rows[static_cast<size_t>(d)][c] = used ? job_symbol(j) : '-';
      }
    }
  }
  size_t label_w = 0;
  for (const Node& n : cluster.nodes)
    label_w = std::max(label_w, n.name.size() + 1 + std::to_string(n.devices).size());
  std::string out;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const int first = cluster.first_device(static_cast<int>(n));
    for (int k = 0; k < cluster.nodes[n].devices; ++k)
      out += fmt::format("{:>{}} |{}|\n", fmt::format("{}:{}", cluster.nodes[n].name, k), label_w,
                         rows[static_cast<size_t>(first + k)]);
  }
  // Axis: ticks at 0, 1/4, 1/2, 3/4 and the end.
  std::string axis(W + 2, ' ');
  std::string labels(W + 12, ' ');
  for (int q = 0; q <= 4; ++q) {
    const size_t pos = q == 4 ? W + 1 : static_cast<size_t>(q) * W / 4;
    axis[pos] = '^';
    const std::string t = format_duration(span * q / 4.0);
    const size_t at = q == 4 ? pos + 1 - std::min(pos + 1, t.size()) : pos;
    for (size_t i = 0; i < t.size() && at + i < labels.size(); ++i) labels[at + i] = t[i];
  }
  while (!labels.empty() && labels.back() == ' ') labels.pop_back();
  out += fmt::format("{:>{}} {}\n{:>{}} {}\n", "", label_w, axis, "", label_w, labels);
  return out;
}

}  // namespace saturn::solver
