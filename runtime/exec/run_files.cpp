#include "runtime/exec/run_files.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/byte_hash.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/log.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::exec {

namespace fs = std::filesystem;

void write_run_file(const fs::path& path, const std::string& text) {
  try {
    write_file_atomic(path, text);
  } catch (const IoError& e) {
    log::warn("{}", e.what());
  }
}

RunFiles::RunFiles(const CoordinatorSetup& setup) : setup_(&setup) {
  timeline_.open(RunDir(setup.run_dir).timeline_file(), std::ios::app);
}

void RunFiles::event(nlohmann::json e, double t) {
  e["t"] = t;
  timeline_ << e.dump() << '\n';
  timeline_.flush();
}

void RunFiles::read_history(JobTable& table) const {
  std::istringstream in(read_input_file(RunDir(setup_->run_dir).timeline_file()));
  std::string line;
  double last_t = 0;
  auto& jobs = table.jobs;
  // Segments still open when their run ended had no report: the run was killed (SIGKILL, a
  // lost node, an MPI abort) with them, by its last event.
  auto close_killed = [&] {
    for (auto& js : jobs)
      if (!js.past_segments.empty() && js.past_segments.back()["end_s"].is_null()) {
        auto& seg = js.past_segments.back();
        seg["end_s"] = std::max(last_t, seg["start_s"].get<double>());
        seg["status"] = "interrupted";
      }
  };
  while (std::getline(in, line)) {
    nlohmann::json e;
    try {
      e = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;  // the half-written last line of a run that was killed
    }
    const std::string kind = e.value("event", "");
    if (kind == "plan") close_killed();  // each run's first event: the previous run is over
    last_t = std::max(last_t, e.value("t", 0.0));
    JobState* js = e.contains("job") ? table.find(e["job"].get<std::string>()) : nullptr;
    if (js == nullptr) continue;
    if (kind == "job_start") {
      js->past_segments.push_back({{"strategy", e.value("strategy", "")},
                                   {"knobs", e.value("knobs", nlohmann::json::array())},
                                   {"devices", e.value("devices", 0)},
                                   {"ranks", e.value("ranks", nlohmann::json::array())},
                                   {"start_s", e.value("t", 0.0)},
                                   {"end_s", nullptr},
                                   {"start_step", e.value("step", 0)},
                                   {"end_step", nullptr},
                                   {"status", ""}});
      continue;
    }
    if (js->past_segments.empty()) continue;
    auto& seg = js->past_segments.back();
    if (kind == "job_end" || kind == "failure" || kind == "job_stop") {
      seg["end_s"] = e.value("t", 0.0);
      seg["end_step"] = e.value("step", 0);
      seg["status"] = kind == "job_end" ? "finished" : kind == "failure" ? "failed" : "stopped";
      if (e.contains("parts")) seg["parts"] = e["parts"];
      if (kind == "job_end" && e.contains("val_loss")) js->val_loss = e["val_loss"].get<double>();
    }
  }
  close_killed();
  // What a killed segment kept is its job's checkpoint at the time: the step the job's next
  // segment started from, or for its last one the newest checkpoint this run resumes from.
  // A failed or stopped segment reports the step its job had reported when the outcome
  // came; a job whose rank was killed can fail (its peer gone) before its last progress
  // reached the coordinator, so that step may be stale. Its next segment started from a
  // checkpoint this segment wrote, so the job got at least that far.
  for (auto& js : jobs)
    for (std::size_t k = 0; k < js.past_segments.size(); ++k) {
      auto& seg = js.past_segments[k];
      const bool has_next = k + 1 < js.past_segments.size();
      if (seg["status"] == "interrupted") {
        seg["end_step"] =
            has_next ? js.past_segments[k + 1].value("start_step", js.steps_done) : js.steps_done;
      } else if (has_next && seg["status"] != "finished" && seg["end_step"].is_number()) {
        const std::int64_t next = js.past_segments[k + 1].value("start_step", std::int64_t{0});
        if (seg["end_step"].get<std::int64_t>() < next) seg["end_step"] = next;
      }
    }
}

void RunFiles::write_plan(int index, const nlohmann::json& plan) {
  const RunDir run(setup_->run_dir);
  fs::create_directories(run.plans_dir());
  write_run_file(run.plan_file(index), plan.dump(2));
}

// What `--resume` needs besides checkpoints: wall time so far, the next plan number, the data
// files as absolute paths (the run directory's workload copy has relative ones), and the
// memory per rank the run was given.
void RunFiles::write_run_state(double elapsed_s, int next_plan, const nlohmann::json& extra) {
  const auto& w = *setup_->workload;
  // Models that start from a Hugging Face directory (`from`), absolute, by model name: every
  // one the workload defines (a job `saturn submit` adds later may use it) and those of the
  // jobs (submitted models included).
  nlohmann::json model_dirs = nlohmann::json::object();
  for (const auto& [name, dir] : w.pretrained_dirs) model_dirs[name] = fs::absolute(dir).string();
  for (const auto& j : w.jobs)
    if (!j.init_from.empty()) model_dirs[j.model_name] = fs::absolute(j.init_from).string();
  // Their files' checksums, for --resume to refuse a directory changed meanwhile.
  nlohmann::json checksums = nlohmann::json::object();
  for (const auto& [name, dir] : model_dirs.items()) {
    auto known = model_checksums_.find(name);
    if (known == model_checksums_.end()) {
      const auto given = w.pretrained_checksums.find(name);
      if (given != w.pretrained_checksums.end()) {
        known = model_checksums_.emplace(name, given->second).first;
      } else {
        try {
          const fs::path d = dir.get<std::string>();
          known =
              model_checksums_.emplace(name, hf::scan_model_dir(d, hf::read_config(d).model).files)
                  .first;
        } catch (const Error& e) {
          // A job of it fails when it loads the weights, naming the same problem.
          log::warn("models.{}.from: {} (not recorded for --resume)", name, e.what());
          continue;
        }
      }
    }
    for (const auto& [file, sum] : known->second) checksums[name][file] = format_hash(sum);
  }
  nlohmann::json state = {{"elapsed_s", elapsed_s},
                          {"next_plan", next_plan},
                          {"train_data", fs::absolute(w.train_data).string()},
                          {"val_data", fs::absolute(w.val_data).string()},
                          {"model_dirs", model_dirs},
                          {"model_checksums", checksums},
                          {"device_memory_bytes", setup_->resources.device_bytes},
                          {"host_memory_bytes", setup_->resources.host_bytes}};
  for (const auto& [k, v] : extra.items()) state[k] = v;
  write_run_file(RunDir(setup_->run_dir).run_state_file(), state.dump(2));
}

