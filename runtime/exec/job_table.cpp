#include "runtime/exec/job_table.hpp"

#include <algorithm>

namespace saturn::exec {

const char* status_name(JobStatus s) {
  switch (s) {
    case JobStatus::kPending:
      return "pending";
    case JobStatus::kRunning:
      return "running";
    case JobStatus::kStopping:
      return "stopping";
    case JobStatus::kFinished:
      return "finished";
    case JobStatus::kFailed:
      return "failed";
    case JobStatus::kStopped:
      return "stopped";
    case JobStatus::kCancelled:
      return "cancelled";
  }
  return "?";
}

JobTable::JobTable(const Workload& workload, const PlanningInput& planning,
                   const std::vector<std::int64_t>& steps_done, const std::vector<bool>& finished)
    : planning_(&planning) {
  const auto& wj = workload.jobs;
  jobs.resize(wj.size());
  for (std::size_t j = 0; j < wj.size(); ++j) {
    jobs[j].spec = &wj[j];
    jobs[j].index = static_cast<int>(j);
    jobs[j].steps_done = steps_done.empty() ? 0 : steps_done[j];
    if (!finished.empty() && finished[j]) jobs[j].status = JobStatus::kFinished;
  }
  link_planning(0, 0);
}

void JobTable::link_planning(std::size_t first_job, std::size_t first_planning) {
  for (std::size_t j = first_job; j < jobs.size(); ++j)
    for (std::size_t p = first_planning; p < planning_->jobs.size(); ++p)
      if (planning_->jobs[p].id == jobs[j].spec->id) jobs[j].planning_index = static_cast<int>(p);
}

void JobTable::fail_unplanned() {
  for (auto& js : jobs)
    if (js.status == JobStatus::kPending && js.planning_index < 0) {
      js.status = JobStatus::kFailed;
      js.reason = "left out of the plan (no steps left to run, yet no final.h5)";
    }
}

void JobTable::add_jobs(const Workload& workload, std::size_t planning_first) {
  const std::size_t first = jobs.size();
  jobs.resize(workload.jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) jobs[j].spec = &workload.jobs[j];
  for (std::size_t j = first; j < jobs.size(); ++j) jobs[j].index = static_cast<int>(j);
  link_planning(first, planning_first);
  for (std::size_t j = first; j < jobs.size(); ++j) {
    JobState& js = jobs[j];
    if (js.planning_index < 0) {  // the planner gave it no entry: it could never start
      js.status = JobStatus::kFailed;
      js.reason = "left out of the plan (no configuration for it)";
    }
  }
}

JobState* JobTable::find(const std::string& id) {
  for (auto& js : jobs)
    if (js.spec->id == id) return &js;
  return nullptr;
}

bool JobTable::active(const JobState& js) {
  return (js.status == JobStatus::kPending && !js.held) || js.status == JobStatus::kRunning ||
         js.status == JobStatus::kStopping;
}

bool JobTable::dispatchable(const JobState& js) {
  return js.status == JobStatus::kPending && !js.held && !js.awaiting_plan && js.config >= 0;
}

void JobTable::promote(JobState& js, std::int64_t next_pause) {
  js.held = false;
  js.pause_step = next_pause;
  js.awaiting_plan = true;
}

void JobTable::place(JobState& js, int config, const std::vector<int>& devices, double start_s,
                     double end_s) {
  js.config = config;
  js.devices = devices;
  js.planned_start_s = start_s;
  js.planned_end_s = end_s;
  js.awaiting_plan = false;
}

double JobTable::eta_s(double now) const {
  double eta = 0;
  for (const auto& js : jobs)
    if (active(js) && !js.awaiting_plan) eta = std::max(eta, js.planned_end_s - now);
  return eta;
}

std::int64_t JobTable::remaining_steps(const JobState& js) const {
  const std::int64_t end =
      js.pause_step > 0 ? std::min(js.pause_step, js.spec->train.steps) : js.spec->train.steps;
  return std::max<std::int64_t>(0, end - js.steps_done);
}

profile::RunParts Segment::parts(double now) const {
  profile::RunParts p;
  p.steps_s = times.steps_s;
  p.evals_s = times.evals_s;
  p.checkpoints_s = times.checkpoints_s;
  const double wall = (ended() ? end_s : now) - start_s;
  p.start_s = std::max(0.0, wall - p.steps_s - p.evals_s - p.checkpoints_s);
  return p;
}

namespace {

// A segment's steps price its configuration (and correct the job's others) once there are this
// many: its first step pays the first touch of its memory, which over a few steps dominates (a
// job moved after 4 steps of 12 ms measured 18 ms, and its next configuration was priced 1.5x
// too slow).
constexpr std::int64_t kStepsToLearnFrom = 10;

// What segments measured, per kind, summed with their counts.
struct KindSums {
  double steps_s = 0, evals_s = 0, checkpoints_s = 0, starts_s = 0;
  std::int64_t steps = 0, evals = 0, checkpoints = 0, starts = 0;
  void add(const Segment& s) {
    if (s.times.steps >= kStepsToLearnFrom) {
      steps_s += s.times.steps_s;
      steps += s.times.steps;
    }
    evals_s += s.times.evals_s;
    evals += s.times.evals;
    checkpoints_s += s.times.checkpoints_s;
    checkpoints += s.times.checkpoints;
    if (s.ended()) {  // a running segment's start is not over until its first step
      starts_s += s.parts(s.end_s).start_s;
      ++starts;
    }
  }
};

double mean(double sum, std::int64_t n, double otherwise) {
  return n > 0 ? sum / static_cast<double>(n) : otherwise;
}

}  // namespace

profile::UnitCosts JobTable::costs(const JobState& js, int c) const {
  const ConfigDetail& d = detail(js, c);
  KindSums same;  // this configuration of this shape (one profile key), in any job of the batch
  for (const auto& other : jobs)
    for (const auto& s : other.segments)
      if (detail(other, s.config).key_id == d.key_id) same.add(s);
  const profile::UnitCosts p = d.costs();
  return {mean(same.steps_s, same.steps, p.step_s * js.correction),
          mean(same.evals_s, same.evals, p.eval_s),
          mean(same.checkpoints_s, same.checkpoints, p.checkpoint_s),
          mean(same.starts_s, same.starts, p.start_s)};
}

profile::RunParts JobTable::remaining_parts(const JobState& js, int c, bool start) const {
  profile::UnitCosts u = costs(js, c);
  if (!start) u.start_s = 0;
  return profile::run_parts(js.spec->train, js.steps_done, js.steps_done + remaining_steps(js), u);
}

const ConfigDetail& JobTable::detail(const JobState& js, int config) const {
  return planning_
      ->details[static_cast<std::size_t>(js.planning_index)][static_cast<std::size_t>(config)];
}

void JobTable::record_progress(JobState& js, const Progress& m) {
  js.steps_done = m.step;
  js.loss = m.loss;
  if (m.val_loss) js.val_loss = *m.val_loss;
  js.tokens_per_s = m.tokens_per_s;
  const double st = m.step_time_s;
  if (st > 0) js.step_time_s = js.step_time_s > 0 ? 0.7 * js.step_time_s + 0.3 * st : st;
  if (js.segments.empty()) return;
  Segment& running = js.segments.back();
  running.times = m.times;
  // The job's own steps against their configuration's profile: scales its other ones.
  const double profiled = detail(js, running.config).step_s;
  if (m.times.steps >= kStepsToLearnFrom && profiled > 0)
    js.correction = m.times.steps_s / static_cast<double>(m.times.steps) / profiled;
}

bool JobTable::all_done(bool stopping) const {
  for (const auto& js : jobs)
    if (js.status == JobStatus::kRunning || js.status == JobStatus::kStopping) return false;
  if (stopping) return true;
  for (const auto& js : jobs)
    if (js.status == JobStatus::kPending) return false;
  return true;
}

int JobTable::exit_code() const {
  bool failed = false, unfinished = false;
  for (const auto& js : jobs) {
    if (js.status == JobStatus::kFailed) failed = true;
    if (js.status == JobStatus::kPending ||
        (js.status == JobStatus::kStopped && !js.stopped_for_good()))
      unfinished = true;
  }
  if (unfinished) return 99;
  return failed ? 1 : 0;
}

}  // namespace saturn::exec
