// The configuration-LP bound (see bounds.hpp), by column generation with GLPK.
//
// For a trial makespan T, only options no longer than T may be used. Variables: x[t,p] =
// node-time nodes of type t spend running pattern p (a set of single-node options of jobs that
// fit the node together); y[k,o,t] = node-time of type-t nodes held by whole-node option o of
// class k. Rows: per node type, node-time <= nodes * T; per class, progress (time in an option
// / its duration) >= the number of jobs. LP value v(T) <= T holds for T = any plan's makespan,
// so the least T with v(T) <= T is a lower bound. Patterns are priced by a knapsack over the
// node's devices with at most m_k jobs of class k.
#include <glpk.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "solver/bounds.hpp"
#include "solver/clock.hpp"
#include "solver/schedule.hpp"

namespace saturn::solver {

namespace {

struct Item {  // a single-node option of a class
  int cls;
  int devices;
  double time;  // scaled
};

struct Pattern {
  int type;
  std::vector<int> items;  // indices into the item list, with repetition
};

class ConfigurationLp {
 public:
  ConfigurationLp(const Prepared& p, double scale) : p_(p), scale_(scale) {
    const Cluster& cluster = p.cluster();
    std::map<std::pair<int, double>, int> types;
    for (size_t n = 0; n < cluster.nodes.size(); ++n) {
      const auto key = std::make_pair(cluster.nodes[n].devices, cluster.nodes[n].memory_gib);
      auto [it, inserted] = types.emplace(key, static_cast<int>(type_nodes_.size()));
      if (inserted) {
        type_nodes_.push_back(0);
        type_devices_.push_back(cluster.nodes[n].devices);
      }
      ++type_nodes_[static_cast<size_t>(it->second)];
      node_type_.push_back(it->second);
    }
    class_jobs_.assign(static_cast<size_t>(p.num_classes), 0);
    class_rep_.assign(static_cast<size_t>(p.num_classes), -1);
    for (size_t j = 0; j < p.num_jobs(); ++j) {
      const int k = p.job_class[j];
      ++class_jobs_[static_cast<size_t>(k)];
      if (class_rep_[static_cast<size_t>(k)] < 0)
        class_rep_[static_cast<size_t>(k)] = static_cast<int>(j);
    }
  }

