// Planning for model selection (successive halving, ASHA): a sweep stops most of its jobs at
// rungs, so a plan made for every job's full steps over-reserves devices for jobs that will
// stop. These functions give the rung boundaries of a rule and each job's EXPECTED work under
// it, so that the solver can plan for stopping (docs/solver.md, "Planning for selection").
//
// Model: rung k (k = 0 .. max_rungs-1) is at min_steps * eta^k steps (capped at the job's
// steps). At each rung the best 1/eta of the jobs that reach it continue; the last rung's
// survivors run to their full steps. A job reaches rung k with probability eta^-k, so the
// segment of steps after rung k-1 runs with probability eta^-k and the segment after the last
// rung with eta^-max_rungs. Expected steps = sum of segment lengths x their probabilities.
// Pure C++ like the rest of solver/: no MPI, no HDF5.
#pragma once

#include <vector>

#include "solver/problem.hpp"

namespace saturn::solver {

enum class SelectionMethod { successive_halving, asha };
const char* to_string(SelectionMethod method);

struct SelectionRule {
  SelectionMethod method = SelectionMethod::successive_halving;
  long long min_steps = 0;        // r0: steps at rung 0
  double reduction_factor = 3.0;  // eta > 1
  int max_rungs = 3;              // R >= 1
};

// Throws SolverError naming the field on min_steps < 1, eta <= 1 (or not finite), or
// max_rungs < 1 (or so many rungs that r0 * eta^k overflows kMaxTimeS-like ranges).
void check_rule(const SelectionRule& rule);

// Step counts of the rungs for a job of `job_steps` steps: max_rungs entries, ascending,
// min(round(r0 * eta^k), job_steps). A rung capped at job_steps is the job's end (it reports
// its final metric there). Throws SolverError when job_steps < 1.
std::vector<long long> rung_steps(const SelectionRule& rule, long long job_steps);

// How many of `reaching` jobs continue past a rung: max(1, floor(reaching / eta)).
int rung_keep(const SelectionRule& rule, int reaching);

// Steps a job of `job_steps` steps is expected to run from `done_steps` on, given that it is
// still alive and has been promoted past its first `rungs_passed` rungs (0 for a job that has
// not reached rung 0, or is waiting there for the decision). Fresh job: done 0, passed 0.
double expected_remaining_steps(const SelectionRule& rule, long long job_steps,
                                long long done_steps = 0, int rungs_passed = 0);

// expected_remaining_steps / (job_steps - done_steps): the factor that scales a job's
// remaining time to its expected remaining time, in (0, 1]. A re-planner multiplies it into
// JobState::time_scale (or config_scale) before remaining_problem(). 1 when nothing is left.
double expected_work_fraction(const SelectionRule& rule, long long job_steps,
                              long long done_steps = 0, int rungs_passed = 0);

// The problem with every configuration's time_s scaled to the job's expected work from the
// start (time_s covers Job::steps). Job::steps is kept. Throws SolverError for a job with
// steps unknown (0), naming it, and on a bad rule.
Problem expected_work_problem(const Problem& problem, const SelectionRule& rule);

}  // namespace saturn::solver
