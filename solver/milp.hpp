// The MILP improver: the time-indexed model (milp_model.hpp) solved by GLPK or CBC, warm
// started from a heuristic schedule, under a hard time limit; its solution is compacted in
// continuous time afterwards.
#pragma once

#include <string>
#include <vector>

#include "solver/milp_model.hpp"

namespace saturn::solver {

enum class Backend { glpk, cbc };
const char* to_string(Backend b);
Backend parse_backend(const std::string& name);  // "glpk" | "cbc"; throws SolverError
bool backend_available(Backend b);               // cbc only when built with CBC

// What a backend gets and returns; objective is minimised and integral in steps of 1.
struct MipParams {
  double time_limit_s = 10.0;
  bool verbose = false;
  const std::vector<double>* warm = nullptr;  // a feasible point, or null
};

struct MipResult {
  enum class Status { optimal, feasible, no_solution, error };
  Status status = Status::no_solution;
  std::vector<double> x;
  double objective = 0.0;  // with the model's offset
  double bound = 0.0;      // best proven bound, with the offset
  double seconds = 0.0;
  std::string detail;
};

MipResult solve_with_glpk(const LinearModel& model, const MipParams& params);  // milp_glpk.cpp
// Frees the calling thread's GLPK environment (GLPK keeps one per thread): a thread that solved
// calls it before it ends.
void release_glpk_thread();
MipResult solve_with_cbc(const LinearModel& model, const MipParams& params);  // milp_cbc.cpp

struct MilpOptions {
  Backend backend = Backend::glpk;
  double time_limit_s = 10.0;
  // Slot length in seconds; 0 picks one: the greatest common divisor of all durations when
  // that keeps the horizon within max_slots (then the model is exact), else the warm
  // schedule's makespan / target_slots.
  double slot_s = 0.0;
  int target_slots = 60;
  int max_slots = 400;
  long max_columns = 20000;  // larger models are skipped (the heuristic stands)
  // When the slots are not exact the MILP is an improver only (its bound is not used), so it
  // may leave out options: it keeps, per job, those within (1 + option_slack) of the job's
  // least work, its fastest, and those the warm start uses. Fewer columns buy finer slots.
  // 0 keeps every option.
  double option_slack = 0.3;
  bool verbose = false;
};

struct MilpResult {
  std::string status;  // optimal | feasible | no-solution | skipped: <why> | error: <why>
  bool has_solution = false;
  Schedule schedule;  // continuous time, compacted
  double slot_s = 0.0;
  bool exact = false;  // every duration is a whole number of slots
  int horizon = 0;     // slots
  double objective_slots = 0.0;
  double bound_slots = 0.0;  // proven bound of the discretised model
  int columns = 0, rows = 0;
  double seconds = 0.0;
};

// A lower bound from the MILP on a relaxation of the instance: every duration rounded *down*
// to whole slots of `slot` seconds, jobs that could finish within one slot dropped. Any plan of
// the instance, its starts rounded down to slots, is a plan of the relaxation no longer than
// the original (in slots), so the relaxation's proven bound times the slot bounds the instance
// whatever its durations. The slot model of the relaxation is exact. bound_s is 0 when the
// model is too large or the solver proved nothing beyond the combinatorial bounds.
struct RelaxedBound {
  double bound_s = 0.0;
  double slot_s = 0.0;
  std::string status;
  double seconds = 0.0;
};
RelaxedBound relaxed_lower_bound(const Prepared& prepared, double slot, const MilpOptions& options);

// The slot that makes the model exact (the greatest common divisor of all durations), when the
// warm schedule fits within max_slots of it; 0 otherwise.
double exact_slot(const Prepared& prepared, const Schedule& warm, int max_slots);

// warm: a continuous schedule (the heuristic's); it sets the horizon and the warm start.
// lower_bound_s: a valid lower bound, turned into the model's lower bound in slots.
MilpResult solve_milp(const Prepared& prepared, const Schedule& warm, double lower_bound_s,
                      const MilpOptions& options);

}  // namespace saturn::solver