  // v(T), or NaN when out of time or the simplex fails.
  double value(double T, SolverClock::time_point deadline) {
    const int K = p_.num_classes;
    const size_t NT = type_nodes_.size();
    // Items usable at T, per node type.
    items_.clear();
    std::vector<std::vector<int>> type_items(NT);
    struct Whole {
      int cls;
      int type;
      double rate;  // progress per node-time
    };
    std::vector<Whole> wholes;
    for (int k = 0; k < K; ++k) {
      const size_t rep = static_cast<size_t>(class_rep_[static_cast<size_t>(k)]);
      for (const Option& o : p_.options[rep]) {
        const double t = o.time_s / scale_;
        if (t > T * (1 + 1e-12)) continue;
        std::set<int> types;
        for (int n : o.eligible) types.insert(node_type_[static_cast<size_t>(n)]);
        if (o.whole_nodes()) {
          for (int ty : types) wholes.push_back({k, ty, 1.0 / (o.nodes * t)});
        } else {
          for (int ty : types) {
            type_items[static_cast<size_t>(ty)].push_back(static_cast<int>(items_.size()));
            items_.push_back({k, o.devices, t});
          }
        }
      }
    }
    glp_prob* lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MIN);
    glp_add_rows(lp, static_cast<int>(NT) + K);
    for (size_t ty = 0; ty < NT; ++ty) glp_set_row_bnds(lp, static_cast<int>(ty) + 1, GLP_LO, 0, 0);
    for (int k = 0; k < K; ++k)
      glp_set_row_bnds(lp, static_cast<int>(NT) + k + 1, GLP_LO,
                       class_jobs_[static_cast<size_t>(k)], 0);
    // T column.
    {
      const int c = glp_add_cols(lp, 1);
      glp_set_col_bnds(lp, c, GLP_LO, 0, 0);
      glp_set_obj_coef(lp, c, 1);
      std::vector<int> ind(NT + 1);
      std::vector<double> val(NT + 1);
      for (size_t ty = 0; ty < NT; ++ty) {
        ind[ty + 1] = static_cast<int>(ty) + 1;
        val[ty + 1] = type_nodes_[ty];
      }
      glp_set_mat_col(lp, c, static_cast<int>(NT), ind.data(), val.data());
    }
    auto add_column = [&](int type, const std::vector<std::pair<int, double>>& progress) {
      const int c = glp_add_cols(lp, 1);
      glp_set_col_bnds(lp, c, GLP_LO, 0, 0);
      std::vector<int> ind{0, type + 1};
      std::vector<double> val{0, -1.0};
      for (const auto& [k, rate] : progress) {
        ind.push_back(static_cast<int>(NT) + k + 1);
        val.push_back(rate);
      }
      glp_set_mat_col(lp, c, static_cast<int>(ind.size()) - 1, ind.data(), val.data());
    };
    for (const Whole& w : wholes) add_column(w.type, {{w.cls, w.rate}});
    // Start with one-item patterns, so every class can progress where it fits.
    for (size_t ty = 0; ty < NT; ++ty)
      for (int i : type_items[ty])
        add_column(static_cast<int>(ty), {{items_[static_cast<size_t>(i)].cls,
                                           1.0 / items_[static_cast<size_t>(i)].time}});
    glp_smcp smcp;
    glp_init_smcp(&smcp);
    smcp.msg_lev = GLP_MSG_OFF;
    double result = std::nan("");
    for (int iter = 0; iter < 5000; ++iter) {
      if (SolverClock::now() > deadline) break;
      const int it0 = glp_get_it_cnt(lp);
      const int rc = glp_simplex(lp, &smcp);
      SolverClock::tick(SolverClock::kSimplexCallUnits +
                        SolverClock::kSimplexIterationUnits * (glp_get_it_cnt(lp) - it0));
      if (rc != 0 || glp_get_status(lp) != GLP_OPT) break;
      const double obj = glp_get_obj_val(lp);
      std::vector<double> mu(NT), pi(static_cast<size_t>(K));
      for (size_t ty = 0; ty < NT; ++ty) mu[ty] = glp_get_row_dual(lp, static_cast<int>(ty) + 1);
      for (int k = 0; k < K; ++k)
        pi[static_cast<size_t>(k)] =
            std::max(0.0, glp_get_row_dual(lp, static_cast<int>(NT) + k + 1));
      bool added = false, priced = true;
      for (size_t ty = 0; ty < NT; ++ty) {
        std::vector<std::pair<int, double>> progress;
        const double v = price(type_items[ty], type_devices_[ty], pi, progress);
        // Unpriced, the restricted LP's value is only an upper bound on v(T): no claim.
        if (std::isnan(v)) priced = false;
        if (v > mu[ty] * (1 + 1e-9) + 1e-12) {
          add_column(static_cast<int>(ty), progress);
          added = true;
        }
      }
      if (!priced) break;
      if (!added) {
        result = obj;
        break;
      }
    }
    glp_delete_prob(lp);
    return result;
  }

