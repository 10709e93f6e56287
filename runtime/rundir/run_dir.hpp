// A run directory (docs/design.md, "Run directory"): the one place the names of its files are
// spelled, and the reading and writing of the files that more than one command touches. Every
// command and module that opens something in a run directory goes through this type: the
// executor and the coordinator, `saturn status`, `report`, `submit`, `cancel` and `sbatch`.
//
//   workload.yaml  cluster.json  profiles.h5  run.lock  run_state.json  timeline.jsonl
//   plans/plan-000.json ...  summary.json  report.html  spool/{,done/,rejected/}  submitted/
//   jobs/<id>/metrics.jsonl  jobs/<id>/checkpoints/ ...  jobs/<id>/final.h5  jobs/<id>/hf/
//
// The checkpoint files of a job directory are the checkpoint module's (checkpoint/store.hpp).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace saturn {

class RunDir {
 public:
  explicit RunDir(std::filesystem::path root) : root_(std::move(root)) {}
  // runs/<workload name>: where a run goes unless told otherwise.
  static RunDir default_for(const std::string& workload_name);

  const std::filesystem::path& root() const { return root_; }

  std::filesystem::path workload_copy() const;  // the text the run parsed
  std::filesystem::path cluster_file() const;
  std::filesystem::path profile_store() const;  // unless the run was given another
  std::filesystem::path lock_file() const;
  std::filesystem::path run_state_file() const;
  std::filesystem::path timeline_file() const;
  std::filesystem::path plans_dir() const;
  std::filesystem::path plan_file(int index) const;
  std::filesystem::path summary_file() const;
  std::filesystem::path report_file() const;
  std::filesystem::path spool_dir() const;  // requests of `saturn submit` and `cancel`
  std::filesystem::path spool_done_dir() const;
  std::filesystem::path spool_rejected_dir() const;
  std::filesystem::path submitted_dir() const;  // accepted submissions, in order
  std::filesystem::path jobs_dir() const;
  std::filesystem::path job_dir(const std::string& job_id) const;
  static std::filesystem::path metrics_file(const std::filesystem::path& job_dir);
  static std::filesystem::path hf_export_dir(const std::filesystem::path& job_dir);
  // A LoRA job's adapters for PEFT (`export: peft`).
  static std::filesystem::path peft_export_dir(const std::filesystem::path& job_dir);

  // The entries whose presence means a run started here (what a requeued batch script tests
  // before it passes --resume).
  static const std::vector<std::string>& started_entries();

  // A run reached its first plan here (the timeline exists).
  bool holds_run() const;
  // A start left the run's copy of the workload or its jobs/, planned or not.
  bool holds_start() const;

  // The plan files, by index, in order.
  std::vector<std::pair<int, std::filesystem::path>> plan_files() const;

  // run_state.json (what --resume needs besides checkpoints): nullopt when there is none; a
  // discarded value (is_discarded()) when it is not JSON; InputError naming it when it is not a
  // regular file.
  std::optional<nlohmann::json> read_run_state() const;
  // The copy of the workload, as written (InputError when it is not a regular file).
  std::string read_workload_copy() const;
  // Written to a temporary name and renamed (fsynced: a resume depends on it).
  void write_workload_copy(std::string_view text) const;

 private:
  std::filesystem::path root_;
};

}  // namespace saturn
