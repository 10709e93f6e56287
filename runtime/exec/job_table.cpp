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

double JobTable::step_time(const JobState& js, int c) const {
  const auto& sj = planning_->jobs[static_cast<std::size_t>(js.planning_index)];
  const auto& cfg = sj.configs[static_cast<std::size_t>(c)];
  const double base = sj.steps > 0 ? cfg.time_s / static_cast<double>(sj.steps) : cfg.time_s;
  return base * js.correction;
}

double JobTable::step_time_unscaled(const JobState& js) const {
  if (js.planning_index < 0 || js.config < 0) return 0;
  const auto& sj = planning_->jobs[static_cast<std::size_t>(js.planning_index)];
  const auto& cfg = sj.configs[static_cast<std::size_t>(js.config)];
  return sj.steps > 0 ? cfg.time_s / static_cast<double>(sj.steps) : 0;
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
  if (st > 0) {
    js.step_time_s = js.step_time_s > 0 ? 0.7 * js.step_time_s + 0.3 * st : st;
    const double est = step_time_unscaled(js);
    if (est > 0) js.correction = js.step_time_s / est;
  }
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
