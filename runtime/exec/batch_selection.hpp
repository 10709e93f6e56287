// Selection inside the batch as the coordinator applies it to its jobs. The rule itself
// (exec/selection.hpp) knows job indices, rungs and metrics; this keeps the job table in step
// with it (statuses, rung steps, reasons) and gives the timeline, run_state.json and
// summary.json what they record of it.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/exec/job_table.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/selection.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

class BatchSelection {
 public:
  explicit BatchSelection(const Workload& w);

  bool enabled() const { return rule_.enabled(); }

  // --resume: the interrupted run's decisions (run_state.json's "selection", `file` in errors).
  void restore(const nlohmann::json& state, const std::string& file);
  // Then each job takes the state they give it: stopped, failed (withdrawn), held at a rung,
  // or running up to its next rung.
  void apply_restored(std::vector<JobState>& jobs);

  // The job will reach no further rung (failed, cancelled, stopped early): its rungs are
  // decided without it.
  void withdraw(const JobState& js);

  // The job stopped at its rung's step with the segment's last evaluation (at that very step:
  // rungs are multiples of eval_every). Returns the timeline's "rung" event.
  nlohmann::json reached_rung(JobState& js, const SegmentOutcome& o);

  // What the rule decides now, applied: losers stop (their ranks are already free: they wait
  // at the rung), winners go on to their next rung. The timeline's events, in order (none:
  // nothing was decided), and the last rung decided.
  struct Decided {
    std::vector<nlohmann::json> events;
    int rung = 0;
  };
  Decided decide(std::vector<JobState>& jobs, bool quiet);

  nlohmann::json run_state() const { return rule_.to_json(); }  // run_state.json's "selection"
  nlohmann::json settings_json() const;                         // summary.json's "selection"
  // A job's entry in summary.json: its rungs, and what stopped it when selection did.
  void add_job_summary(const JobState& js, nlohmann::json& j) const;

 private:
  std::string stop_reason(const SelectionDecision& d) const;
  nlohmann::json metric_json(double metric) const;

  Selection rule_;
};

}  // namespace saturn::exec
