#include "solver/milp_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

namespace saturn::solver {

int LinearModel::add_col(double lb, double ub, double cost, bool is_integer) {
  col_lb.push_back(lb);
  col_ub.push_back(ub);
  obj.push_back(cost);
  integer.push_back(is_integer ? 1 : 0);
  return num_cols() - 1;
}

int LinearModel::add_row(double lb, double ub) {
  row_lb.push_back(lb);
  row_ub.push_back(ub);
  return num_rows() - 1;
}

void LinearModel::add(int row, int col, double value) {
  nz_row.push_back(row);
  nz_col.push_back(col);
  nz_val.push_back(value);
}

double LinearModel::max_violation(const std::vector<double>& x) const {
  double worst = 0.0;
  for (int c = 0; c < num_cols(); ++c) {
    const double v = x[static_cast<size_t>(c)];
    worst =
        std::max({worst, col_lb[static_cast<size_t>(c)] - v, v - col_ub[static_cast<size_t>(c)]});
    if (integer[static_cast<size_t>(c)]) worst = std::max(worst, std::fabs(v - std::round(v)));
  }
  std::vector<double> act(row_lb.size(), 0.0);
  for (size_t i = 0; i < nz_val.size(); ++i)
    act[static_cast<size_t>(nz_row[i])] += nz_val[i] * x[static_cast<size_t>(nz_col[i])];
  for (size_t r = 0; r < act.size(); ++r)
    worst = std::max({worst, row_lb[r] - act[r], act[r] - row_ub[r]});
  return worst;
}

int slots_of(const Option& o, double slot, Rounding rounding) {
  if (rounding == Rounding::up) return static_cast<int>(duration_of(o, slot));
  return static_cast<int>(std::floor(o.time_s / slot + 1e-9));
}

long TimeIndexedModel::estimate_columns(const Prepared& p, double slot, int horizon,
                                        Rounding rounding) {
  std::vector<char> seen(static_cast<size_t>(p.num_classes), 0);
  long cols = horizon;
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    const int k = p.job_class[j];
    if (seen[static_cast<size_t>(k)]) continue;
    seen[static_cast<size_t>(k)] = 1;
    cols += horizon;  // v
    for (const Option& o : p.options[j]) {
      const int d = slots_of(o, slot, rounding);
      if (d > horizon) continue;
      const long starts = o.pinned ? 1 : horizon - d + 1;
      cols += starts *
              (o.pinned ? 1 : static_cast<long>(o.eligible.size()) + (o.whole_nodes() ? 1 : 0));
    }
  }
  return cols;
}

