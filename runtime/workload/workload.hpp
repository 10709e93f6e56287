// The workload file (DESIGN.md "Workload file (YAML)"): the batch of jobs to train, their data,
// and what the planner may use. load_workload parses and validates it completely, expanding
// sweeps into jobs, so that every mistake is reported before any rank trains.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"

namespace saturn {

// One job of the batch: a model trained with one set of hyper-parameters.
struct JobSpec {
  std::string id;          // unique in the workload; usable as a directory name
  std::string model_name;  // key in the workload's `models:`
  ModelConfig model;       // model.max_seq_len == train.seq_len
  TrainConfig train;
};

struct IntrospectionSettings {
  double interval_s = 600;  // re-plan at least this often (seconds)
  double threshold = 0.05;  // adopt a new plan only if it is this much (fraction) better
};

struct SolverSettings {
  std::string backend = "glpk";  // glpk | cbc
  double time_limit_s = 60;
  IntrospectionSettings introspection;
};

struct Workload {
  std::string name;                  // `name:`, or the file's stem
  std::filesystem::path source;      // the YAML file, as given
  std::filesystem::path train_data;  // absolute, resolved against the YAML file's directory
  std::filesystem::path val_data;
  std::vector<JobSpec> jobs;            // in file order; a sweep expands in place
  std::vector<std::string> strategies;  // allowed; default: all of known_strategies()
  std::string cluster = "auto";         // "auto" or a --cluster SPEC, kept as written
  SolverSettings solver;
};

struct LoadOptions {
  // Check that the data files exist (their token counts are checked by the loader). Off for
  // tools that only plan, e.g. on a login node without the data.
  bool check_data_files = true;
};

// Parses and validates a workload file. Every error is an InputError whose message reads
// "FILE:LINE:COL: field: what is wrong (what is valid)", lines and columns 1-based.
Workload load_workload(const std::filesystem::path& path, const LoadOptions& options = {});
// The same for YAML text that stands for the file `source` (relative data paths resolve
// against source's directory).
Workload parse_workload(const std::string& yaml, const std::filesystem::path& source,
                        const LoadOptions& options = {});

// The job with this id; InputError listing the valid ids (and the closest one) otherwise.
const JobSpec& find_job(const Workload& workload, const std::string& id);

// Strategy names a workload may list: ddp, fsdp, pipeline, tensor, offload, ddp+pipeline,
// ddp+tensor.
const std::vector<std::string>& known_strategies();

// Compact, exact number text for job ids: 0.0003 -> "3e-4", 0.001 -> "1e-3", 0.05 -> "0.05",
// 1 -> "1". Values below 0.01 (or from 1e6) use the shortest scientific form.
std::string compact_number(double value);

// The id a job gets when it has no `name:`: MODEL-lrLR-bsBATCH, e.g. "small-lr3e-4-bs16", then
// "-KEYVALUE" for every other swept key (see docs/workload.md for the key abbreviations).
std::string default_job_id(const std::string& model_name, double lr, std::int64_t batch_size);

}  // namespace saturn
