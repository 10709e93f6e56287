#include "runtime/report/run_data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "runtime/core/error.hpp"
#include "runtime/core/json_file.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/gantt.hpp"

namespace saturn::report {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::int64_t kNoLimit = std::numeric_limits<std::int64_t>::max();

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file.string(), what));
}

// Field access with the file, line and field in every message.
struct Where {
  const fs::path& file;
  int line = 0;  // 0: the whole file
  std::string prefix;

  std::string at(const std::string& field) const {
    std::string s = file.string();
    if (line > 0) s += fmt::format(":{}", line);
    return fmt::format("{}: {}{}", s, prefix, field);
  }
  const json& need(const json& j, const std::string& field) const {
    if (!j.is_object() || !j.contains(field)) throw InputError(at(field) + ": missing");
    return j[field];
  }
  double number(const json& j, const std::string& field) const {
    const json& v = need(j, field);
    if (!v.is_number()) throw InputError(at(field) + ": expected a number, got " + v.dump());
    return v.get<double>();
  }
  double number_or(const json& j, const std::string& field, double fallback) const {
    if (!j.contains(field) || j[field].is_null()) return fallback;
    return number(j, field);
  }
  std::int64_t integer(const json& j, const std::string& field) const {
    const json& v = need(j, field);
    if (!v.is_number_integer())
      throw InputError(at(field) + ": expected an integer, got " + v.dump());
    return v.get<std::int64_t>();
  }
  std::string text(const json& j, const std::string& field) const {
    const json& v = need(j, field);
    if (!v.is_string()) throw InputError(at(field) + ": expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  std::string text_or(const json& j, const std::string& field) const {
    if (!j.contains(field) || j[field].is_null()) return "";
    return text(j, field);
  }
  std::vector<int> ranks(const json& j, const std::string& field) const {
    const json& v = need(j, field);
    if (!v.is_array()) throw InputError(at(field) + ": expected an array of ranks");
    std::vector<int> r;
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int>() < 0)
        throw InputError(at(field) + ": expected non-negative integer ranks, got " + v.dump());
      r.push_back(x.get<int>());
    }
    return r;
  }
};

std::vector<MetricPoint> read_metrics(const fs::path& file) {
  std::vector<MetricPoint> points;
  if (!fs::exists(file)) return points;
  for (const auto& [line, j] : read_jsonl(file)) {
    const Where w{file, line, ""};
    MetricPoint p;
    p.step = w.integer(j, "step");
    // A non-finite value is written as null by the JSON library: no value.
    p.loss = w.number_or(j, "loss", kNaN);
    p.val_loss = w.number_or(j, "val_loss", kNaN);
    p.lr = w.number_or(j, "lr", kNaN);
    p.tokens_per_s = w.number_or(j, "tokens_per_s", 0.0);
    p.time_s = w.number_or(j, "time_s", 0.0);
    points.push_back(p);
  }
  // One point per step, the newest line winning (a resumed segment rewrote what came after its
  // checkpoint).
  std::stable_sort(points.begin(), points.end(),
                   [](const MetricPoint& a, const MetricPoint& b) { return a.step < b.step; });
  std::vector<MetricPoint> out;
  for (const auto& p : points) {
    if (!out.empty() && out.back().step == p.step)
      out.back() = p;
    else
      out.push_back(p);
  }
  return out;
}

