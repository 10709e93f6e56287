// The coordinator's job table: what it knows of every workload job in this run (status, steps,
// the configuration and devices the adopted plan gives it, its segments, its last metrics).
// Plain state with the few questions every part asks of it; no MPI, no files.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/exec/coordinator.hpp"
#include "runtime/exec/messages.hpp"

namespace saturn::exec {

// kCancelled: by `saturn cancel` (its work is not wanted; the batch does not wait for it).
enum class JobStatus { kPending, kRunning, kStopping, kFinished, kFailed, kStopped, kCancelled };

const char* status_name(JobStatus s);

// One launch of a job on a group of ranks, in this run.
struct Segment {
  int config = -1;
  std::vector<int> ranks;
  double start_s = 0, end_s = -1;
  std::int64_t start_step = 0, end_step = 0;
  std::string end_status;
  SegmentTimes times;  // the trainer's, by kind: from its last progress, then its outcome
  // Its configuration's costs as the coordinator priced them when it launched the segment
  // (the profile's, or what earlier segments of the batch measured in it).
  profile::UnitCosts costs_at_launch;
  bool ended() const { return end_s >= 0; }
  // Its time by kind on the coordinator's clock: the start is what the trainer's steps,
  // evaluations and checkpoints leave of the segment's wall time (launch, set-up, reports).
  profile::RunParts parts(double now) const;
};

struct JobState {
  const JobSpec* spec = nullptr;
  int index = -1;           // in the workload (and the table)
  int planning_index = -1;  // into setup.planning.jobs (-1: finished before this run)
  JobStatus status = JobStatus::kPending;
  std::int64_t steps_done = 0;
  // Current assignment from the adopted plan.
  int config = -1;
  std::vector<int> devices;
  double planned_start_s = 0, planned_end_s = 0;
  double predicted_s = 0;             // first plan's duration for this job in this run
  profile::RunParts predicted_parts;  // the same by kind
  std::vector<Segment> segments;
  // Segments of earlier, interrupted runs of this directory (from timeline.jsonl), as they go
  // into summary.json; segment numbers continue after them.
  nlohmann::json past_segments = nlohmann::json::array();
  std::string reason;
  // Progress.
  double loss = NAN, val_loss = NAN, tokens_per_s = 0;
  double step_time_s = 0;  // measured, smoothed
  // Its measured optimizer step (evaluations and checkpoints apart) over its configuration's
  // profiled one: scales the job's configurations this run has not measured.
  double correction = 1.0;
  bool stop_sent = false;
  bool move_after_stop = false;
  // Selection (workload `selection:`): the step of the job's next rung (0: none), whether it
  // waits at a rung for its decision (pending, not planned, not dispatched), and whether the
  // rule stopped it (status stopped, its work done as far as the batch is concerned).
  std::int64_t pause_step = 0;
  bool held = false;
  bool selected_out = false;
  // Promoted at a rung: its devices and planned start are from a plan made before the rung
  // (which covered it only up to there); it waits for a plan that places it again.
  bool awaiting_plan = false;
  bool cancel_requested = false;  // `saturn cancel` while it ran: cancelled once it has stopped
  // Stopped by its `early_stop:` rule: EarlyStopHit::to_json() (null: not).
  nlohmann::json early_stop;
  // Stopped and done as far as the batch is concerned (by selection or its early_stop), not
  // stopped with work left (a signal).
  bool stopped_for_good() const {
    return status == JobStatus::kStopped && (selected_out || !early_stop.is_null());
  }
};

class JobTable {
 public:
  // Every workload job; steps_done and finished (per workload job, empty: none) come from a
  // resumed run's checkpoints.
  JobTable(const Workload& workload, const PlanningInput& planning,
           const std::vector<std::int64_t>& steps_done, const std::vector<bool>& finished);

  // A job still pending that planning left out could never start, and the batch would wait
  // for it forever: it fails instead, with the reason, and the others go on. Called once a
  // resumed run's stopped and cancelled jobs (left out of planning on purpose) have their
  // status.
  void fail_unplanned();

  std::vector<JobState> jobs;  // in workload order

  // Jobs `saturn submit` added: workload.jobs from jobs.size() on, pending, with their planning
  // entries among the planning jobs (by id) from planning_first on. Every job's spec points
  // into `workload` again (its vector may have moved).
  void add_jobs(const Workload& workload, std::size_t planning_first);

  JobState* find(const std::string& id);
  // Pending (not held at a rung), running or stopping: work the plan still covers.
  static bool active(const JobState& js);
  // Pending with a placement from the current plan: dispatch may launch it.
  static bool dispatchable(const JobState& js);
  // The rule promoted the job past its rung: it goes on up to `next_pause` (0: its last step)
  // once a plan places it (place()).
  static void promote(JobState& js, std::int64_t next_pause);
  // An adopted plan gives the job this configuration, devices and time span (batch seconds).
  static void place(JobState& js, int config, const std::vector<int>& devices, double start_s,
                    double end_s);
  // Seconds from `now` until the last job that will still run ends by the current plan: pending
  // (not held at a rung), running or stopping jobs; stopped, cancelled, failed and finished ones
  // keep planned ends that no longer happen.
  double eta_s(double now) const;
  // Steps until the job's next stop: its next rung, else its last step.
  std::int64_t remaining_steps(const JobState& js) const;
  // What a step, an evaluation, a checkpoint and a start cost in config c of the job: what this
  // run measured in that configuration of that shape (any job of the batch with the same profile
  // key), else the profile's figure, its steps scaled by the job's own measured correction.
  // Nothing measured elsewhere is carried over: a 2-rank job's checkpoint on ranks that share
  // cores says nothing of a 1-rank job's.
  profile::UnitCosts costs(const JobState& js, int c) const;
  // The job's steps left in config c, by kind; `start`: a segment starts for them.
  profile::RunParts remaining_parts(const JobState& js, int c, bool start) const;
  const ConfigDetail& detail(const JobState& js, int config) const;
  // A progress message of the job's leader: steps, losses, the measured step time.
  void record_progress(JobState& js, const Progress& message);
  // Nothing runs any more and, unless the batch is stopping, nothing is left to start.
  bool all_done(bool stopping) const;
  // 0 all finished (or stopped by selection or early_stop), 1 some job failed, 99 work left
  // (stopped or pending).
  int exit_code() const;

 private:
  // Each job from first_job on gets its entry among the planning jobs from first_planning on
  // (by id).
  void link_planning(std::size_t first_job, std::size_t first_planning);
  const PlanningInput* planning_;
};

}  // namespace saturn::exec
