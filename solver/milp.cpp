#include "solver/milp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "solver/bounds.hpp"
#include "solver/clock.hpp"
#include "solver/heuristic.hpp"

namespace saturn::solver {

const char* to_string(Backend b) {
  return b == Backend::cbc ? "cbc" : "glpk";
}

Backend parse_backend(const std::string& name) {
  if (name == "glpk") return Backend::glpk;
  if (name == "cbc") {
    if (!backend_available(Backend::cbc))
      throw SolverError(
          "solver 'cbc' is not available in this build (it was compiled without "
          "coinor-libcbc-dev); use --solver glpk");
    return Backend::cbc;
  }
  throw SolverError(fmt::format("unknown solver '{}' (valid: glpk, cbc)", name));
}

bool backend_available(Backend b) {
#ifdef SATURN_HAVE_CBC
  (void)b;
  return true;
#else
  return b == Backend::glpk;
#endif
}

namespace {

using Clock = SolverClock;

// Greatest common divisor of all option times in milliseconds, or 0 when some time is not a
// whole number of milliseconds.
double gcd_of_times(const Prepared& p) {
  long long g = 0;
  for (const auto& opts : p.options)
    for (const Option& o : opts) {
      const double ms = o.time_s * 1000.0;
      const double r = std::round(ms);
      if (std::fabs(ms - r) > 1e-6 * std::max(1.0, ms) || r < 1 || r > 9e15) return 0.0;
      g = std::gcd(g, static_cast<long long>(r));
    }
  return static_cast<double>(g) / 1000.0;
}

bool all_multiples(const Prepared& p, double slot) {
  for (const auto& opts : p.options)
    for (const Option& o : opts) {
      const double q = o.time_s / slot;
      if (std::fabs(q - std::round(q)) > 1e-9 * std::max(1.0, q)) return false;
    }
  return true;
}

// The warm schedule replayed with slot durations: same options and start order, with its
// nodes kept or chosen afresh, whichever is shorter.
Schedule discretise(const Prepared& p, const Schedule& warm, double slot) {
  std::vector<int> option(warm.jobs.size());
  std::vector<std::vector<int>> nodes(warm.jobs.size());
  for (size_t j = 0; j < warm.jobs.size(); ++j) {
    option[j] = warm.jobs[j].option;
    nodes[j] = warm.jobs[j].nodes;
  }
  const std::vector<int> order = start_order(warm);
  Schedule a = list_schedule(p, option, order, slot, &nodes);
  Schedule b = list_schedule(p, option, order, slot);
  return b.makespan < a.makespan ? b : a;
}

// A lower bound for the discretised model: the combinatorial bounds on durations rounded up.
int discrete_lower_bound(const Prepared& p, double slot) {
  Problem rounded = *p.problem;
  for (Job& job : rounded.jobs)
    for (Config& c : job.configs)
      c.time_s = std::max(1.0, std::ceil(c.time_s / slot - 1e-9)) * slot;
  const Prepared q = prepare(rounded);
  return static_cast<int>(std::ceil(compute_bounds(q, 0.0).best / slot - 1e-9));
}

// The options an improver model keeps (see MilpOptions::option_slack), as a Prepared of its
// own; to_orig[j][o] is option o's index in `p`. Identical jobs keep identical options (the
// union of what the warm start gives the class), so classes stay valid.
Prepared restrict_options(const Prepared& p, const Schedule& warm, double slack,
                          std::vector<std::vector<int>>* to_orig) {
  Prepared q = p;
  to_orig->assign(p.num_jobs(), {});
  std::vector<std::vector<char>> used(static_cast<size_t>(p.num_classes));
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    auto& u = used[static_cast<size_t>(p.job_class[j])];
    u.resize(p.options[j].size(), 0);
    u[static_cast<size_t>(warm.jobs[j].option)] = 1;
  }
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    const auto& opts = p.options[j];
    double least = kInfinity, fastest = kInfinity;
    for (const Option& o : opts) {
      least = std::min(least, o.min_area);
      fastest = std::min(fastest, o.time_s);
    }
    const auto& u = used[static_cast<size_t>(p.job_class[j])];
    q.options[j].clear();
    for (size_t o = 0; o < opts.size(); ++o) {
      if (opts[o].min_area <= least * (1 + slack) || opts[o].time_s <= fastest || u[o] ||
          opts[o].pinned) {
        q.options[j].push_back(opts[o]);
        (*to_orig)[j].push_back(static_cast<int>(o));
      }
    }
  }
  return q;
}