PlanInfo read_plan(const fs::path& file, int index) {
  const json j = read_json_file(file);
  if (!j.is_object()) fail(file, "expected a JSON object (a plan)");
  const Where w{file, 0, ""};
  PlanInfo p;
  p.index = index;
  p.file = (RunDir(fs::path()).plans_dir() / file.filename()).string();  // relative
  p.created_s = w.number_or(j, "created_s", 0.0);
  p.makespan_s = w.number(j, "makespan_s");
  p.lower_bound_s = p.created_s + w.number_or(j, "lower_bound_s", 0.0);
  p.reason = w.text_or(j, "reason");
  if (j.contains("solver") && j["solver"].is_object()) {
    const Where ws{file, 0, "solver."};
    p.solver_status = ws.text_or(j["solver"], "status");
    p.gap = ws.number_or(j["solver"], "gap", 0.0);
  }
  const json& jobs = w.need(j, "jobs");
  if (!jobs.is_array()) fail(file, "jobs: expected an array");
  for (std::size_t k = 0; k < jobs.size(); ++k) {
    const Where wj{file, 0, fmt::format("jobs[{}].", k)};
    PlannedJob pj;
    pj.id = wj.text(jobs[k], "id");
    pj.strategy = wj.text(jobs[k], "strategy");
    pj.ranks = wj.ranks(jobs[k], "ranks");
    pj.devices = static_cast<int>(pj.ranks.size());
    pj.start_s = wj.number(jobs[k], "start_s");
    pj.end_s = wj.number(jobs[k], "end_s");
    if (pj.end_s < pj.start_s) throw InputError(wj.at("end_s") + ": before start_s");
    p.jobs.push_back(pj);
  }
  return p;
}

// Where a segment that never reported got to: its start plus the training time its newest
// metrics line recorded (metrics time_s counts from the segment's start of training).
// Only the lines up to the step the job's next segment started from are this segment's: a
// resumed job rewrites its metrics after the checkpoint it resumed from.
double reached_s(const Segment& seg, std::int64_t limit_step,
                 const std::vector<MetricPoint>& metrics) {
  double t = seg.start_s;
  for (const auto& m : metrics)
    if (m.step > seg.start_step && m.step <= limit_step) t = std::max(t, seg.start_s + m.time_s);
  return t;
}

double file_age_s(const fs::path& file) {
  std::error_code ec;
  const auto m = fs::last_write_time(file, ec);
  if (ec) return -1;
  return std::chrono::duration<double>(fs::file_time_type::clock::now() - m).count();
}

}  // namespace

std::vector<JsonLine> read_jsonl(const fs::path& file) {
  const std::string text = read_input_file(file);
  std::vector<JsonLine> out;
  std::size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    ++line;
    const std::size_t nl = text.find('\n', pos);
    const bool complete = nl != std::string::npos;
    const std::string s = text.substr(pos, complete ? nl - pos : std::string::npos);
    pos = complete ? nl + 1 : text.size();
    const bool last = pos >= text.size();
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    // The writer is still on this line (or was killed on it): not a record yet.
    if (!complete) break;
    json j = json::parse(s, nullptr, false);
    if (j.is_discarded()) {
      if (last) break;
      throw InputError(fmt::format("{}:{}: not valid JSON: {}", file.string(), line,
                                   s.size() > 80 ? s.substr(0, 80) + "..." : s));
    }
    if (!j.is_object())
      throw InputError(fmt::format("{}:{}: expected a JSON object, got {}", file.string(), line,
                                   s.size() > 80 ? s.substr(0, 80) + "..." : s));
    out.push_back({line, std::move(j)});
  }
  return out;
}

std::string format_seconds(double s) {
  if (!(s >= 0)) return "-";
  return solver::format_duration(s);
}

namespace {

// One run directory read into a RunData, in the order its files build the picture: the batch's
// jobs and their metrics, the cluster, the plans, then the timeline replayed (every run of the
// directory appended its events), and what follows from them.
class RunReader {
 public:
  explicit RunReader(const fs::path& dir) : files_(dir) { run_.dir = dir; }

  RunData read() {
    check_directory();
    read_jobs();
    read_cluster();
    read_plans();
    if (fs::exists(files_.timeline_file())) replay_timeline();
    shift_plans();
    close_running_segments();
    summarize_jobs();
    label_ranks();
    estimate_etas();
    total_up();
    pick_best_job();
    note_freshness();
    return std::move(run_);
  }

