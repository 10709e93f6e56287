// Model selection inside the batch (workload `selection:`, docs/workload.md "Selection"):
// successive halving and ASHA over the batch's jobs. Every job pauses at each rung (a
// checkpoint at the rung's step) until a decision promotes it to the next rung or stops it.
//
// The rule, at rung k, over the jobs that reached it (n of them, the metric measured at the
// rung's step): lower is better; ties go to the job earlier in the workload; a job whose metric
// is missing (no evaluation reached the coordinator, or not a finite number) ranks after every
// measured one. successive-halving: once every job that can still reach the rung has (or has
// failed), the best max(1, floor(n / reduction_factor)) go on, the others stop. asha: whenever
// a job reaches the rung, the waiting jobs among the best floor(n / reduction_factor) of those
// there so far go on at once; when the rung is complete the others stop (the best one goes on
// if none did). Pure bookkeeping: no MPI, no files.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct SelectionDecision {
  int job = -1;  // index in the job list given to Selection
  int rung = 0;  // 0-based
  std::int64_t step = 0;
  bool promoted = false;  // false: stopped
  double metric = 0;      // NaN: missing
  int place = 0;          // 1-based place among the jobs compared at the rung
  int compared = 0;       // jobs that had reached the rung when decided
  int kept = 0;           // how many of them the rung lets go on (so far, for asha)
};

class Selection {
 public:
  // `job_ids`: the batch's jobs in workload order (the tie rule's order).
  Selection(const SelectionSettings& settings, std::vector<std::string> job_ids);

  bool enabled() const { return settings_.enabled(); }
  const SelectionSettings& settings() const { return settings_; }
  const std::vector<std::int64_t>& rung_steps() const { return rungs_; }
  // The step the job pauses at next (its next rung's), or 0 when none is left (promoted past
  // every rung, stopped, or selection off).
  std::int64_t pause_step(int job) const;
  bool waiting(int job) const { return state_[idx(job)].waiting; }
  bool stopped(int job) const { return state_[idx(job)].stopped; }
  // Withdrawn (failed or cancelled): no rung waits for it, and --resume keeps it out.
  bool withdrawn(int job) const { return state_[idx(job)].withdrawn; }
  // The rung the job is at or heading for (0-based); rung_steps().size() past the last.
  int level(int job) const { return state_[idx(job)].level; }
  // The job reached its next rung's step, with the metric measured there (NaN: missing).
  void arrive(int job, double metric);
  // The job will reach no further rung (it failed, or was cancelled): rungs stop waiting for
  // it; cancelled while waiting at a rung, it is not compared there.
  void withdraw(int job);
  // Decisions that the rule allows now, in rung order; each is applied to the state.
  std::vector<SelectionDecision> decide();

  // The state for run_state.json (every decision and metric, by job id), and back: --resume
  // keeps every decision (withdrawals too). restore throws InputError, naming `file` and the
  // field, when the state is malformed or does not fit the workload.
  nlohmann::json to_json() const;
  void restore(const nlohmann::json& state, const std::string& file);
  // What summary.json shows for the job: the metric at each rung it reached, its decisions.
  nlohmann::json job_json(int job) const;

 private:
  struct JobRungs {
    int level = 0;         // rungs passed (promoted past)
    bool waiting = false;  // at rung `level`, awaiting its decision
    bool stopped = false;  // stopped at rung `level`
    bool withdrawn = false;
    std::vector<double> metrics;  // at each rung reached
  };
  std::size_t idx(int job) const { return static_cast<std::size_t>(job); }
  // Jobs that reached rung k, best first (the rule's order).
  std::vector<int> ranked(int rung) const;
  SelectionDecision decision(int job, int rung, bool promoted, const std::vector<int>& order,
                             int kept) const;

  SelectionSettings settings_;
  std::vector<std::string> ids_;
  std::vector<std::int64_t> rungs_;
  std::vector<JobRungs> state_;
};

}  // namespace saturn::exec