// A schedule's option indices mapped through `map` (per job: index -> index).
Schedule remap_options(Schedule s, const std::vector<std::vector<int>>& map) {
  for (size_t j = 0; j < s.jobs.size(); ++j)
    s.jobs[j].option = map[j][static_cast<size_t>(s.jobs[j].option)];
  return s;
}

}  // namespace

double exact_slot(const Prepared& p, const Schedule& warm, int max_slots) {
  const double g = gcd_of_times(p);
  if (!(g > 0) || !warm.complete()) return 0.0;
  return discretise(p, warm, g).makespan <= max_slots ? g : 0.0;
}

MilpResult solve_milp(const Prepared& p, const Schedule& warm, double lower_bound_s,
                      const MilpOptions& opts) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  MilpResult r;
  if (!backend_available(opts.backend)) {
    r.status = fmt::format("error: backend {} not built", to_string(opts.backend));
    return r;
  }
  if (!warm.complete() || !std::isfinite(warm.makespan) || warm.makespan <= 0) {
    r.status = "skipped: no warm start";
    return r;
  }
  double slot = opts.slot_s;
  bool exact = false;
  Schedule dw;
  if (slot > 0) {
    exact = all_multiples(p, slot);
    dw = discretise(p, warm, slot);
  } else {
    const double g = exact_slot(p, warm, opts.max_slots);
    if (g > 0) {
      dw = discretise(p, warm, g);
      slot = g;
      exact = true;
    }
    if (!exact) {
      slot = warm.makespan / std::max(4, opts.target_slots);
      dw = discretise(p, warm, slot);
    }
  }
  // Not exact: the model only improves plans, and may leave out options (see option_slack).
  // `mp` is the model's view; `mwarm` the warm start in its option indices.
  Prepared restricted;
  std::vector<std::vector<int>> to_orig;
  const Prepared* mp = &p;
  Schedule mwarm = warm;
  if (!exact && opts.option_slack > 0) {
    restricted = restrict_options(p, warm, opts.option_slack, &to_orig);
    std::vector<std::vector<int>> from_orig(p.num_jobs());
    for (size_t j = 0; j < p.num_jobs(); ++j) {
      from_orig[j].assign(p.options[j].size(), -1);
      for (size_t o = 0; o < to_orig[j].size(); ++o)
        from_orig[j][static_cast<size_t>(to_orig[j][o])] = static_cast<int>(o);
    }
    mp = &restricted;
    mwarm = remap_options(warm, from_orig);
    dw = discretise(*mp, mwarm, slot);
  }
  const bool restricting = mp != &p;
  // Coarsen until the model is small enough, but not below a useful resolution: with fewer
  // slots than this the rounding, not the search, decides the result.
  constexpr int kMinSlots = 24;
  for (int round = 0; round < 20; ++round) {
    const long cols = TimeIndexedModel::estimate_columns(*mp, slot, static_cast<int>(dw.makespan));
    if (cols <= opts.max_columns) break;
    const double factor =
        std::max(1.1, std::sqrt(static_cast<double>(cols) / static_cast<double>(opts.max_columns)));
    if (dw.makespan / factor < kMinSlots) break;
    slot *= factor;
    exact = !restricting && all_multiples(p, slot);
    dw = discretise(*mp, mwarm, slot);
  }
  const int H = static_cast<int>(dw.makespan);
  const long cols = TimeIndexedModel::estimate_columns(*mp, slot, H);
  if (cols > opts.max_columns) {
    r.status = fmt::format("skipped: model too large ({} columns at {} slots; limit {})", cols, H,
                           opts.max_columns);
    return r;
  }
  r.slot_s = slot;
  r.exact = exact;
  r.horizon = H;
  const int L = std::min(H, std::max(static_cast<int>(std::ceil(lower_bound_s / slot - 1e-9)),
                                     discrete_lower_bound(p, slot)));
  r.bound_slots = L;
  r.objective_slots = H;
  if (L >= H) {
    // The warm start meets the bound: nothing to search.
    r.status = "optimal";
    r.has_solution = true;
    r.schedule = compact(p, warm);
    if (r.schedule.makespan > warm.makespan) r.schedule = warm;
    r.seconds = elapsed();
    return r;
  }
  const TimeIndexedModel model(*mp, slot, H, L);
  r.columns = model.model().num_cols();
  r.rows = model.model().num_rows();
  SlotSchedule start;
  start.jobs = dw.jobs;
  start.makespan = H;
  const std::vector<double> x0 = model.encode(start);
  const double violation = model.model().max_violation(x0);
  if (violation > 1e-6) {
    r.status = fmt::format("error: internal: warm start violates the model by {}", violation);
    return r;
  }
  MipParams params;
  params.time_limit_s = std::max(0.2, opts.time_limit_s - elapsed());
  params.verbose = opts.verbose;
  params.warm = &x0;
  const MipResult res = opts.backend == Backend::cbc ? solve_with_cbc(model.model(), params)
                                                     : solve_with_glpk(model.model(), params);
  r.bound_slots = std::max(static_cast<double>(L), res.bound);
  switch (res.status) {
    case MipResult::Status::optimal:
      r.status = "optimal";
      break;
    case MipResult::Status::feasible:
      r.status = "feasible";
      break;
    case MipResult::Status::no_solution:
      r.status = "no-solution: " + res.detail;
      break;
    case MipResult::Status::error:
      r.status = "error: " + res.detail;
      break;
  }
  if (res.status == MipResult::Status::optimal || res.status == MipResult::Status::feasible) {
    const SlotSchedule s = model.decode(res.x);
    r.objective_slots = s.makespan;
    Schedule in_seconds;
    in_seconds.jobs = s.jobs;
    for (Placement& pl : in_seconds.jobs) {
      pl.start *= slot;
      pl.end *= slot;
    }
    in_seconds.makespan = s.makespan * slot;
    if (restricting) in_seconds = remap_options(std::move(in_seconds), to_orig);
    r.schedule = compact(p, in_seconds);
    r.has_solution = r.schedule.complete() && std::isfinite(r.schedule.makespan);
    if (r.has_solution && r.schedule.makespan > in_seconds.makespan * (1 + 1e-9))
      r.status = "error: internal: compaction lengthened the MILP schedule";
  }
  r.seconds = elapsed();
  return r;
}