 private:
  void check_directory() const {
    const fs::path& dir = files_.root();
    std::error_code ec;
    if (!fs::exists(dir, ec))
      throw InputError(fmt::format("{}: no such run directory", dir.string()));
    if (!fs::is_directory(dir, ec))
      throw InputError(fmt::format("{}: not a directory (give the run directory of `saturn run`)",
                                   dir.string()));
    if (!fs::exists(files_.workload_copy()))
      throw InputError(fmt::format(
          "{}: missing, so {} is not a run directory of `saturn run` (it holds workload.yaml, "
          "cluster.json, plans/, timeline.jsonl, jobs/)",
          files_.workload_copy().string(), dir.string()));
  }

  // The batch as it stands: its copy of the workload and the jobs `saturn submit` added.
  void read_jobs() {
    const Workload w = load_batch_workload(files_.root());
    run_.name = w.name;
    if (w.selection.enabled()) run_.rung_steps = w.selection.rung_steps();
    for (const auto& spec : w.jobs) {
      JobInfo j;
      j.id = spec.id;
      // A LoRA job says so beside its model: what it trains is what tells it from a full one.
      j.model = spec.model.lora.enabled()
                    ? fmt::format("{} + LoRA {}", spec.model_name, describe_lora(spec.model.lora))
                    : spec.model_name;
      j.lr = spec.train.optimizer.lr;
      j.batch_size = spec.train.batch_size;
      j.steps = spec.train.steps;
      j.metrics = read_metrics(RunDir::metrics_file(files_.job_dir(spec.id)));
      index_[j.id] = run_.jobs.size();
      run_.jobs.push_back(std::move(j));
    }
    open_.assign(run_.jobs.size(), nullptr);
    limit_.assign(run_.jobs.size(), kNoLimit);
  }

  JobInfo& job_at(const fs::path& file, int line, const std::string& id) {
    auto it = index_.find(id);
    if (it == index_.end())
      throw InputError(fmt::format("{}{}: job '{}' is not a job of {}", file.string(),
                                   line > 0 ? fmt::format(":{}", line) : "", id,
                                   files_.workload_copy().string()));
    return run_.jobs[it->second];
  }
  std::size_t index_of(const JobInfo& j) const {
    return static_cast<std::size_t>(&j - run_.jobs.data());
  }

  // Devices: cluster.json (the latest run's cluster) names each rank's node.
  void read_cluster() {
    const fs::path file = files_.cluster_file();
    if (!fs::exists(file)) return;
    const json c = read_json_file(file);
    const Where wc{file, 0, ""};
    const json& nodes = wc.need(c, "nodes");
    if (!nodes.is_array()) fail(file, "nodes: expected an array");
    int devices = 0;
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      const Where wn{file, 0, fmt::format("nodes[{}].", n)};
      const std::string name = wn.text(nodes[n], "name");
      devices += static_cast<int>(wn.integer(nodes[n], "devices"));
      if (nodes[n].contains("ranks"))
        for (int r : wn.ranks(nodes[n], "ranks")) node_of_rank_[r] = name;
    }
    run_.devices = devices;
  }

  // Plans, in order of their index (plan-NNN.json only: plan-NNN.json.tmp.<pid> is a write in
  // progress).
  void read_plans() {
    for (const auto& [k, f] : files_.plan_files()) run_.plans.push_back(read_plan(f, k));
    for (const auto& p : run_.plans)
      for (const auto& pj : p.jobs) {
        JobInfo& j = job_at(files_.root() / p.file, 0, pj.id);
        if (j.predicted_s < 0) j.predicted_s = pj.end_s - pj.start_s;
      }
  }

  void close(std::size_t j, double t, std::int64_t step, const std::string& end,
             const std::string& reason) {
    Segment* s = open_[j];
    if (s == nullptr) return;
    s->end_s = std::max(s->start_s, t);
    s->end_step = std::max(s->start_step, step);
    s->end = end;
    s->reason = reason;
    open_[j] = nullptr;
  }

