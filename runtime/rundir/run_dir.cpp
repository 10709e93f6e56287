#include "runtime/rundir/run_dir.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/files.hpp"

namespace saturn {

namespace fs = std::filesystem;

RunDir RunDir::default_for(const std::string& workload_name) {
  return RunDir(fs::path("runs") / workload_name);
}

fs::path RunDir::workload_copy() const {
  return root_ / "workload.yaml";
}
fs::path RunDir::cluster_file() const {
  return root_ / "cluster.json";
}
fs::path RunDir::profile_store() const {
  return root_ / "profiles.h5";
}
fs::path RunDir::lock_file() const {
  return root_ / "run.lock";
}
fs::path RunDir::run_state_file() const {
  return root_ / "run_state.json";
}
fs::path RunDir::timeline_file() const {
  return root_ / "timeline.jsonl";
}
fs::path RunDir::plans_dir() const {
  return root_ / "plans";
}
fs::path RunDir::plan_file(int index) const {
  return plans_dir() / fmt::format("plan-{:03}.json", index);
}
fs::path RunDir::summary_file() const {
  return root_ / "summary.json";
}
fs::path RunDir::report_file() const {
  return root_ / "report.html";
}
fs::path RunDir::spool_dir() const {
  return root_ / "spool";
}
fs::path RunDir::spool_done_dir() const {
  return spool_dir() / "done";
}
fs::path RunDir::spool_rejected_dir() const {
  return spool_dir() / "rejected";
}
fs::path RunDir::submitted_dir() const {
  return root_ / "submitted";
}
fs::path RunDir::jobs_dir() const {
  return root_ / "jobs";
}
fs::path RunDir::job_dir(const std::string& job_id) const {
  return jobs_dir() / job_id;
}
fs::path RunDir::metrics_file(const fs::path& job_dir) {
  return job_dir / "metrics.jsonl";
}
fs::path RunDir::hf_export_dir(const fs::path& job_dir) {
  return job_dir / "hf";
}
fs::path RunDir::peft_export_dir(const fs::path& job_dir) {
  return job_dir / "peft";
}

const std::vector<std::string>& RunDir::started_entries() {
  // Relative to the root, as the Slurm script tests them ([ -e "$RUN_DIR/<entry>" ]).
  static const std::vector<std::string> entries = [] {
    const RunDir any("");
    return std::vector<std::string>{any.timeline_file().string(), any.plans_dir().string(),
                                    any.jobs_dir().string()};
  }();
  return entries;
}

bool RunDir::holds_run() const {
  std::error_code ec;
  return fs::exists(timeline_file(), ec);
}

bool RunDir::holds_start() const {
  std::error_code ec;
  return fs::exists(workload_copy(), ec) || fs::is_directory(jobs_dir(), ec);
}

std::vector<std::pair<int, fs::path>> RunDir::plan_files() const {
  // One file per index (plan-1.json and plan-001.json are one plan); a plans directory that
  // cannot be listed throws (filesystem_error names it) rather than reading as "no plans".
  std::map<int, fs::path> files;
  if (fs::is_directory(plans_dir()))
    for (const auto& e : fs::directory_iterator(plans_dir())) {
      const std::string f = e.path().filename().string();
      int k = -1;
      if (f.size() > 10 && f.rfind("plan-", 0) == 0 && f.substr(f.size() - 5) == ".json" &&
          std::sscanf(f.c_str(), "plan-%d.json", &k) == 1)
        files[k] = e.path();
    }
  return {files.begin(), files.end()};
}

std::optional<nlohmann::json> RunDir::read_run_state() const {
  const fs::path file = run_state_file();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(file, ec))) return std::nullopt;
  return nlohmann::json::parse(read_input_file(file), nullptr, false);
}

std::string RunDir::read_workload_copy() const {
  return read_input_file(workload_copy());
}

void RunDir::write_workload_copy(std::string_view text) const {
  write_file_atomic(workload_copy(), text, Durability::kFsync);
}

}  // namespace saturn
