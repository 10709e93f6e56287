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
    if (s.metrics.empty() && s.level == 0 && !s.withdrawn) continue;
    nlohmann::json metrics = nlohmann::json::array();
    for (double m : s.metrics) metrics.push_back(metric_json(m));
    jobs[ids_[j]] = {{"level", s.level},
                     {"waiting", s.waiting},
                     {"stopped", s.stopped},
                     {"withdrawn", s.withdrawn},
                     {"metrics", metrics}};
  }
  return {{"method", settings_.method}, {"rungs", rungs_}, {"jobs", jobs}};
}

void Selection::restore(const nlohmann::json& state, const std::string& file) {
  // Every field is checked for its type: a hand-edited or truncated run_state.json is an input
  // error naming the file and the field, not an exception from deep inside the coordinator.
  const auto bad = [&](const std::string& field, const std::string& want,
                       const nlohmann::json& got) {
    return InputError(fmt::format("--resume: {}: selection.{} must be {}, found {}", file, field,
                                  want, got.dump()));
  };
  if (!state.is_object())
    throw InputError(
        fmt::format("--resume: {}: selection must be an object, found {}", file, state.dump()));
  const auto field = [&](const nlohmann::json& obj, const std::string& key,
                         const std::string& path) -> const nlohmann::json& {
    const auto it = obj.find(key);
    if (it == obj.end())
      throw InputError(fmt::format("--resume: {}: selection.{} is missing", file, path));
    return *it;
  };
  const nlohmann::json& method = field(state, "method", "method");
  if (!method.is_string()) throw bad("method", "a string", method);
  const nlohmann::json& rungs = field(state, "rungs", "rungs");
  std::vector<std::int64_t> saved_rungs;
  if (!rungs.is_array()) throw bad("rungs", "an array of steps", rungs);
  for (const auto& r : rungs) {
    if (!r.is_number_integer()) throw bad("rungs", "an array of steps", rungs);
    saved_rungs.push_back(r.get<std::int64_t>());
  }
  if (method.get<std::string>() != settings_.method || saved_rungs != rungs_)
    throw InputError(fmt::format(
        "--resume: the run selected with {} at rungs {}, the workload now says {} at rungs {}; "
        "selection cannot change within a run",
        method.get<std::string>(), rungs.dump(), settings_.method, nlohmann::json(rungs_).dump()));
  const nlohmann::json& jobs = field(state, "jobs", "jobs");
  if (!jobs.is_object()) throw bad("jobs", "an object (job id: state)", jobs);
  for (const auto& [id, js] : jobs.items()) {
    const std::string path = "jobs." + id;
    const auto it = std::find(ids_.begin(), ids_.end(), id);
    if (it == ids_.end())
      throw InputError(fmt::format(
          "--resume: {}: selection.{}: the workload has no job '{}' any more", file, path, id));
    if (!js.is_object()) throw bad(path, "an object", js);
    JobRungs s;
    const nlohmann::json& level = field(js, "level", path + ".level");
    if (!level.is_number_integer() || level.get<std::int64_t>() < 0 ||
        level.get<std::int64_t>() > static_cast<std::int64_t>(rungs_.size()))
      throw bad(path + ".level", fmt::format("an integer 0 … {}", rungs_.size()), level);
    s.level = level.get<int>();
    const auto flag = [&](const char* key, bool optional) {
      const auto f = js.find(key);
      if (f == js.end() && optional) return false;
      const nlohmann::json& v = field(js, key, path + "." + key);
      if (!v.is_boolean()) throw bad(path + "." + key, "true or false", v);
      return v.get<bool>();
    };
    s.waiting = flag("waiting", false);
    s.stopped = flag("stopped", false);
    s.withdrawn = flag("withdrawn", true);  // absent in files of older versions: false
    const nlohmann::json& metrics = field(js, "metrics", path + ".metrics");
    if (!metrics.is_array()) throw bad(path + ".metrics", "an array of numbers or null", metrics);
    for (const auto& m : metrics) {
      if (!m.is_number() && !m.is_null())
        throw bad(path + ".metrics", "an array of numbers or null", metrics);
      s.metrics.push_back(m.is_number() ? m.get<double>() : NAN);
    }
    // The metrics cover the rungs passed, plus the rung it waits or stopped at (which exists).
    const bool at_rung = s.waiting || s.stopped;
    if (s.metrics.size() != static_cast<std::size_t>(s.level) + (at_rung ? 1 : 0) ||
        (s.waiting && s.stopped) || (at_rung && s.level >= static_cast<int>(rungs_.size())))
      throw InputError(fmt::format(
          "--resume: {}: selection.{} is inconsistent: level {}, waiting {}, stopped {} and {} "
          "metrics (one per rung passed, one more when waiting or stopped at rung `level`)",
          file, path, s.level, s.waiting, s.stopped, s.metrics.size()));
    state_[static_cast<std::size_t>(it - ids_.begin())] = std::move(s);
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
