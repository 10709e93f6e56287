// The time-indexed SPASE model, built once and handed to a MILP backend (GLPK or CBC).
//
// Time is cut into slots of `slot` seconds; a configuration's duration is rounded up to whole
// slots. Variables (never one per device: capacity is aggregated per node):
//   x[k,o,n,t]  integer, how many jobs of class k start option o on node n at slot t
//               (classes group identical jobs; binary for a class of one)
//   y[k,o,t]    integer, how many class-k jobs start multi-node option o at slot t, and
//   w[k,o,n,t]  binary, node n is one of the whole nodes they take (sum_n w = nodes * y)
//   u[s]        binary, slot s is in use (s >= the lower bound L; slots below L always are),
//               monotone u[s] >= u[s+1]; the makespan is L + sum_s u[s], the objective
//   v[k,s]      continuous, class-k jobs still running at slot s (recurrence), u[s] >= v/m_k
// Rows: every job starts once; per node and slot, devices in use <= capacity * u[s]; the
// recurrences; identical nodes ordered by load (symmetry breaking).
// The makespan being a sum of binaries keeps it integral (the solver notes: GLPK proves
// integral makespans quickly and continuous ones not at all).
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "solver/schedule.hpp"

namespace saturn::solver {

// A MILP in a backend-neutral form: columns, rows with bounds, coefficient triplets.
struct LinearModel {
  static constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<double> col_lb, col_ub, obj;
  std::vector<char> integer;
  std::vector<double> row_lb, row_ub;
  std::vector<int> nz_row, nz_col;
  std::vector<double> nz_val;
  double obj_offset = 0.0;

  int add_col(double lb, double ub, double cost, bool is_integer);
  int add_row(double lb, double ub);
  void add(int row, int col, double value);
  int num_cols() const { return static_cast<int>(obj.size()); }
  int num_rows() const { return static_cast<int>(row_lb.size()); }
  // Largest bound or row violation of x (0 when feasible), for checking warm starts.
  double max_violation(const std::vector<double>& x) const;
};

// A schedule in slots: per job option, nodes and start slot.
struct SlotSchedule {
  std::vector<Placement> jobs;  // start/end in slots
  int makespan = 0;
};

// Durations in slots: rounded up, the model's schedules are feasible in continuous time;
// rounded down, the model is a relaxation and its bound (times the slot) bounds the instance.
enum class Rounding { up, down };

// A duration in slots; rounding down may give 0 (callers drop such jobs from a relaxation).
int slots_of(const Option& o, double slot, Rounding rounding);

class TimeIndexedModel {
 public:
  // horizon: slots available (a feasible schedule must exist within it); lower: makespan
  // lower bound in slots.
  TimeIndexedModel(const Prepared& prepared, double slot, int horizon, int lower,
                   Rounding rounding = Rounding::up);

  // Columns the model would have, computed without building it.
  static long estimate_columns(const Prepared& prepared, double slot, int horizon,
                               Rounding rounding = Rounding::up);

  const LinearModel& model() const { return model_; }
  double slot() const { return slot_; }
  int horizon() const { return horizon_; }
  int lower() const { return lower_; }

  // Column values of a schedule in slots (for the warm start). Identical nodes are relabelled
  // in order of decreasing load first, as the symmetry-breaking rows require.
  std::vector<double> encode(const SlotSchedule& s) const;
  // The schedule a solution describes, in slots.
  SlotSchedule decode(const std::vector<double>& x) const;

 private:
  struct Start {  // one x or y column
    int cls, option, t;
    int node;  // -1 for a multi-node y column
    int col;
  };
  const Prepared* prepared_;
  double slot_;
  int horizon_, lower_;
  Rounding rounding_;
  LinearModel model_;
  std::vector<std::vector<int>> class_jobs_;  // jobs of each class
  std::vector<Start> starts_;
  // w columns of a y column (by index into starts_): (node, col)
  std::vector<std::vector<std::pair<int, int>>> whole_;
  std::vector<std::vector<int>> node_groups_;  // identical nodes ordered by load, in order
  std::vector<int> u_col_;                     // u[s] column for s >= lower, else -1
  std::vector<std::vector<int>> v_col_;        // v[k][s]
};

}  // namespace saturn::solver
