// The run directory's files the coordinator keeps: timeline.jsonl (every event, appended),
// plans/plan-NNN.json, run_state.json (what --resume needs besides checkpoints) and
// summary.json (the whole batch, earlier interrupted runs included). Readers (saturn status,
// report) poll them while the run goes on, so each is replaced atomically.
#pragma once

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "runtime/exec/job_table.hpp"

namespace saturn::exec {

// What summary.json says about the batch besides its jobs.
struct BatchFacts {
  double makespan_s = 0;
  double predicted_makespan_s = 0;
  double solve_time_s = 0;
  double lower_bound_s = 0;
  nlohmann::json predicted_baselines = nlohmann::json::object();
  int plans = 0;
  int exit_code = 0;
  nlohmann::json extra = nlohmann::json::object();  // further top-level keys
};

class RunFiles {
 public:
  explicit RunFiles(const CoordinatorSetup& setup);

  // Appends one event to timeline.jsonl at batch time t.
  void event(nlohmann::json e, double t);
  // On resume: what earlier runs of this directory did (from timeline.jsonl), so that
  // summary.json covers the whole batch (every segment, the val loss of jobs that finished
  // before) and not only this run.
  void read_history(JobTable& table) const;
  void write_plan(int index, const nlohmann::json& plan);
  // `extra`: keys the coordinator's parts add (an object; merged at the top level).
  void write_run_state(double elapsed_s, int next_plan,
                       const nlohmann::json& extra = nlohmann::json::object());
  // `job_extra(js)`: keys added to each job's entry (an object, possibly empty).
  template <class JobExtra>
  void write_summary(const JobTable& table, const BatchFacts& facts, double now,
                     JobExtra&& job_extra) {
    nlohmann::json jobs = nlohmann::json::array();
    for (const auto& js : table.jobs) {
      nlohmann::json j = job_entry(table, js, now);
      const nlohmann::json extra = job_extra(js);  // alive while its items are read
      for (const auto& [k, v] : extra.items()) j[k] = v;
      jobs.push_back(std::move(j));
    }
    write_summary_file(table, facts, std::move(jobs));
  }

  // A job's or segment's time by kind, as summary.json and timeline.jsonl write it.
  static nlohmann::json parts_json(const profile::RunParts& p);

 private:
  nlohmann::json job_entry(const JobTable& table, const JobState& js, double now) const;
  void write_summary_file(const JobTable& table, const BatchFacts& facts, nlohmann::json jobs);

  const CoordinatorSetup* setup_;
  std::ofstream timeline_;
  // run_state.json's "model_checksums": the workload's (computed when it was loaded), and those
  // of models that jobs `saturn submit` added brought, computed when first recorded.
  std::map<std::string, std::map<std::string, std::uint64_t>> model_checksums_;
};

// Writes `text` to `path` atomically; a failure is logged and the batch goes on (its
// checkpoints, not these files, hold the work).
void write_run_file(const std::filesystem::path& path, const std::string& text);

}  // namespace saturn::exec
