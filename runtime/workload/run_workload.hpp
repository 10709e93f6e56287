// A batch's workload as it stands in its run directory: RUN_DIR/workload.yaml (the run's copy)
// plus every submission (`saturn submit`) rank 0 accepted, kept one file each in
// RUN_DIR/submitted, named in the order they were accepted. `saturn cancel`, `submit`, `status`,
// `report` and `run --resume` read it so; the coordinator writes the accepted submissions.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "runtime/workload/workload.hpp"

namespace saturn {

std::filesystem::path submitted_dir(const std::filesystem::path& run_dir);

// The name an accepted submission is kept under in RUN_DIR/submitted: its place in the order
// of acceptance (1, 2, ...), then the name of the spool request it came in.
std::string accepted_name(std::size_t order, const std::string& request_name);

// Whether the spool request `request_name` is already kept in RUN_DIR/submitted.
bool submission_recorded(const std::filesystem::path& run_dir, const std::string& request_name);

// RUN_DIR/submitted/NAME: {"source", "yaml", "jobs"} (the ids it added), written atomically and
// durably (fsync) before its jobs join the batch, so that a resumed run has every job.
// Throws IoError.
void record_accepted_submission(const std::filesystem::path& run_dir, const std::string& name,
                                const Submission& submission, const std::vector<std::string>& ids);

// The accepted submissions in the order they were accepted. Throws InputError naming a file
// that cannot be read.
std::vector<Submission> accepted_submissions(const std::filesystem::path& run_dir);

// Whether run_dir holds a copy of a workload (RUN_DIR/workload.yaml) whose text differs from
// the text `w` was loaded from: a resume would run that copy, not `w`. False when there is no
// copy. Throws IoError when the copy cannot be read.
bool run_copy_differs(const std::filesystem::path& run_dir, const Workload& w);

// The workload the batch in run_dir started with: its copy of the workload with the data files
// and model directories run_state.json recorded (absolute; the copy's relative paths meant the
// original file's directory), data files not checked.
Workload load_batch_base(const std::filesystem::path& run_dir);

// The batch as it stands: load_batch_base with the accepted submissions' jobs after its own.
Workload load_batch_workload(const std::filesystem::path& run_dir);

}  // namespace saturn
