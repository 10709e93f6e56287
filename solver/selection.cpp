#include "solver/selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace saturn::solver {

const char* to_string(SelectionMethod method) {
  switch (method) {
    case SelectionMethod::successive_halving:
      return "successive-halving";
    case SelectionMethod::asha:
      return "asha";
  }
  return "?";
}

void check_rule(const SelectionRule& rule) {
  if (rule.min_steps < 1)
    throw SolverError(
        fmt::format("selection: min_steps must be at least 1, got {}", rule.min_steps));
  if (!std::isfinite(rule.reduction_factor) || rule.reduction_factor <= 1.0)
    throw SolverError(fmt::format("selection: reduction_factor must be a number above 1, got {}",
                                  rule.reduction_factor));
  if (rule.max_rungs < 1)
    throw SolverError(
        fmt::format("selection: max_rungs must be at least 1, got {}", rule.max_rungs));
  // The last rung's step count must stay an exact integer in a long long.
  const double last =
      static_cast<double>(rule.min_steps) * std::pow(rule.reduction_factor, rule.max_rungs - 1);
  if (!(last < 1e15))
    throw SolverError(fmt::format(
        "selection: the last rung lies at {:.3g} steps (min_steps {} x reduction_factor {} ^ {}); "
        "use fewer rungs",
        last, rule.min_steps, rule.reduction_factor, rule.max_rungs - 1));
}

std::vector<long long> rung_steps(const SelectionRule& rule, long long job_steps) {
  check_rule(rule);
  if (job_steps < 1)
    throw SolverError(fmt::format("selection: a job needs a known step count (got {})", job_steps));
  std::vector<long long> out;
  for (int k = 0; k < rule.max_rungs; ++k) {
    const double at = static_cast<double>(rule.min_steps) * std::pow(rule.reduction_factor, k);
    out.push_back(std::min(job_steps, std::llround(at)));
  }
  return out;
}

int rung_keep(const SelectionRule& rule, int reaching) {
  check_rule(rule);
  const double keep = std::floor(static_cast<double>(reaching) / rule.reduction_factor);
  return std::max(1, static_cast<int>(keep));
}

double expected_remaining_steps(const SelectionRule& rule, long long job_steps,
                                long long done_steps, int rungs_passed) {
  const std::vector<long long> rungs = rung_steps(rule, job_steps);
  if (done_steps < 0 || done_steps > job_steps)
    throw SolverError(
        fmt::format("selection: {} steps done of a job of {} steps", done_steps, job_steps));
  if (rungs_passed < 0 || rungs_passed > rule.max_rungs)
    throw SolverError(
        fmt::format("selection: {} rungs passed of {}", rungs_passed, rule.max_rungs));
  // Segment k ends at rung k (the last segment at job_steps) and runs only for a job promoted
  // past rungs 0..k-1: probability eta^-(k - rungs_passed) once k > rungs_passed.
  double expected = 0.0;
  long long begin = 0;
  for (int k = 0; k <= rule.max_rungs; ++k) {
    const long long end = k < rule.max_rungs ? rungs[static_cast<size_t>(k)] : job_steps;
    const long long from = std::max(begin, done_steps);
    if (end > from) {
      const double p = std::pow(rule.reduction_factor, -std::max(0, k - rungs_passed));
      expected += p * static_cast<double>(end - from);
    }
    begin = std::max(begin, end);
  }
  return expected;
}

double expected_work_fraction(const SelectionRule& rule, long long job_steps, long long done_steps,
                              int rungs_passed) {
  const double expected = expected_remaining_steps(rule, job_steps, done_steps, rungs_passed);
  const long long left = job_steps - done_steps;
  return left > 0 ? expected / static_cast<double>(left) : 1.0;
}

Problem expected_work_problem(const Problem& problem, const SelectionRule& rule) {
  check_rule(rule);
  Problem out = problem;
  for (Job& job : out.jobs) {
    if (job.steps < 1)
      throw SolverError(fmt::format(
          "selection: job '{}' states no step count, so its expected work under {} is unknown",
          job.id, to_string(rule.method)));
    const double f = expected_work_fraction(rule, job.steps);
    for (Config& c : job.configs) c.time_s *= f;
  }
  return out;
}

}  // namespace saturn::solver