  // A segment still open when its run ended or restarted was lost with the process.
  void lose(std::size_t j, double t) {
    if (open_[j] == nullptr) return;
    const double reached = std::min(t, reached_s(*open_[j], limit_[j], run_.jobs[j].metrics));
    std::int64_t step = open_[j]->start_step;
    for (const auto& m : run_.jobs[j].metrics)
      if (m.step > step && m.step <= limit_[j] && open_[j]->start_s + m.time_s <= reached + 1e-9)
        step = m.step;
    close(j, reached, step, "lost", "no report from its ranks (the run was killed?)");
    run_.jobs[j].status = "interrupted";
  }
  void close_lost(double t) {
    for (std::size_t j = 0; j < run_.jobs.size(); ++j) lose(j, t);
  }

  // For each job_start, the step the same job's next job_start resumed from (look-ahead).
  std::vector<std::int64_t> next_starts(const std::vector<JsonLine>& events) const {
    std::vector<std::int64_t> next(events.size(), kNoLimit);
    std::map<std::string, std::int64_t> later;
    for (std::size_t i = events.size(); i-- > 0;) {
      const json& e = events[i].value;
      const bool start = e.contains("event") && e["event"] == "job_start";
      if (!start || !e.contains("job") || !e["job"].is_string() || !e.contains("step") ||
          !e["step"].is_number_integer())
        continue;
      const std::string id = e["job"].get<std::string>();
      if (auto it = later.find(id); it != later.end()) next[i] = it->second;
      later[id] = e["step"].get<std::int64_t>();
    }
    return next;
  }

