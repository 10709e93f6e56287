// The batch script `saturn sbatch` writes into the run directory and submits. It follows the
// conventions of ../shared/reference/hpc-notes.md §1, each tested on a real Slurm:
//  * one rank per GPU: --ntasks-per-node = --gpus-per-node;
//  * --requeue and --open-mode=append, so a requeued job keeps its id and its log;
//  * --signal=B:USR1@LEAD: the batch shell gets USR1 LEAD seconds (Slurm: up to 60 s more)
//    before the time limit and forwards it to the launcher, which passes it to every rank; the
//    ranks checkpoint and exit 99 ("checkpointed, not finished");
//  * the launcher runs as `cmd & wait` in a loop, since bash runs a trap only between commands;
//  * exit 99 -> `scontrol requeue $SLURM_JOB_ID`; the next start (SLURM_RESTART_COUNT > 0, or
//    a run directory with state) adds --resume, so the run continues where it stopped;
//  * SRUN_CPUS_PER_TASK = SLURM_CPUS_PER_TASK: since 22.05 srun does not inherit -c.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "launch/slurm_env.hpp"

namespace saturn::slurm {

enum class BatchLauncher { kMpirun, kSrun };

// "mpirun" | "srun"; InputError otherwise.
BatchLauncher parse_launcher(std::string_view name);

// Seconds in a Slurm time limit written HH:MM:SS or D-HH:MM:SS (minutes and seconds < 60).
// InputError for any other form or a zero limit.
long parse_time_limit(std::string_view text);

inline constexpr int kDefaultSignalLead = 300;
// Slurm keeps the --signal time in 16 bits.
inline constexpr int kMaxSignalLead = 65535;

struct SbatchOptions {
  std::filesystem::path workload;  // absolute
  std::filesystem::path run_dir;   // absolute
  std::filesystem::path saturn;    // absolute path of the saturn executable
  std::string mpirun = "mpirun";   // the launcher binary for BatchLauncher::kMpirun
  std::string job_name;            // default: saturn-<workload file stem>
  int nodes = 0;
  int gpus_per_node = 0;
  std::string time;  // [D-]HH:MM:SS
  std::string partition;
  std::string account;
  BatchLauncher launcher = BatchLauncher::kMpirun;
  int signal_lead_s = kDefaultSignalLead;
  int cpus_per_task = 0;  // 0: not requested
  // saturn run's --device in the script: "cpu" or "cuda"; "auto" or empty: run's default
  // (auto: cuda when every rank has a GPU), so the script passes nothing.
  std::string device;
};

// Checks every option; InputError naming the option (--time, --nodes, ...) on the first problem.
void validate_sbatch_options(const SbatchOptions& options);

// The batch script text. Validates first.
std::string render_sbatch_script(const SbatchOptions& options);

// Where `saturn sbatch` writes the script, and where Slurm writes the job's log.
std::filesystem::path sbatch_script_path(const std::filesystem::path& run_dir);
std::string sbatch_log_pattern(const std::filesystem::path& run_dir);  // .../slurm-%j.out

// Writes `script` to `path` (through a temporary file and a rename, mode 0755).
void write_sbatch_script(const std::filesystem::path& path, const std::string& script);

// Runs `sbatch --parsable SCRIPT` and returns the job id. IoError when sbatch is missing, Error
// with sbatch's message when it refuses the job.
std::string submit_sbatch_script(const std::filesystem::path& script,
                                 const launch::Environment& env);

// 'text' quoted for bash.
std::string shell_quote(std::string_view text);

}  // namespace saturn::slurm
