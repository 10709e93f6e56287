#include "runtime/exec/batch_selection.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/core/log.hpp"

namespace saturn::exec {
namespace {

std::vector<std::string> job_ids(const Workload& w) {
  std::vector<std::string> ids;
  for (const auto& j : w.jobs) ids.push_back(j.id);
  return ids;
}

}  // namespace

BatchSelection::BatchSelection(const Workload& w) : rule_(w.selection, job_ids(w)) {}

void BatchSelection::restore(const nlohmann::json& state, const std::string& file) {
  if (enabled() && !state.is_null()) rule_.restore(state, file);
}

void BatchSelection::apply_restored(std::vector<JobState>& jobs) {
  if (!enabled()) return;
  for (auto& js : jobs) {
    const int j = js.index;
    if (!js.early_stop.is_null()) {
      rule_.withdraw(j);  // a state saved before its withdrawal was: no rung waits for it
      continue;
    }
    if (rule_.stopped(j)) {
      js.status = JobStatus::kStopped;
      js.selected_out = true;
      const auto rungs = rule_.job_json(j);
      const auto& last = rungs.back();
      js.reason =
          fmt::format("{}: rung {} (step {}) (decided before --resume)", rule_.settings().method,
                      last["rung"].get<int>(), last["step"].get<std::int64_t>());
      continue;
    }
    if (js.status != JobStatus::kPending) continue;
    // Failed in an earlier run: its rungs were decided without it, so it stays out (a retry
    // would reach rungs already decided, or make a complete rung wait again).
    if (rule_.withdrawn(j)) {
      js.status = JobStatus::kFailed;
      js.reason = fmt::format(
          "failed before --resume at step {}; withdrawn from selection, which decided its "
          "rungs without it",
          js.steps_done);
      continue;
    }
    js.held = rule_.waiting(j);
    js.pause_step = rule_.pause_step(j);
    // A checkpoint at or past the next rung whose arrival the run state does not hold (a
    // hard kill between the checkpoint and run_state.json): its metric is missing.
    if (!js.held && js.pause_step > 0 && js.steps_done >= js.pause_step) {
      log::warn(
          "job {}: resumed at step {}, at or past its rung at step {} with no metric "
          "recorded: it ranks as missing",
          js.spec->id, js.steps_done, js.pause_step);
      rule_.arrive(j, NAN);
      js.held = true;
    }
  }
}

void BatchSelection::withdraw(const JobState& js) {
  if (enabled()) rule_.withdraw(js.index);
}

nlohmann::json BatchSelection::reached_rung(JobState& js, const SegmentOutcome& o) {
  const double metric = o.val_loss.value_or(NAN);
  const int rung = rule_.level(js.index);
  rule_.arrive(js.index, metric);
  js.held = true;
  return {{"event", "rung"},
          {"job", js.spec->id},
          {"rung", rung},
          {"step", js.steps_done},
          {rule_.settings().metric, metric_json(metric)}};
}

BatchSelection::Decided BatchSelection::decide(std::vector<JobState>& jobs, bool quiet) {
  Decided out;
  if (!enabled()) return out;
  for (const auto& d : rule_.decide()) {
    JobState& js = jobs[static_cast<std::size_t>(d.job)];
    out.events.push_back({{"event", d.promoted ? "promote" : "selection_stop"},
                          {"job", js.spec->id},
                          {"rung", d.rung},
                          {"step", d.step},
                          {rule_.settings().metric, metric_json(d.metric)},
                          {"place", d.place},
                          {"compared", d.compared},
                          {"kept", d.kept}});
    out.rung = d.rung;
    if (d.promoted) {
      // Not dispatched on the devices of the plan before its rung: the re-plan the
      // coordinator requests places it.
      JobTable::promote(js, rule_.pause_step(d.job));
    } else {
      js.held = false;
      js.status = JobStatus::kStopped;
      js.selected_out = true;
      js.pause_step = 0;
      js.reason = stop_reason(d);
      if (!quiet) log::info("job {} stopped by {}", js.spec->id, js.reason);
    }
  }
  return out;
}

nlohmann::json BatchSelection::settings_json() const {
  const auto& s = rule_.settings();
  return {{"method", s.method},       {"metric", s.metric},
          {"min_steps", s.min_steps}, {"reduction_factor", s.reduction_factor},
          {"max_rungs", s.max_rungs}, {"rung_steps", rule_.rung_steps()}};
}

void BatchSelection::add_job_summary(const JobState& js, nlohmann::json& j) const {
  if (!enabled()) return;
  const nlohmann::json rungs = rule_.job_json(js.index);
  j["rungs"] = rungs;
  if (js.selected_out) {
    const std::string& metric = rule_.settings().metric;
    j["stopped_by"] = "selection";
    j["rung"] = rungs.back()["rung"];
    j["rung_step"] = rungs.back()["step"];
    j["metric"] = {{metric, rungs.back()[metric]}};
  }
}

std::string BatchSelection::stop_reason(const SelectionDecision& d) const {
  const std::string metric =
      std::isnan(d.metric) ? std::string("missing") : fmt::format("{:.6g}", d.metric);
  return fmt::format("{}: rung {} (step {}): {} {}, place {} of {}, {} go on",
                     rule_.settings().method, d.rung, d.step, rule_.settings().metric, metric,
                     d.place, d.compared, d.kept);
}

nlohmann::json BatchSelection::metric_json(double metric) const {
  return std::isnan(metric) ? nlohmann::json() : nlohmann::json(metric);
}

}  // namespace saturn::exec