  void replay_timeline() {
    run_.started = true;
    const fs::path file = files_.timeline_file();
    const std::vector<JsonLine> events = read_jsonl(file);
    const std::vector<std::int64_t> next = next_starts(events);
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Where we{file, events[i].line, ""};
      const json& e = events[i].value;
      const std::string ev = we.text(e, "event");
      const double t = batch_time(ev, we, e);
      if (ev == "plan" || ev == "replan") on_plan(ev, we, e, t);
      if (ev == "job_start") on_job_start(we, e, t, next[i]);
      if (ev == "job_end" || ev == "failure" || ev == "job_stop") on_segment_end(ev, we, e, t);
      if (ev == "selection_stop" || ev == "early_stop" || ev == "cancel") on_settled(ev, we, e, t);
      if (ev == "submit" && e.contains("jobs") && e["jobs"].is_array())
        for (const auto& id : e["jobs"])
          if (id.is_string()) submitted_.push_back(id.get<std::string>());
      if (ev == "signal")
        run_.markers.push_back(
            {t, "signal",
             fmt::format("signal {}", e.contains("signal") ? we.integer(e, "signal") : 0), ""});
      if (ev == "run_end") on_run_end(we, e, t);
      // Other events (checkpoints, future kinds) do not change the picture.
    }
  }

  // An event's time on the batch's clock. A run killed outright (SIGKILL, a lost node) never
  // recorded its wall time, so the run that resumes it restarts the clock where the killed run
  // started: its events are shifted to begin where the killed run's segments got (by their
  // metrics), keeping batch time monotonic.
  double batch_time(const std::string& ev, const Where& we, const json& e) {
    double t = we.number(e, "t") + offset_;
    if (ev == "plan" && run_.runs > 0) {
      double reached = run_.now_s;
      for (std::size_t j = 0; j < run_.jobs.size(); ++j)
        if (open_[j] != nullptr)
          reached = std::max(reached, reached_s(*open_[j], limit_[j], run_.jobs[j].metrics));
      if (t < reached) {
        offset_ += reached - t;
        t = reached;
      }
    }
    if ((ev == "plan" || ev == "replan") && e.contains("plan"))
      plan_offset_[static_cast<int>(we.integer(e, "plan"))] = offset_;
    run_.now_s = std::max(run_.now_s, t);
    return t;
  }

  // "plan": the first plan of a run, so a new run of this directory; "replan": an adopted one.
  void on_plan(const std::string& ev, const Where& we, const json& e, double t) {
    if (ev == "plan") {
      close_lost(t);
      ++run_.runs;
      run_.ended = false;
      if (run_.runs > 1) run_.markers.push_back({t, "resume", "resumed", ""});
      return;
    }
    ++run_.replans;
    run_.markers.push_back(
        {t, "replan",
         fmt::format("plan {}: {}", e.contains("plan") ? we.integer(e, "plan") : -1,
                     we.text_or(e, "reason")),
         ""});
  }

  void on_job_start(const Where& we, const json& e, double t, std::int64_t next_start) {
    JobInfo& j = job_at(we.file, we.line, we.text(e, "job"));
    const std::size_t k = index_of(j);
    lose(k, t);  // an open segment here means its run restarted without a plan event
    Segment s;
    s.strategy = we.text(e, "strategy");
    if (e.contains("knobs") && e["knobs"].is_array())
      for (const auto& x : e["knobs"])
        if (x.is_string()) s.knobs.push_back(x.get<std::string>());
    s.ranks = we.ranks(e, "ranks");
    s.start_s = t;
    s.end_s = t;
    s.start_step = we.integer(e, "step");
    s.end_step = s.start_step;
    s.end = "running";
    j.segments.push_back(s);
    open_[k] = &j.segments.back();
    limit_[k] = next_start;
    j.status = "running";
  }

  void on_segment_end(const std::string& ev, const Where& we, const json& e, double t) {
    JobInfo& j = job_at(we.file, we.line, we.text(e, "job"));
    const std::size_t k = index_of(j);
    const std::int64_t step = e.contains("step") ? we.integer(e, "step") : 0;
    const std::string reason = we.text_or(e, "reason");
    if (open_[k] == nullptr)
      throw InputError(fmt::format("{}:{}: {} of job '{}' without its job_start", we.file.string(),
                                   we.line, ev, j.id));
    if (ev == "job_end") {
      close(k, t, step, "finished", "");
      j.status = "finished";
      if (e.contains("val_loss") && e["val_loss"].is_number())
        j.final_val_loss = e["val_loss"].get<double>();
    } else if (ev == "failure") {
      close(k, t, step, "failed", reason);
      j.status = "failed";
      j.reason = reason;
      run_.markers.push_back({t, "failure", "failed: " + j.id, j.id});
    } else {
      close(k, t, step, "stopped", reason);
      // Moved by a re-plan: waits for its new devices. By a signal: for --resume.
      j.status = reason.rfind("signal", 0) == 0 ? "stopped" : "pending";
    }
  }

  // Done as far as the batch is concerned: stopped by the workload's selection rule at a rung
  // (docs/workload.md, "selection"), by the job's early_stop rule, or cancelled.
  void on_settled(const std::string& ev, const Where& we, const json& e, double t) {
    JobInfo& j = job_at(we.file, we.line, we.text(e, "job"));
    j.stop_t = t;
    j.stop_step = e.contains("step") ? we.integer(e, "step") : 0;
    if (ev == "selection_stop") {
      j.status = "stopped";
      j.stopped_by = "selection";
      j.stop_rung = e.contains("rung") ? static_cast<int>(we.integer(e, "rung")) : 0;
      j.stop_label = fmt::format("rung {}", j.stop_rung);
      j.reason = fmt::format("stopped by selection at rung {} (step {})", j.stop_rung, j.stop_step);
    } else if (ev == "early_stop") {
      j.status = "stopped";
      j.stopped_by = "early_stop";
      const std::string rule = we.text_or(e, "rule");
      j.stop_label = rule.empty() ? "early stop" : rule;
      j.reason = fmt::format("stopped by early_stop ({}) at step {}", j.stop_label, j.stop_step);
    } else {
      j.status = "cancelled";
      j.reason = "cancelled (saturn cancel)";
      j.stopped_by = "cancel";
      j.stop_label = "cancelled";
    }
  }

  void on_run_end(const Where& we, const json& e, double t) {
    close_lost(t);
    run_.ended = true;
    run_.exit_code = static_cast<int>(we.integer(e, "exit_code"));
    for (auto& j : run_.jobs)
      if (j.status == "pending" || j.status == "running") j.status = "stopped";
  }

  // Plans in the batch time of their run; each is the adopted one until the next.
  void shift_plans() {
    for (auto& p : run_.plans) {
      double shift = 0;
      for (const auto& [k, o] : plan_offset_)
        if (k <= p.index) shift = o;
      p.created_s += shift;
      p.makespan_s += shift;
      p.lower_bound_s += shift;
      for (auto& pj : p.jobs) {
        pj.start_s += shift;
        pj.end_s += shift;
      }
    }
    for (std::size_t p = 0; p + 1 < run_.plans.size(); ++p)
      run_.plans[p].valid_until_s = run_.plans[p + 1].created_s;
  }

  // Segments still running: up to where their metrics got.
  void close_running_segments() {
    for (std::size_t j = 0; j < run_.jobs.size(); ++j)
      if (open_[j] != nullptr) {
        open_[j]->end_s = reached_s(*open_[j], limit_[j], run_.jobs[j].metrics);
        run_.now_s = std::max(run_.now_s, open_[j]->end_s);
      }
  }

  // Per job: progress, times, losses, and the ranks the batch used.
  void summarize_jobs() {
    for (const auto& p : run_.plans)
      for (const auto& pj : p.jobs) ranks_.insert(pj.ranks.begin(), pj.ranks.end());
    for (auto& j : run_.jobs) {
      for (const auto& s : j.segments) {
        ranks_.insert(s.ranks.begin(), s.ranks.end());
        j.actual_s += s.end_s - s.start_s;
        run_.busy_device_s += (s.end_s - s.start_s) * static_cast<double>(s.ranks.size());
        j.steps_done = std::max(j.steps_done, s.end_step);
      }
      if (!j.metrics.empty()) {
        j.steps_done = std::max(j.steps_done, j.metrics.back().step);
        j.tokens_per_s = j.metrics.back().tokens_per_s;
        for (auto it = j.metrics.rbegin(); it != j.metrics.rend(); ++it)
          if (std::isfinite(it->loss)) {
            j.last_loss = it->loss;
            break;
          }
        if (!std::isfinite(j.final_val_loss))
          for (auto it = j.metrics.rbegin(); it != j.metrics.rend(); ++it)
            if (std::isfinite(it->val_loss)) {
              j.final_val_loss = it->val_loss;
              break;
            }
      }
      if (j.status == "finished") j.steps_done = j.steps;
      j.step_time_s = recent_step_time(j);
    }
  }

  // Recent seconds per step: the newest stretch of metrics of the latest segment (0: unknown).
  static double recent_step_time(const JobInfo& j) {
    if (j.segments.empty()) return j.step_time_s;
    const Segment& s = j.segments.back();
    std::vector<const MetricPoint*> seg;
    for (const auto& m : j.metrics)
      if (m.step > s.start_step && (s.end == "running" || m.step <= s.end_step)) seg.push_back(&m);
    if (seg.size() >= 2) {
      const std::size_t first = seg.size() > 20 ? seg.size() - 20 : 0;
      const double dt = seg.back()->time_s - seg[first]->time_s;
      const double ds = static_cast<double>(seg.back()->step - seg[first]->step);
      if (dt > 0 && ds > 0) return dt / ds;
    } else if (seg.size() == 1 && seg[0]->time_s > 0) {
      return seg[0]->time_s / static_cast<double>(seg[0]->step - s.start_step);
    }
    return j.step_time_s;
  }

  void label_ranks() {
    for (int r : ranks_) {
      run_.ranks.push_back(r);
      auto it = node_of_rank_.find(r);
      run_.rank_labels.push_back(it == node_of_rank_.end() ? fmt::format("rank {}", r)
                                                           : fmt::format("{} r{}", it->second, r));
    }
    run_.devices = std::max(run_.devices, static_cast<int>(run_.ranks.size()));
  }

  // ETAs: running jobs at their measured pace; waiting ones where the latest plan puts them.
  void estimate_etas() {
    const PlanInfo* latest = run_.plans.empty() ? nullptr : &run_.plans.back();
    run_.eta_s = run_.ended ? 0.0 : -1.0;
    for (auto& j : run_.jobs) {
      if (j.status == "finished" || j.status == "failed") {
        j.eta_s = 0;
        continue;
      }
      const double left = static_cast<double>(std::max<std::int64_t>(0, j.steps - j.steps_done));
      if (j.status == "running" && j.step_time_s > 0) {
        j.eta_s = left * j.step_time_s;
      } else if (latest != nullptr && !run_.ended) {
        for (const auto& pj : latest->jobs)
          if (pj.id == j.id) j.eta_s = std::max(pj.end_s - run_.now_s, pj.end_s - pj.start_s);
      }
      if (!run_.ended && j.eta_s >= 0) run_.eta_s = std::max(run_.eta_s, j.eta_s);
    }
  }

  // The makespan, whether the batch is complete, the prediction to compare it with (plan 0
  // knew nothing of jobs submitted later, which the measured makespan includes: the plan that
  // first placed the last of them predicts), and the devices' utilisation.
  void total_up() {
    run_.makespan_s = run_.now_s;
    run_.complete = run_.ended;
    for (const auto& j : run_.jobs)
      if (j.status != "finished" && j.status != "failed" && j.stopped_by.empty())
        run_.complete = false;  // stopped by selection or early_stop, or cancelled: done too
    if (!run_.plans.empty()) {
      const PlanInfo* predicting = &run_.plans.front();
      for (const auto& id : submitted_)
        for (const auto& p : run_.plans)
          if (std::any_of(p.jobs.begin(), p.jobs.end(),
                          [&](const PlannedJob& pj) { return pj.id == id; })) {
            if (p.index > predicting->index) predicting = &p;
            break;
          }
      run_.predicted_makespan_s = predicting->makespan_s;
      run_.predicted_plan = predicting->index;
      run_.lower_bound_s = run_.plans.front().lower_bound_s;
    }
    if (run_.devices > 0 && run_.makespan_s > 0)
      run_.utilisation = run_.busy_device_s / (static_cast<double>(run_.devices) * run_.makespan_s);
  }

  // The best job: lowest final val loss among finished jobs, else the lowest so far.
  void pick_best_job() {
    double best = INFINITY;
    for (int pass = 0; pass < 2 && run_.best_job.empty(); ++pass) {
      for (const auto& j : run_.jobs) {
        if (pass == 0 && j.status != "finished") continue;
        if (std::isfinite(j.final_val_loss) && j.final_val_loss < best) {
          best = j.final_val_loss;
          run_.best_job = j.id;
          run_.best_is_final = pass == 0;
        }
      }
    }
    for (auto& j : run_.jobs) j.best = j.id == run_.best_job;
  }

  // How fresh the files are: tells a live run from one that stopped without a run_end.
  void note_freshness() {
    double age = file_age_s(files_.timeline_file());
    for (const auto& j : run_.jobs) {
      const double a = file_age_s(RunDir::metrics_file(files_.job_dir(j.id)));
      if (a >= 0 && (age < 0 || a < age)) age = a;
    }
    run_.seconds_since_update = age;
  }

  RunDir files_;
  RunData run_;
  std::map<std::string, std::size_t> index_;  // job id -> run_.jobs
  std::map<int, std::string> node_of_rank_;
  std::vector<Segment*> open_;          // per job: its segment still open in the replay
  std::vector<std::int64_t> limit_;     // of the open segment's metrics
  double offset_ = 0;                   // the shift of the current run's events
  std::map<int, double> plan_offset_;   // plan index -> the shift of its run
  std::vector<std::string> submitted_;  // jobs `saturn submit` added (submit events)
  std::set<int> ranks_;
};

}  // namespace

RunData read_run(const fs::path& dir) {
  return RunReader(dir).read();
}

}  // namespace saturn::report