nlohmann::json RunFiles::parts_json(const profile::RunParts& p) {
  return {{"start_s", p.start_s},
          {"steps_s", p.steps_s},
          {"evals_s", p.evals_s},
          {"checkpoints_s", p.checkpoints_s}};
}

namespace {
profile::RunParts parts_from_json(const nlohmann::json& j) {
  return {j.value("start_s", 0.0), j.value("steps_s", 0.0), j.value("evals_s", 0.0),
          j.value("checkpoints_s", 0.0)};
}
}  // namespace

nlohmann::json RunFiles::job_entry(const JobTable& table, const JobState& js, double now) const {
  nlohmann::json segs = js.past_segments;
  double actual = 0;
  // By kind: this run's segments, and earlier runs' that their timeline recorded.
  profile::RunParts actual_parts;
  for (const auto& s : segs) {
    actual += s["end_s"].get<double>() - s["start_s"].get<double>();
    if (s.contains("parts")) actual_parts += parts_from_json(s["parts"]);
  }
  // Each segment of this run as predicted when it was launched: its steps at the costs of its
  // configuration then (a job a re-plan moved was not predicted by its first plan's figure).
  double at_launch = 0;
  for (const auto& s : js.segments) {
    const auto& d = table.detail(js, s.config);
    const double end = s.end_s >= 0 ? s.end_s : now;
    actual += end - s.start_s;
    const profile::RunParts parts = s.parts(now);
    actual_parts += parts;
    const profile::RunParts predicted = profile::run_parts(
        js.spec->train, s.start_step, s.ended() ? s.end_step : js.steps_done, s.costs_at_launch);
    at_launch += predicted.total();
    segs.push_back({{"strategy", d.strategy},
                    {"knobs", d.knobs},
                    {"devices", static_cast<int>(s.ranks.size())},
                    {"ranks", s.ranks},
                    {"start_s", s.start_s},
                    {"end_s", end},
                    {"start_step", s.start_step},
                    {"end_step", s.end_step},
                    {"status", s.end_status},
                    {"parts", parts_json(parts)},
                    {"predicted_parts", parts_json(predicted)}});
  }
  nlohmann::json j = {{"id", js.spec->id},
                      {"model", js.spec->model_name},
                      {"lr", js.spec->train.optimizer.lr},
                      {"batch_size", js.spec->train.batch_size},
                      {"steps", js.spec->train.steps},
                      {"steps_done", js.steps_done},
                      {"status", status_name(js.status)},
                      {"segments", segs},
                      {"predicted_s", js.predicted_s},
                      {"actual_s", actual},
                      {"predicted_parts", parts_json(js.predicted_parts)},
                      {"actual_parts", parts_json(actual_parts)},
                      {"predicted_at_launch_s", at_launch}};
  if (!js.reason.empty()) j["reason"] = js.reason;
  if (!std::isnan(js.val_loss)) j["final_val_loss"] = js.val_loss;
  // A job `saturn submit` added with data of its own: the files it trains and evaluates on.
  if (!js.spec->train_data.empty())
    j["data"] = {{"train", js.spec->train_data.string()}, {"val", js.spec->val_data.string()}};
  return j;
}

void RunFiles::write_summary_file(const JobTable& table, const BatchFacts& facts,
                                  nlohmann::json jobs) {
  double best = INFINITY;
  std::string best_id;
  for (const auto& js : table.jobs)
    if (!std::isnan(js.val_loss) && js.status == JobStatus::kFinished && js.val_loss < best) {
      best = js.val_loss;
      best_id = js.spec->id;
    }
  const double makespan = facts.makespan_s;
  nlohmann::json s = {{"workload", setup_->workload->name},
                      {"policy", setup_->policy},
                      {"replan", setup_->replan},
                      {"makespan_s", makespan},
                      {"predicted_makespan_s", facts.predicted_makespan_s},
                      {"solve_time_s", facts.solve_time_s},
                      // Not part of the makespan: the batch's clock starts at the first plan.
                      {"profiling_s", setup_->profiling_s},
                      {"predicted_baselines_s", facts.predicted_baselines},
                      {"prediction_error",
                       facts.predicted_makespan_s > 0
                           ? (makespan - facts.predicted_makespan_s) / facts.predicted_makespan_s
                           : 0.0},
                      {"lower_bound_s", facts.lower_bound_s},
                      {"exit_code", facts.exit_code},
                      {"plans", facts.plans},
                      {"devices", setup_->ranks.cluster.total_devices()},
                      {"jobs", std::move(jobs)}};
  if (!best_id.empty()) s["best_job"] = {{"id", best_id}, {"val_loss", best}};
  for (const auto& [k, v] : facts.extra.items()) s[k] = v;
  write_run_file(RunDir(setup_->run_dir).summary_file(), s.dump(2));
}

}  // namespace saturn::exec