TimeIndexedModel::TimeIndexedModel(const Prepared& p, double slot, int horizon, int lower,
                                   Rounding rounding)
    : prepared_(&p),
      slot_(slot),
      horizon_(horizon),
      lower_(std::clamp(lower, 0, horizon)),
      rounding_(rounding) {
  const Cluster& cluster = p.cluster();
  const int H = horizon_, L = lower_;
  const size_t N = cluster.nodes.size();
  LinearModel& m = model_;
  class_jobs_.assign(static_cast<size_t>(p.num_classes), {});
  for (size_t j = 0; j < p.num_jobs(); ++j)
    class_jobs_[static_cast<size_t>(p.job_class[j])].push_back(static_cast<int>(j));

  m.obj_offset = L;
  u_col_.assign(static_cast<size_t>(H), -1);
  for (int s = L; s < H; ++s) u_col_[static_cast<size_t>(s)] = m.add_col(0, 1, 1, true);
  for (int s = L; s + 1 < H; ++s) {
    const int r = m.add_row(0, LinearModel::kInf);
    m.add(r, u_col_[static_cast<size_t>(s)], 1);
    m.add(r, u_col_[static_cast<size_t>(s + 1)], -1);
  }
  // Capacity rows: node n, slot s.
  std::vector<std::vector<int>> cap(N, std::vector<int>(static_cast<size_t>(H)));
  for (size_t n = 0; n < N; ++n) {
    const double G = cluster.nodes[n].devices;
    for (int s = 0; s < H; ++s) {
      if (s < L) {
        cap[n][static_cast<size_t>(s)] = m.add_row(-LinearModel::kInf, G);
      } else {
        const int r = m.add_row(-LinearModel::kInf, 0);
        m.add(r, u_col_[static_cast<size_t>(s)], -G);
        cap[n][static_cast<size_t>(s)] = r;
      }
    }
  }
  // Node loads for symmetry breaking, per node: (col, device-slots).
  std::vector<std::vector<std::pair<int, double>>> load(N);
  std::vector<char> pinned_node(N, 0);
  v_col_.assign(class_jobs_.size(), {});
  for (size_t k = 0; k < class_jobs_.size(); ++k) {
    const size_t rep = static_cast<size_t>(class_jobs_[k][0]);
    const double count = static_cast<double>(class_jobs_[k].size());
    const bool single = class_jobs_[k].size() == 1;
    const int assign = m.add_row(count, count);
    // Per last slot s >= L: the columns whose jobs run through s and not beyond.
    std::vector<std::vector<int>> ending(static_cast<size_t>(H));
    for (size_t oi = 0; oi < p.options[rep].size(); ++oi) {
      const Option& o = p.options[rep][oi];
      const int d = slots_of(o, slot, rounding_);
      if (d > H || d < 1) continue;
      const int tmax = o.pinned ? 0 : H - d;
      auto occupy = [&](int col, int n, int t, double use) {
        for (int s = t; s < t + d; ++s)
          m.add(cap[static_cast<size_t>(n)][static_cast<size_t>(s)], col, use);
        load[static_cast<size_t>(n)].emplace_back(col, use * d);
      };
      if (o.pinned) {
        const int col = m.add_col(0, 1, 0, true);
        m.add(assign, col, 1);
        for (int n : o.eligible) {
          occupy(col, n, 0, p.usage(o, n));
          pinned_node[static_cast<size_t>(n)] = 1;
        }
        starts_.push_back({static_cast<int>(k), static_cast<int>(oi), 0, -2, col});
        whole_.emplace_back();
        if (d - 1 >= L) ending[static_cast<size_t>(d - 1)].push_back(col);
      } else if (!o.whole_nodes()) {
        for (int n : o.eligible) {
          for (int t = 0; t <= tmax; ++t) {
            const int col = m.add_col(0, count, 0, true);
            m.add(assign, col, 1);
            occupy(col, n, t, o.devices);
            starts_.push_back({static_cast<int>(k), static_cast<int>(oi), t, n, col});
            whole_.emplace_back();
            if (t + d - 1 >= L) ending[static_cast<size_t>(t + d - 1)].push_back(col);
          }
        }
      } else {
        for (int t = 0; t <= tmax; ++t) {
          const int y = m.add_col(0, count, 0, true);
          m.add(assign, y, 1);
          const int link = m.add_row(0, 0);
          m.add(link, y, -o.nodes);
          std::vector<std::pair<int, int>> ws;
          for (int n : o.eligible) {
            const int w = m.add_col(0, 1, 0, true);
            m.add(link, w, 1);
            occupy(w, n, t, cluster.nodes[static_cast<size_t>(n)].devices);
            ws.emplace_back(n, w);
          }
          starts_.push_back({static_cast<int>(k), static_cast<int>(oi), t, -1, y});
          whole_.push_back(std::move(ws));
          if (t + d - 1 >= L) ending[static_cast<size_t>(t + d - 1)].push_back(y);
        }
      }
    }
    // v[k][s] = v[k][s+1] + (jobs whose last slot is s); u[s] >= v[k][s] / count.
    v_col_[k].assign(static_cast<size_t>(H), -1);
    for (int s = H - 1; s >= L; --s) {
      const int v = m.add_col(0, count, 0, false);
      v_col_[k][static_cast<size_t>(s)] = v;
      const int r = m.add_row(0, 0);
      m.add(r, v, 1);
      if (s + 1 < H) m.add(r, v_col_[k][static_cast<size_t>(s + 1)], -1);
      for (int col : ending[static_cast<size_t>(s)]) m.add(r, col, -1);
      const int link = m.add_row(0, LinearModel::kInf);
      m.add(link, u_col_[static_cast<size_t>(s)], single ? 1.0 : count);
      m.add(link, v, -1);
    }
  }
  // Identical nodes (same devices and memory, nothing pinned on them) are interchangeable:
  // order them by load.
  std::map<std::pair<int, double>, std::vector<size_t>> groups;
  for (size_t n = 0; n < N; ++n)
    if (!pinned_node[n])
      groups[{cluster.nodes[n].devices, cluster.nodes[n].memory_gib}].push_back(n);
  for (const auto& [key, nodes] : groups) {
    if (nodes.size() > 1) node_groups_.emplace_back(nodes.begin(), nodes.end());
    for (size_t i = 0; i + 1 < nodes.size(); ++i) {
      const int r = m.add_row(0, LinearModel::kInf);
      for (const auto& [col, w] : load[nodes[i]]) m.add(r, col, w);
      for (const auto& [col, w] : load[nodes[i + 1]]) m.add(r, col, -w);
    }
  }
}

