// The workload file (DESIGN.md "Workload file (YAML)"): the batch of jobs to train, their data,
// and what the planner may use. load_workload parses and validates it completely, expanding
// sweeps into jobs, so that every mistake is reported before any rank trains.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"

namespace saturn {

// The documented limits of a workload (docs/workload.md, "Limits"): wide enough for any real
// batch, narrow enough that every size the runtime derives from them (tokens per step, bytes of
// a batch, a job's token count, ids as directory names) fits its type and is checked before any
// rank trains.
namespace limits {
inline constexpr std::size_t kFileBytes = 4 << 20;  // the workload file itself
inline constexpr std::size_t kStringBytes = 4096;   // any string (paths: PATH_MAX)
inline constexpr std::size_t kNameBytes = 100;      // workload, model and job names
inline constexpr std::size_t kJobIdBytes = 200;     // job ids, also generated ones (NAME_MAX 255)
inline constexpr std::int64_t kJobs = 10000;        // jobs in a workload, sweeps expanded
inline constexpr std::int64_t kBatchSize = 1 << 20;
inline constexpr std::int64_t kSeqLen = 1 << 16;
inline constexpr std::int64_t kBatchTokens = 1 << 24;  // batch_size x seq_len
inline constexpr std::int64_t kEvalBatches = 100000;
inline constexpr std::int64_t kEvalTokens = 1 << 24;  // validation rows x seq_len per evaluation
inline constexpr std::int64_t kSteps = 1000000000;    // also eval_every, checkpoint_every, warmup
inline constexpr double kJobTokens = 1e15;            // steps x batch_size x seq_len
// The model's own limits (model_limits, config.hpp): the same however a shape arrives.
inline constexpr std::int64_t kLayers = model_limits::kLayers;
inline constexpr std::int64_t kDModel = model_limits::kDModel;
inline constexpr std::int64_t kDff = model_limits::kDff;
inline constexpr std::int64_t kVocab = model_limits::kVocab;
inline constexpr double kParameters = model_limits::kParameters;  // per model
}  // namespace limits

// One job of the batch: a model trained with one set of hyper-parameters.
struct JobSpec {
  std::string id;          // unique in the workload; usable as a directory name
  std::string model_name;  // key in the workload's `models:`
  // model.max_seq_len == train.seq_len, except for a model from a Hugging Face directory:
  // its position count (n_positions / max_position_embeddings, >= seq_len).
  ModelConfig model;
  // The Hugging Face model directory whose weights the job starts from (models.NAME.from);
  // empty: the canonical random initialisation.
  std::filesystem::path init_from;
  TrainConfig train;
  // The job's own token files (absolute), from a `saturn submit` that brought `data:`; empty:
  // the workload's train_data and val_data.
  std::filesystem::path train_data, val_data;
  // "FILE:LINE:COL: jobs[i]" (or jobs[i].sweep) of the entry that defines it: errors found
  // after validation (e.g. a job that fits no configuration) start with it.
  std::string where;
};

struct IntrospectionSettings {
  double interval_s = 600;  // re-plan at least this often (seconds)
  double threshold = 0.05;  // adopt a new plan only if it is this much (fraction) better
};

struct SolverSettings {
  std::string backend = "glpk";  // glpk | cbc
  double time_limit_s = 60;
  // What time_limit_s counts (solver/clock.hpp): work (the same plan for the same state on any
  // load) or wall seconds.
  std::string clock = "work";
  int threads = 1;  // searches side by side (SolveOptions::threads)
  IntrospectionSettings introspection;
};

// `selection:` (docs/workload.md, "Selection"): stop the losers of a sweep early, inside the
// batch. The jobs pause at every rung, step min_steps * reduction_factor^k for k < max_rungs,
// with their metric measured there; the best 1/reduction_factor of those compared go on.
struct SelectionSettings {
  std::string method;                 // "" (none), successive-halving or asha
  std::string metric = "val_loss";    // the only metric: the validation loss at the rung's step
  std::int64_t min_steps = 0;         // the first rung's step (0: not given, the jobs' eval_every)
  std::int64_t reduction_factor = 3;  // keep the best 1/reduction_factor at each rung (>= 2)
  std::int64_t max_rungs = 3;         // rungs (decision points) at most (>= 1)
  std::string where;                  // "FILE:LINE:COL" of `selection:`, for errors
  bool enabled() const { return !method.empty(); }
  // The rungs' steps, ascending: min_steps * reduction_factor^k, k < max_rungs.
  std::vector<std::int64_t> rung_steps() const;
};

struct Workload {
  std::string name;                  // `name:`, or the file's stem
  std::filesystem::path source;      // the YAML file, as given
  std::filesystem::path train_data;  // absolute, resolved against the YAML file's directory
  std::filesystem::path val_data;
  std::vector<JobSpec> jobs;  // in file order; a sweep expands in place
  // The first own_jobs of `jobs` are the file's own; jobs that `saturn submit` added follow
  // (add_submissions). source_text is the YAML they were parsed from: submissions parse
  // against it (the batch's models and defaults), not against the file as it is now, which may
  // have been edited meanwhile.
  std::size_t own_jobs = 0;
  std::string source_text;
  // Every model of `models:` with `from: DIR` (absolute), by name, also those no job uses yet
  // (jobs `saturn submit` adds may): run_state.json records them for --resume.
  std::map<std::string, std::filesystem::path> pretrained_dirs;
  // Their files' checksums (hf::scan_model_dir: config.json, index, weights), by model name and
  // file name, when loaded with check_data_contents (or verified by a --resume): run_state.json
  // records them, and --resume refuses a directory whose files changed.
  std::map<std::string, std::map<std::string, std::uint64_t>> pretrained_checksums;
  std::vector<std::string> strategies;  // allowed; default: all of known_strategies()
  std::string cluster = "auto";         // "auto" or a --cluster SPEC, kept as written
  std::string cluster_where;            // "FILE:LINE:COL" of `cluster:` when given, for errors
  SolverSettings solver;
  // `export: hf`: every finished job also writes its final weights as a Hugging Face model
  // directory, jobs/<id>/hf (docs/checkpoints.md, "Hugging Face models"). "": no export.
  std::string export_format;
  SelectionSettings selection;
};

struct LoadOptions {
  // Check that the data files exist (and, for jobs with packing: {cross_attention: false},
  // their record starts). Off for tools that only plan, e.g. on a login node without the data.
  bool check_data_files = true;
  // With check_data_files: also open them and check their contents against every job (a token
  // file of either format, at least seq_len + 1 tokens, every token below the model's
  // vocab_size, record starts valid for the tokens). One pass over each file; under mpirun one
  // rank does it.
  bool check_data_contents = true;
  // Directories that replace models.NAME.from, by model name: a resumed run reads the run
  // directory's copy of the workload, whose relative `from` paths meant the original file's
  // directory, so it passes the absolute ones run_state.json recorded.
  std::map<std::string, std::filesystem::path> model_dirs;
};

// Parses and validates a workload file. Every error is an InputError whose message reads
// "FILE:LINE:COL: field: what is wrong (what is valid)", lines and columns 1-based.
Workload load_workload(const std::filesystem::path& path, const LoadOptions& options = {});
// The same for YAML text that stands for the file `source` (relative data paths resolve
// against source's directory).
Workload parse_workload(const std::string& yaml, const std::filesystem::path& source,
                        const LoadOptions& options = {});

// Jobs added to a running batch by `saturn submit` (docs/workload.md, "Adding jobs to a
// running batch"): YAML holding `jobs:` and optionally `models:`, `defaults:` and `data:`.
struct Submission {
  std::filesystem::path source;  // the file it came from, absolute: its relative paths mean its
                                 // directory, and its errors name it
  std::string yaml;
};

// The batch `workload` (as load_workload made it, from workload.source_text: the file itself is
// not read again; jobs of submissions it already holds after its own_jobs are dropped) with the
// jobs of `submissions` appended in order. A submission uses the batch's models, defaults and
// data unless it brings its own (a model name of its own must be new); every job id must be new
// to the batch and to the submissions before it. `options` (data checks) apply to the last
// submission only: earlier ones were checked when they were accepted. A selecting batch
// (`selection:`) takes no submissions. Throws InputError "FILE:LINE:COL: field: what is wrong"
// naming the submission's file; the returned workload is whole or not made at all. Error when
// `workload` was not made by load_workload (no source_text).
Workload add_submissions(const Workload& workload, const std::vector<Submission>& submissions,
                         const LoadOptions& options = {});

// The job with this id; InputError listing the valid ids (and the closest one) otherwise.
const JobSpec& find_job(const Workload& workload, const std::string& id);

// Strategy names a workload may list: the registry's offered strategies
// (parallel::strategy_names()).
const std::vector<std::string>& known_strategies();

// Compact, exact number text for job ids: 0.0003 -> "3e-4", 0.001 -> "1e-3", 0.05 -> "0.05",
// 1 -> "1". Values below 0.01 (or from 1e6) use the shortest scientific form.
std::string compact_number(double value);

// The id a job gets when it has no `name:`: MODEL-lrLR-bsBATCH, e.g. "small-lr3e-4-bs16", then
// "-KEYVALUE" for every other swept key (see docs/workload.md for the key abbreviations).
std::string default_job_id(const std::string& model_name, double lr, std::int64_t batch_size);

}  // namespace saturn
