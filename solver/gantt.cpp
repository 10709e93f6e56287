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
  // Contiguous runs as a-b; after 8 runs only their count (a job on 10^5 scattered devices
  // would print a line of 10^5 runs).
  std::string out;
  size_t runs = 0;
  for (size_t i = 0; i < d.size(); ++runs) {
    size_t k = i;
    while (k + 1 < d.size() && d[k + 1] == d[k] + 1) ++k;
    if (runs < 8) {
      if (!out.empty()) out.push_back(',');
      out += k > i ? fmt::format("{}-{}", d[i], d[k]) : fmt::format("{}", d[i]);
    }
    i = k + 1;
  }
  if (runs > 8) out += fmt::format(",... ({} runs)", runs);
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
  if (s.clock == "work")
    out += s.wall_capped ? " of work, cut short by the wall-clock cap (not reproducible)"
                         : " of work (reproducible)";
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
  // Rows: one per device on nodes of up to kRowsPerNode devices; a larger node is drawn as
  // kRowsPerNode rows of consecutive devices, so the chart's size and the work to draw it do
  // not grow with the devices per node (a node of 10^6 devices took minutes, one row each).
  struct NodeRows {
    int first_row = 0, rows = 0, devices = 0;
    int row_of(int local) const {
      return rows == devices ? local
                             : static_cast<int>(static_cast<long long>(local) * rows / devices);
    }
  };
  std::vector<NodeRows> layout(cluster.nodes.size());
  int total_rows = 0;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const int G = cluster.nodes[n].devices;
    layout[n] = {total_rows, std::min(G, kGanttRowsPerNode), G};
    total_rows += layout[n].rows;
  }
  std::vector<int> first_device(cluster.nodes.size(), 0);
  for (size_t n = 1; n < cluster.nodes.size(); ++n)
    first_device[n] = first_device[n - 1] + cluster.nodes[n - 1].devices;
  std::vector<std::string> rows(static_cast<size_t>(total_rows), std::string(W, '.'));
  std::vector<char> grouped(rows.size(), 0);
  for (const NodeRows& nr : layout)
    for (int r = 0; r < nr.rows; ++r)
      grouped[static_cast<size_t>(nr.first_row + r)] = nr.rows < nr.devices;
  // A cell of a grouped row shows '*' when several jobs hold devices of it at that time.
  auto mark = [&](size_t row, size_t c, char symbol, bool in_group) {
    char& cell = rows[row][c];
    if (cell == '.' || cell == symbol || !in_group)
      cell = symbol;
    else if (cell == '-' && symbol != '-')
      cell = symbol;
    else if (symbol != '-')
      cell = '*';
  };
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const ScheduledJob& sj = plan.jobs[j];
    if (sj.config < 0) continue;
    const bool whole = problem.jobs[j].configs[static_cast<size_t>(sj.config)].nodes > 1;
    size_t c0 = W, c1 = 0;  // columns whose middle lies in [start, end)
    for (size_t c = 0; c < W; ++c) {
      const double mid = (static_cast<double>(c) + 0.5) * span / static_cast<double>(W);
      if (mid >= sj.start_s && mid < sj.end_s) {
        c0 = std::min(c0, c);
        c1 = c + 1;
      }
    }
    if (c0 >= c1) continue;
    // Rows it uses (a symbol), and rows it holds unused (whole nodes: '-'); devices are sorted,
    // so each row is met in one run.
    std::vector<std::pair<size_t, char>> cells;
    for (const int d : sj.devices) {
      if (d < 0 || d >= first_device.back() + cluster.nodes.back().devices) continue;
      const size_t n = static_cast<size_t>(
          std::upper_bound(first_device.begin(), first_device.end(), d) - first_device.begin() - 1);
      const size_t row =
          static_cast<size_t>(layout[n].first_row + layout[n].row_of(d - first_device[n]));
      if (cells.empty() || cells.back().first != row) cells.emplace_back(row, job_symbol(j));
    }
    const size_t used_rows = cells.size();
    if (whole)
      for (int n : sj.nodes) {
        if (n < 0 || static_cast<size_t>(n) >= layout.size()) continue;
        const NodeRows& nr = layout[static_cast<size_t>(n)];
        for (int r = 0; r < nr.rows; ++r) {
          const size_t row = static_cast<size_t>(nr.first_row + r);
          const auto end = cells.begin() + static_cast<std::ptrdiff_t>(used_rows);
          if (!std::binary_search(cells.begin(), end, std::pair{row, char{0}},
                                  [](const auto& x, const auto& y) { return x.first < y.first; }))
            cells.emplace_back(row, '-');
        }
      }
    for (const auto& [row, symbol] : cells)
      for (size_t c = c0; c < c1; ++c) mark(row, c, symbol, grouped[row] != 0);
  }
  std::vector<std::string> labels(rows.size());
  size_t label_w = 0;
  for (size_t n = 0; n < cluster.nodes.size(); ++n) {
    const NodeRows& nr = layout[n];
    for (int r = 0; r < nr.rows; ++r) {
      std::string& label = labels[static_cast<size_t>(nr.first_row + r)];
      if (nr.rows == nr.devices) {
        label = fmt::format("{}:{}", cluster.nodes[n].name, r);
      } else {
        const long long a = static_cast<long long>(r) * nr.devices / nr.rows;
        const long long b = static_cast<long long>(r + 1) * nr.devices / nr.rows - 1;
        label = fmt::format("{}:{}-{}", cluster.nodes[n].name, a, b);
      }
      label_w = std::max(label_w, label.size());
    }
  }
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r)
    out += fmt::format("{:>{}} |{}|\n", labels[r], label_w, rows[r]);
  // Axis: ticks at 0, 1/4, 1/2, 3/4 and the end.
  std::string axis(W + 2, ' ');
  std::string ticks(W + 12, ' ');
  for (int q = 0; q <= 4; ++q) {
    const size_t pos = q == 4 ? W + 1 : static_cast<size_t>(q) * W / 4;
    axis[pos] = '^';
    const std::string t = format_duration(span * q / 4.0);
    const size_t at = q == 4 ? pos + 1 - std::min(pos + 1, t.size()) : pos;
    for (size_t i = 0; i < t.size() && at + i < ticks.size(); ++i) ticks[at + i] = t[i];
  }
  while (!ticks.empty() && ticks.back() == ' ') ticks.pop_back();
  out += fmt::format("{:>{}} {}\n{:>{}} {}\n", "", label_w, axis, "", label_w, ticks);
  return out;
}

}  // namespace saturn::solver