std::vector<double> TimeIndexedModel::encode(const SlotSchedule& input) const {
  const Prepared& p = *prepared_;
  const Cluster& cluster = p.cluster();
  SlotSchedule s = input;
  {
    std::vector<double> load(cluster.nodes.size(), 0.0);
    for (size_t j = 0; j < s.jobs.size(); ++j) {
      const Option& o = p.options[j][static_cast<size_t>(s.jobs[j].option)];
      for (int n : s.jobs[j].nodes)
        load[static_cast<size_t>(n)] += p.usage(o, n) * slots_of(o, slot_, rounding_);
    }
    std::vector<int> rename(cluster.nodes.size());
    for (size_t n = 0; n < rename.size(); ++n) rename[n] = static_cast<int>(n);
    for (const auto& group : node_groups_) {
      std::vector<int> by_load = group;
      std::stable_sort(by_load.begin(), by_load.end(), [&](int a, int b) {
        return load[static_cast<size_t>(a)] > load[static_cast<size_t>(b)];
      });
      for (size_t i = 0; i < group.size(); ++i) rename[static_cast<size_t>(by_load[i])] = group[i];
    }
    for (Placement& pl : s.jobs) {
      for (int& n : pl.nodes) n = rename[static_cast<size_t>(n)];
      std::sort(pl.nodes.begin(), pl.nodes.end());
    }
  }
  std::vector<double> x(static_cast<size_t>(model_.num_cols()), 0.0);
  std::map<std::tuple<int, int, int, int>, size_t> index;  // (class, option, node, t) -> start
  for (size_t i = 0; i < starts_.size(); ++i)
    index[{starts_[i].cls, starts_[i].option, starts_[i].node, starts_[i].t}] = i;
  int makespan = 0;
  std::vector<std::vector<int>> last(class_jobs_.size());
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    const Placement& pl = s.jobs[j];
    const int k = p.job_class[j];
    const Option& o = p.options[j][static_cast<size_t>(pl.option)];
    const int t = static_cast<int>(std::lround(pl.start));
    const int node = o.pinned ? -2 : o.whole_nodes() ? -1 : pl.nodes.at(0);
    const auto it = index.find({k, pl.option, node, t});
    if (it == index.end())
      throw SolverError(fmt::format("internal: warm start of job {} has no column (t={})", j, t));
    const Start& st = starts_[it->second];
    x[static_cast<size_t>(st.col)] += 1;
    if (node == -1)
      for (const auto& [n, w] : whole_[it->second])
        if (std::binary_search(pl.nodes.begin(), pl.nodes.end(), n)) x[static_cast<size_t>(w)] = 1;
    const int end = t + slots_of(o, slot_, rounding_);
    makespan = std::max(makespan, end);
    last[static_cast<size_t>(k)].push_back(end - 1);
  }
  for (int sl = lower_; sl < horizon_; ++sl)
    x[static_cast<size_t>(u_col_[static_cast<size_t>(sl)])] = sl < makespan ? 1 : 0;
  for (size_t k = 0; k < class_jobs_.size(); ++k)
    for (int sl = lower_; sl < horizon_; ++sl) {
      double running = 0;
      for (int e : last[k]) running += e >= sl ? 1 : 0;
      x[static_cast<size_t>(v_col_[k][static_cast<size_t>(sl)])] = running;
    }
  return x;
}

SlotSchedule TimeIndexedModel::decode(const std::vector<double>& x) const {
  const Prepared& p = *prepared_;
  SlotSchedule out;
  out.jobs.resize(p.num_jobs());
  std::vector<size_t> next(class_jobs_.size(), 0);
  for (size_t i = 0; i < starts_.size(); ++i) {
    const Start& st = starts_[i];
    long count = std::lround(x[static_cast<size_t>(st.col)]);
    std::vector<int> nodes;
    if (st.node == -1)
      for (const auto& [n, w] : whole_[i])
        if (x[static_cast<size_t>(w)] > 0.5) nodes.push_back(n);
    const auto& jobs = class_jobs_[static_cast<size_t>(st.cls)];
    if (st.node == -1 && count > 0) {
      const Option& o = p.options[static_cast<size_t>(jobs[0])][static_cast<size_t>(st.option)];
      if (nodes.size() != static_cast<size_t>(count * o.nodes))
        throw SolverError("internal: MILP solution's whole-node columns do not match its starts");
    }
    for (long c = 0; c < count; ++c) {
      if (next[static_cast<size_t>(st.cls)] >= jobs.size())
        throw SolverError("internal: MILP solution starts more jobs than a class has");
      const size_t j = static_cast<size_t>(jobs[next[static_cast<size_t>(st.cls)]++]);
      const Option& o = p.options[j][static_cast<size_t>(st.option)];
      Placement& pl = out.jobs[j];
      pl.option = st.option;
      if (st.node >= 0) {
        pl.nodes = {st.node};
      } else if (st.node == -2) {
        pl.nodes = o.eligible;
      } else {
        const size_t k = static_cast<size_t>(o.nodes);
        pl.nodes.assign(
            nodes.begin() + static_cast<std::ptrdiff_t>(c * static_cast<long>(k)),
            nodes.begin() + static_cast<std::ptrdiff_t>((c + 1) * static_cast<long>(k)));
      }
      pl.start = st.t;
      pl.end = st.t + slots_of(o, slot_, rounding_);
      out.makespan = std::max(out.makespan, static_cast<int>(pl.end));
    }
  }
  for (size_t k = 0; k < class_jobs_.size(); ++k)
    if (next[k] != class_jobs_[k].size())
      throw SolverError("internal: MILP solution leaves jobs unscheduled");
  return out;
}

}  // namespace saturn::solver