RelaxedBound relaxed_lower_bound(const Prepared& p, double slot, const MilpOptions& opts) {
  const auto t0 = Clock::now();
  RelaxedBound out;
  out.slot_s = slot;
  if (!(slot > 0)) {
    out.status = "skipped: no slot";
    return out;
  }
  Problem relaxed;
  relaxed.cluster = p.cluster();
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    bool instant = false;
    for (const Option& o : p.options[j]) instant = instant || o.time_s < slot;
    if (instant) continue;  // it could take no slot at all: leave it out
    Job job = p.problem->jobs[j];
    for (Config& c : job.configs)
      c.time_s = std::max(1.0, std::floor(c.time_s / slot + 1e-9)) * slot;
    relaxed.jobs.push_back(std::move(job));
  }
  if (relaxed.jobs.empty()) {
    out.status = "skipped: every job is shorter than a slot";
    return out;
  }
  const Prepared rp = prepare(relaxed);
  const Bounds b = compute_bounds(rp, 0.0);
  HeuristicOptions ho;
  ho.local_search = false;
  const HeuristicResult h = heuristic_schedule(rp, b.best, ho);
  MilpOptions mo = opts;
  mo.slot_s = slot;
  mo.time_limit_s =
      std::max(0.1, opts.time_limit_s - std::chrono::duration<double>(Clock::now() - t0).count());
  const MilpResult r = solve_milp(rp, h.schedule, b.best, mo);
  out.status = r.status;
  if (r.exact && r.status.rfind("skipped", 0) != 0 && r.status.rfind("error", 0) != 0)
    out.bound_s = std::max(b.best, r.bound_slots * slot);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

}  // namespace saturn::solver
