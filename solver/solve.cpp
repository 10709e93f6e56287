#include "solver/solve.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "solver/validate.hpp"

namespace saturn::solver {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Plan solve(const Problem& problem, const SolveOptions& options, SolveReport* report) {
  const auto t0 = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  SolveReport local;
  SolveReport& rep = report ? *report : local;
  rep = SolveReport{};

  const Prepared prepared = prepare(problem);
  rep.bounds = compute_bounds(prepared);
  double lower = rep.bounds.best;

  HeuristicOptions ho;
  ho.seed = options.seed;
  ho.time_limit_s = std::max(0.0, options.time_limit_s * options.heuristic_share);
  HeuristicResult h = heuristic_schedule(prepared, lower, ho);
  rep.heuristic_makespan_s = h.schedule.makespan;
  rep.heuristic_method = h.method;
  rep.heuristic_time_s = elapsed();

  Schedule best = h.schedule;
  std::string method = h.method;
  bool milp_solution = false;
  const auto proven = [&](double makespan) { return makespan <= lower * (1 + 1e-9); };
  if (options.use_milp && !proven(best.makespan) && elapsed() < options.time_limit_s) {
    MilpOptions mo = options.milp;
    mo.backend = options.backend;
    mo.time_limit_s = options.time_limit_s - elapsed();
    rep.milp = solve_milp(prepared, best, lower, mo);
    rep.milp_ran =
        rep.milp.status.rfind("skipped", 0) != 0 && rep.milp.status.rfind("error", 0) != 0;
    if (rep.milp.has_solution) {
      milp_solution = true;
      if (rep.milp.schedule.makespan < best.makespan * (1 - 1e-12)) {
        best = rep.milp.schedule;
        method = "milp";
      }
    }
    // A bound proven for the discretised model is a bound for the instance only when every
    // duration is a whole number of slots.
    if (rep.milp.exact && rep.milp_ran)
      lower = std::max(lower, rep.milp.bound_slots * rep.milp.slot_s);
  }
  // Time the MILP did not use goes to more local search.
  const double left = options.time_limit_s - elapsed();
  if (!proven(best.makespan) && left > 0.05 && method != "milp") {
    HeuristicOptions more = ho;
    more.time_limit_s = left;
    more.seed = options.seed + 1;
    HeuristicResult start = h;
    start.schedule = best;
    HeuristicResult again = local_search(prepared, std::move(start), more);
    if (again.schedule.makespan < best.makespan * (1 - 1e-12)) {
      best = again.schedule;
      method = again.method;
    }
    rep.heuristic_evaluations = again.evaluations;
  } else {
    rep.heuristic_evaluations = h.evaluations;
  }

  Plan plan = to_plan(prepared, best);
  // Rounding can leave a bound a hair above an optimal makespan.
  plan.lower_bound_s = std::min(lower, plan.makespan_s);
  SolverInfo& info = plan.solver;
  info.backend = rep.milp_ran ? to_string(options.backend) : "none";
  info.method = method;
  info.gap = plan.makespan_s > 0 ? (plan.makespan_s - plan.lower_bound_s) / plan.makespan_s : 0.0;
  if (info.gap < 1e-9) info.gap = 0.0;
  if (info.gap == 0.0)
    info.status = SolveStatus::optimal;
  else if (milp_solution)
    info.status = SolveStatus::feasible;
  else
    info.status = SolveStatus::heuristic;
  if (options.use_milp) {
    info.milp_status =
        rep.milp.status.empty() ? "skipped: heuristic met the lower bound" : rep.milp.status;
    info.slot_s = rep.milp.slot_s;
    info.exact_slots = rep.milp.exact;
    info.milp_bound_s = rep.milp.bound_slots * rep.milp.slot_s;
  }
  info.solve_time_s = elapsed();
  check_plan(problem, plan);
  return plan;
}

Plan plan_jobs(const Cluster& cluster, const std::vector<Job>& jobs, const SolveOptions& options,
               SolveReport* report) {
  Problem problem{cluster, jobs};
  return solve(problem, options, report);
}

}  // namespace saturn::solver
