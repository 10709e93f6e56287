#include "runtime/exec/selection.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"

namespace saturn::exec {
namespace {
// JSON has no NaN: a missing metric is null.
nlohmann::json metric_json(double m) {
  return std::isnan(m) ? nlohmann::json() : nlohmann::json(m);
}
}  // namespace

Selection::Selection(const SelectionSettings& settings, std::vector<std::string> job_ids)
    : settings_(settings),
      ids_(std::move(job_ids)),
      rungs_(settings.rung_steps()),
      state_(ids_.size()) {}

std::int64_t Selection::pause_step(int job) const {
  const JobRungs& s = state_[idx(job)];
  if (!enabled() || s.stopped || s.level >= static_cast<int>(rungs_.size())) return 0;
  return rungs_[static_cast<std::size_t>(s.level)];
}

void Selection::arrive(int job, double metric) {
  JobRungs& s = state_[idx(job)];
  if (!enabled() || s.stopped || s.waiting || s.level >= static_cast<int>(rungs_.size())) return;
  s.metrics.resize(static_cast<std::size_t>(s.level));
  s.metrics.push_back(std::isfinite(metric) ? metric : NAN);
  s.waiting = true;
}

void Selection::withdraw(int job) {
  JobRungs& s = state_[idx(job)];
  s.withdrawn = true;
  // Withdrawn while waiting at a rung (cancelled): it is not compared there.
  if (s.waiting) {
    s.waiting = false;
    s.metrics.pop_back();
  }
}

std::vector<int> Selection::ranked(int rung) const {
  std::vector<int> order;
  for (std::size_t j = 0; j < state_.size(); ++j)
    if (static_cast<int>(state_[j].metrics.size()) > rung) order.push_back(static_cast<int>(j));
  const auto metric = [&](int j) { return state_[idx(j)].metrics[static_cast<std::size_t>(rung)]; };
  // Lower is better; a missing metric after every measured one; ties: workload order.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const double ma = metric(a), mb = metric(b);
    if (std::isnan(ma) || std::isnan(mb)) return !std::isnan(ma) && std::isnan(mb);
    return ma < mb;
  });
  return order;
}

SelectionDecision Selection::decision(int job, int rung, bool promoted,
                                      const std::vector<int>& order, int kept) const {
  SelectionDecision d;
  d.job = job;
  d.rung = rung;
  d.step = rungs_[static_cast<std::size_t>(rung)];
  d.promoted = promoted;
  d.metric = state_[idx(job)].metrics[static_cast<std::size_t>(rung)];
  d.place = static_cast<int>(std::find(order.begin(), order.end(), job) - order.begin()) + 1;
  d.compared = static_cast<int>(order.size());
  d.kept = kept;
  return d;
}

std::vector<SelectionDecision> Selection::decide() {
  std::vector<SelectionDecision> out;
  if (!enabled()) return out;
  const bool asha = settings_.method == "asha";
  for (int k = 0; k < static_cast<int>(rungs_.size()); ++k) {
    // Complete: no job that can still reach rung k is on its way there.
    bool complete = true;
    for (const auto& s : state_)
      if (!s.stopped && !s.withdrawn && s.level <= k && static_cast<int>(s.metrics.size()) <= k &&
          !(s.waiting && s.level == k))
        complete = false;
    if (!asha && !complete) continue;
    const std::vector<int> order = ranked(k);
    const int n = static_cast<int>(order.size());
    const int quota = static_cast<int>(n / settings_.reduction_factor);
    const int kept = complete ? std::max(1, quota) : quota;
    for (int place = 0; place < n; ++place) {
      const int j = order[static_cast<std::size_t>(place)];
      JobRungs& s = state_[idx(j)];
      if (!s.waiting || s.level != k) continue;
      if (place < kept) {
        out.push_back(decision(j, k, true, order, kept));
        s.waiting = false;
        ++s.level;
      } else if (complete) {
        out.push_back(decision(j, k, false, order, kept));
        s.waiting = false;
        s.stopped = true;
      }
    }
  }
  return out;
}

nlohmann::json Selection::to_json() const {
  nlohmann::json jobs = nlohmann::json::object();
  for (std::size_t j = 0; j < state_.size(); ++j) {
    const JobRungs& s = state_[j];
    if (s.metrics.empty() && s.level == 0) continue;
    nlohmann::json metrics = nlohmann::json::array();
    for (double m : s.metrics) metrics.push_back(metric_json(m));
    jobs[ids_[j]] = {
        {"level", s.level}, {"waiting", s.waiting}, {"stopped", s.stopped}, {"metrics", metrics}};
  }
  return {{"method", settings_.method}, {"rungs", rungs_}, {"jobs", jobs}};
}

void Selection::restore(const nlohmann::json& state) {
  if (state.value("method", "") != settings_.method ||
      state.value("rungs", std::vector<std::int64_t>{}) != rungs_)
    throw InputError(fmt::format(
        "--resume: the run selected with {} at rungs {}, the workload now says {} at rungs {}; "
        "selection cannot change within a run",
        state.value("method", "?"), state.value("rungs", nlohmann::json::array()).dump(),
        settings_.method, nlohmann::json(rungs_).dump()));
  const auto& jobs = state.at("jobs");
  for (const auto& [id, js] : jobs.items()) {
    const auto it = std::find(ids_.begin(), ids_.end(), id);
    if (it == ids_.end())
      throw InputError(
          fmt::format("--resume: run_state.json's selection names job '{}', which "
                      "the workload no longer has",
                      id));
    JobRungs& s = state_[static_cast<std::size_t>(it - ids_.begin())];
    s.level = js.at("level").get<int>();
    s.waiting = js.at("waiting").get<bool>();
    s.stopped = js.at("stopped").get<bool>();
    s.metrics.clear();
    for (const auto& m : js.at("metrics"))
      s.metrics.push_back(m.is_number() ? m.get<double>() : NAN);
    if (s.level < 0 || s.level > static_cast<int>(rungs_.size()) ||
        static_cast<int>(s.metrics.size()) < s.level)
      throw InputError(
          fmt::format("--resume: run_state.json's selection state of job '{}' is inconsistent "
                      "(level {}, {} metrics)",
                      id, s.level, s.metrics.size()));
  }
}

nlohmann::json Selection::job_json(int job) const {
  const JobRungs& s = state_[idx(job)];
  nlohmann::json rungs = nlohmann::json::array();
  for (std::size_t k = 0; k < s.metrics.size(); ++k) {
    const bool decided =
        static_cast<int>(k) < s.level || (s.stopped && static_cast<int>(k) == s.level);
    rungs.push_back({{"rung", k},
                     {"step", rungs_[k]},
                     {settings_.metric, metric_json(s.metrics[k])},
                     {"decision", !decided                        ? "waiting"
                                  : static_cast<int>(k) < s.level ? "promoted"
                                                                  : "stopped"}});
  }
  return rungs;
}

}  // namespace saturn::exec
