// `saturn sbatch WORKLOAD.yaml --nodes N --gpus-per-node G --time HH:MM:SS ...`: writes a batch
// script for the workload into the run directory and submits it (slurm/sbatch.hpp describes the
// script). --dry-run prints the script and touches nothing.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "launch/self_launch.hpp"
#include "launch/slurm_env.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/device_choice.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"
#include "runtime/workload/workload.hpp"
#include "slurm/sbatch.hpp"

namespace saturn::cli {
namespace {

struct SbatchArgs {
  std::string workload;
  int nodes = 0;
  int gpus_per_node = 0;
  std::string time;
  std::string partition;
  std::string account;
  std::string launcher = "mpirun";
  std::string run_dir;
  int signal_lead = slurm::kDefaultSignalLead;
  int cpus_per_task = 0;
  std::string device = "auto";
  bool dry_run = false;
};

int run_sbatch(const SbatchArgs& a) {
  namespace fs = std::filesystem;
  // The workload is checked now, on the login node, rather than after the queue wait.
  const Workload w = load_workload(a.workload);
  const launch::Environment env = launch::current_environment();

  slurm::SbatchOptions o;
  o.workload = fs::absolute(a.workload).lexically_normal();
  o.run_dir =
      fs::absolute(a.run_dir.empty() ? RunDir::default_for(w.name).root() : fs::path(a.run_dir))
          .lexically_normal();
  // A run directory that holds a run makes the job resume that run, with its own copy of the
  // workload: a WORKLOAD edited since would be silently ignored, so it is refused here, as
  // `saturn run --resume` refuses it.
  if (RunDir(o.run_dir).holds_run() && run_copy_differs(o.run_dir, w)) {
    const fs::path copy = RunDir(o.run_dir).workload_copy();
    throw InputError(fmt::format(
        "saturn sbatch: {} already holds a run whose workload ({}) differs from {}; the job "
        "would resume that run as it is: to change it, edit {}; to run {} as a new batch, "
        "choose another --run-dir",
        o.run_dir.string(), copy.string(), o.workload.string(), copy.string(),
        o.workload.string()));
  }
  o.saturn = launch::current_executable();
  o.job_name = "saturn-" + w.name;
  o.nodes = a.nodes;
  o.gpus_per_node = a.gpus_per_node;
  o.time = a.time;
  o.partition = a.partition;
  o.account = a.account;
  o.launcher = slurm::parse_launcher(a.launcher);
  o.signal_lead_s = a.signal_lead;
  o.cpus_per_task = a.cpus_per_task;
  o.device = a.device;
  if (o.launcher == slurm::BatchLauncher::kMpirun) {
    try {
      o.mpirun = launch::find_mpirun(env);
    } catch (const IoError&) {
      // No MPI on this (login) node: leave it to the compute node's PATH.
      o.mpirun = "mpirun";
    }
  }
  const std::string script = slurm::render_sbatch_script(o);
  if (a.dry_run) {
    fmt::print("{}", script);
    return kExitOk;
  }
  fs::create_directories(o.run_dir);
  const fs::path path = slurm::sbatch_script_path(o.run_dir);
  slurm::write_sbatch_script(path, script);
  const std::string job_id = slurm::submit_sbatch_script(path, env);
  fmt::print(
      "submitted batch job {}\n  script: {}\n  log:    {}/slurm-{}.out\n  watch:  squeue -j {}\n",
      job_id, path.string(), o.run_dir.string(), job_id, job_id);
  return kExitOk;
}

}  // namespace

void add_sbatch_command(CLI::App& root, Action* action) {
  auto a = std::make_shared<SbatchArgs>();
  CLI::App* cmd = root.add_subcommand(
      "sbatch",
      "Submit the workload to Slurm: one rank per GPU, checkpoint and requeue before the limit.\n"
      "Writes RUN_DIR/saturn.sbatch and submits it with sbatch. Slurm sends USR1 --signal-lead\n"
      "seconds before --time runs out; the ranks checkpoint and exit 99, the script requeues the\n"
      "job, and the next start resumes the same run directory. The job's log is\n"
      "RUN_DIR/slurm-<jobid>.out. See docs/slurm.md.\n"
      "Example: saturn sbatch examples/sweep.yaml --nodes 2 --gpus-per-node 4 --time 04:00:00");
  cmd->add_option("workload", a->workload, "Workload file (YAML)")->required();
  cmd->add_option("--nodes,-N", a->nodes, "Nodes to allocate")->required();
  cmd->add_option("--gpus-per-node", a->gpus_per_node, "GPUs per node; one rank each")->required();
  cmd->add_option("--time,-t", a->time, "Time limit, HH:MM:SS or D-HH:MM:SS")->required();
  cmd->add_option("--partition,-p", a->partition, "Slurm partition");
  cmd->add_option("--account,-A", a->account, "Slurm account to charge");
  cmd->add_option("--launcher", a->launcher, "How ranks start: mpirun or srun (--mpi=pmix)")
      ->capture_default_str();
  cmd->add_option("--run-dir", a->run_dir, "Run directory (default: runs/<workload name>)");
  cmd->add_option("--signal-lead", a->signal_lead,
                  "Seconds before the time limit at which the ranks checkpoint")
      ->capture_default_str();
  cmd->add_option("--cpus-per-task,-c", a->cpus_per_task,
                  "CPUs per rank (sets OMP_NUM_THREADS in the job)");
  cmd->add_option("--device", a->device,
                  std::string("saturn run's --device in the job: ") + kDeviceOptionHelp)
      ->check(CLI::IsMember(device_option_values()))
      ->capture_default_str();
  cmd->add_flag("--dry-run", a->dry_run, "Print the batch script; write and submit nothing");
  cmd->callback([action, a] { *action = [a] { return run_sbatch(*a); }; });
}

}  // namespace saturn::cli
