// `saturn run --resume`: what an interrupted run of a directory left (jobs finished, steps done,
// wall time, plans, selection decisions, cancels, early stops), and the checks that refuse a
// resume before any rank trains: checkpoints of another job or past its steps, a workload that
// is not the run's, Hugging Face models that changed since the run started.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/workload/workload.hpp"

namespace saturn::exec {

// What an earlier, interrupted run of this directory left: jobs finished (final.h5), steps
// done (newest checkpoint's step), wall time spent, plans written.
struct ResumeState {
  std::vector<std::int64_t> steps_done;
  std::vector<bool> finished;
  double elapsed_s = 0;
  int next_plan = 0;
  nlohmann::json selection;            // run_state.json's "selection" (null: none)
  std::vector<std::string> cancelled;  // run_state.json's "cancelled"
  nlohmann::json early_stopped;        // run_state.json's "early_stopped" (null: none)
  // Per job: it will not run again (stopped by its early_stop or by selection, cancelled, or
  // failed and withdrawn from selection), so it is neither profiled nor planned.
  std::vector<bool> settled;
};

// What the interrupted run recorded that the workload's loading needs (run_state.json): the
// data files and `from:` directories as absolute paths (the run directory's copy of the workload
// has them relative to the original's directory), the memory per rank it was given. nullopt when
// the directory holds no usable record (none, or one written before these were recorded).
struct RecordedRun {
  nlohmann::json state;  // the whole file
  std::filesystem::path train_data, val_data;
  std::map<std::string, std::filesystem::path> model_dirs;
};
std::optional<RecordedRun> read_recorded_run(const std::filesystem::path& run_dir);

// InputError (exit 2, file and field) for a malformed selection or early-stop record.
ResumeState read_resume_state(const Workload& w, const std::filesystem::path& run_dir);

// --resume: a job whose checkpoints are another job's, or past its steps, cannot continue from
// them. Rank 0, on MPI_COMM_SELF.
void check_resumable(const Workload& w, const std::filesystem::path& run_dir);

// --resume: the Hugging Face models the run started from (`from:`) must be as they were
// (run_state.json's checksums); the verified checksums go into w.pretrained_checksums.
void check_models_unchanged(const RecordedRun& recorded, const std::filesystem::path& run_dir,
                            Workload& w);

// A WORKLOAD given with --resume must be the run directory's copy of it.
void check_resumes_its_workload(const Workload& w, const std::filesystem::path& run_dir);

}  // namespace saturn::exec