 private:
  // Best pattern for one node type: max sum of pi_k / t over the chosen items, devices <= G,
  // at most m_k items of class k. Returns its value and per-class progress; NaN for nodes too
  // big for the knapsack over devices (0, "no better pattern", would let the LP of one-job
  // patterns claim a bound above the optimum).
  double price(const std::vector<int>& type_items, int G, const std::vector<double>& pi,
               std::vector<std::pair<int, double>>& progress) const {
    if (G < 1 || G > 4096) return std::nan("");
    const size_t W = static_cast<size_t>(G);
    std::map<int, std::vector<int>> by_class;
    for (int i : type_items)
      if (pi[static_cast<size_t>(items_[static_cast<size_t>(i)].cls)] > 0)
        by_class[items_[static_cast<size_t>(i)].cls].push_back(i);
    // Per class: best value with weight exactly w (any count up to m_k), and its items.
    struct Choice {
      double value = -1;
      std::vector<int> items;
    };
    std::vector<Choice> total(W + 1);
    total[0].value = 0;
    for (const auto& [k, items] : by_class) {
      const int cap = std::min(class_jobs_[static_cast<size_t>(k)], G);
      // f[c][w]: c items of this class, weight w.
      std::vector<std::vector<Choice>> f(static_cast<size_t>(cap) + 1, std::vector<Choice>(W + 1));
      f[0][0].value = 0;
      for (int c = 1; c <= cap; ++c)
        for (size_t w = 0; w <= W; ++w)
          for (int i : items) {
            const Item& it = items_[static_cast<size_t>(i)];
            const size_t g = static_cast<size_t>(it.devices);
            if (g > w || f[static_cast<size_t>(c) - 1][w - g].value < 0) continue;
            const double v =
                f[static_cast<size_t>(c) - 1][w - g].value + pi[static_cast<size_t>(k)] / it.time;
            if (v > f[static_cast<size_t>(c)][w].value) {
              f[static_cast<size_t>(c)][w].value = v;
              f[static_cast<size_t>(c)][w].items = f[static_cast<size_t>(c) - 1][w - g].items;
              f[static_cast<size_t>(c)][w].items.push_back(i);
            }
          }
      std::vector<Choice> best(W + 1);
      for (int c = 0; c <= cap; ++c)
        for (size_t w = 0; w <= W; ++w)
          if (f[static_cast<size_t>(c)][w].value > best[w].value)
            best[w] = f[static_cast<size_t>(c)][w];
      std::vector<Choice> next(W + 1);
      for (size_t a = 0; a <= W; ++a) {
        if (total[a].value < 0) continue;
        for (size_t b = 0; a + b <= W; ++b) {
          if (best[b].value < 0) continue;
          const double v = total[a].value + best[b].value;
          if (v > next[a + b].value) {
            next[a + b].value = v;
            next[a + b].items = total[a].items;
            next[a + b].items.insert(next[a + b].items.end(), best[b].items.begin(),
                                     best[b].items.end());
          }
        }
      }
      total = std::move(next);
    }
    size_t arg = 0;
    for (size_t w = 0; w <= W; ++w)
      if (total[w].value > total[arg].value) arg = w;
    std::map<int, double> rate;
    for (int i : total[arg].items)
      rate[items_[static_cast<size_t>(i)].cls] += 1.0 / items_[static_cast<size_t>(i)].time;
    progress.assign(rate.begin(), rate.end());
    return total[arg].value;
  }

  const Prepared& p_;
  double scale_;
  std::vector<int> type_nodes_, type_devices_, node_type_;
  std::vector<int> class_jobs_, class_rep_;
  std::vector<Item> items_;
};

}  // namespace

double single_node_lp_time(const Prepared& node_problem, double T,
                           SolverClock::time_point deadline) {
  if (node_problem.cluster().nodes.size() != 1 || T <= 0) return std::nan("");
  glp_term_out(GLP_OFF);
  // Times scaled by T, so options longer than T are those above 1.
  ConfigurationLp lp(node_problem, T);
  return lp.value(1.0, deadline) * T;
}

double configuration_lp_bound(const Prepared& p, double from, double time_limit_s) {
  const auto deadline =
      SolverClock::now() + std::chrono::microseconds(static_cast<long long>(time_limit_s * 1e6));
  // Scale times to order one for the simplex.
  const double scale = from > 0 ? from : 1.0;
  std::vector<double> breaks;
  for (const auto& opts : p.options)
    for (const Option& o : opts) breaks.push_back(o.time_s / scale);
  std::sort(breaks.begin(), breaks.end());
  breaks.erase(std::unique(breaks.begin(), breaks.end()), breaks.end());
  glp_term_out(GLP_OFF);
  ConfigurationLp lp(p, scale);
  // v(T) is constant on [b_i, b_i+1) and non-increasing in i; the bound is max(b_i, v_i) for
  // the first i with v_i < b_i+1. Search i >= the first break at or above `from` (a valid
  // bound already), by bisection on i.
  size_t lo = static_cast<size_t>(std::lower_bound(breaks.begin(), breaks.end(), 1.0 - 1e-12) -
                                  breaks.begin());
  if (lo > 0) --lo;  // the interval containing `from`
  size_t hi = breaks.size() - 1;
  auto next_break = [&](size_t i) { return i + 1 < breaks.size() ? breaks[i + 1] : kInfinity; };
  std::map<size_t, double> cache;
  auto v = [&](size_t i) {
    const auto it = cache.find(i);
    if (it != cache.end()) return it->second;
    return cache[i] = lp.value(breaks[i], deadline);
  };
  // Any failure (time limit) gives no bound rather than a wrong one.
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    const double vm = v(mid);
    if (std::isnan(vm)) return 0.0;
    if (vm < next_break(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  const double vl = v(lo);
  if (std::isnan(vl)) return 0.0;
  return std::max({breaks[lo], vl, 1.0}) * scale;
}

}  // namespace saturn::solver
