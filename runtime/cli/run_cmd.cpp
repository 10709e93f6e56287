// `saturn run WORKLOAD.yaml [--np N] [--run-dir DIR] [--resume]`: the whole batch. Under mpirun
// or srun it runs on the ranks it was given; with --np N outside a launcher it starts mpirun
// itself (launch/self_launch) so a user with one machine never writes an mpirun line.
#include <fmt/format.h>
#include <mpi.h>

#include <filesystem>
#include <memory>

#include "launch/binding.hpp"
#include "launch/self_launch.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/device_choice.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/coordinator.hpp"
#include "runtime/exec/executor.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::cli {
namespace {

struct RunArgs {
  std::string workload;
  std::string resume_dir;
  bool resume_flag = false;
  int np = 0;
  std::string hostfile;
  exec::RunOptions options;
  std::string run_dir;
  std::string store;
  bool no_trials = false;
  bool quick_calibration = false;
  bool no_replan = false;
  std::string device = "auto";
  bool oversubscribe_devices = false;
};

// Collective, once per rank before any work: each rank picks its device from its node-local
// rank and the devices it sees, and logs the choice (launch/binding.hpp, docs/slurm.md). On
// the CPU backend that is a logged no-op. Returns kExitOk when every rank has its device;
// otherwise rank 0 throws the reason and the other ranks return its exit code quietly.
int bind_rank_device(RunArgs& a) {
  auto world = comm::MpiCommunicator::world();
  if (world->size() > 1) log::set_rank(world->rank());
  // auto is decided by all ranks together first (no rank can fail in it); cuda's missing GPU
  // is reported after the binding below, which logs what the launcher gave each rank.
  a.options.device =
      a.device == "auto" ? resolve_device(a.device, *world) : parse_device_kind(a.device);
  launch::BindOptions b;
  b.kind =
      a.options.device == DeviceKind::kCuda ? launch::DeviceKind::kCuda : launch::DeviceKind::kCpu;
  b.allow_oversubscribe = a.oversubscribe_devices;
  try {
    comm::agree_on(*world, [&] {
      std::string why;
      const int count =
          b.kind == launch::DeviceKind::kCuda ? cuda_provider().device_count(&why) : 0;
      if (b.kind == launch::DeviceKind::kCuda) b.physical_count = count > 0 ? count : -1;
      launch::DeviceChoice choice;
      try {
        choice = launch::bind_device(MPI_COMM_WORLD, launch::current_environment(), b);
      } catch (const InputError& e) {
        if (a.device != "auto" || b.kind != launch::DeviceKind::kCuda) throw;
        throw InputError(fmt::format(
            "{} (--device auto chose cuda because every rank has a GPU; pass --device cpu, or "
            "--oversubscribe-devices to share GPUs)",
            e.what()));
      }
      if (b.kind == launch::DeviceKind::kCuda) a.options.device_index = choice.ordinal;
      // Binding reads the launcher's view (CUDA_VISIBLE_DEVICES, Slurm); training needs a GPU
      // this process can really use, which is checked here, before the run directory exists.
      if (b.kind == launch::DeviceKind::kCuda && count == 0)
        throw InputError(
            fmt::format("--device cuda: no usable CUDA device in this process ({}): {}",
                        cuda_provider().name, why));
    });
  } catch (const comm::AgreedFailure& e) {
    return comm::report_agreed_failure(*world, e);
  }
  return kExitOk;
}

int run_run(RunArgs a, int argc, char** argv) {
  namespace fs = std::filesystem;
  // `saturn run --resume RUN_DIR` (the workload is the run directory's copy), or
  // `saturn run WORKLOAD --run-dir DIR --resume`.
  if (!a.resume_dir.empty()) {
    a.options.resume = true;
    a.options.run_dir = a.resume_dir;
    if (a.workload.empty()) a.workload = RunDir(a.resume_dir).workload_copy().string();
  }
  if (a.resume_flag) a.options.resume = true;
  if (a.workload.empty())
    throw InputError("saturn run: give a WORKLOAD.yaml, or --resume RUN_DIR to continue a run");
  a.options.workload = a.workload;
  if (!a.run_dir.empty()) a.options.run_dir = a.run_dir;
  if (!a.store.empty()) a.options.store = a.store;
  a.options.trials = !a.no_trials;
  a.options.quick_calibration = a.quick_calibration;
  a.options.replan = !a.no_replan;

  if (a.np > 0) {
    // Outside a launcher: run this very command under mpirun (the child keeps --np and sees
    // itself launched). Under mpirun/srun: this process is one of the ranks.
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (auto code =
            launch::self_launch_if_needed(a.np, a.hostfile, args, launch::current_environment()))
      return *code;
  }
  const comm::MpiSession mpi;
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (a.np > 0 && size != a.np)
    throw InputError(fmt::format("--np {} but this launcher started {} ranks", a.np, size));
  int code = bind_rank_device(a);
  if (code == kExitOk) code = exec::run_batch(a.options);
  // For a `saturn run --np N` that launched this rank: its exit code is the run's, however
  // mpirun itself ends (launch::launch_exit_code).
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) launch::record_exit_code(code);
  return code;
}

}  // namespace

void add_run_command(CLI::App& root, Action* action, int argc, char** argv) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = root.add_subcommand(
      "run",
      "Train the whole batch: profile, plan every job's strategy, devices and start time, "
      "execute on all ranks, re-plan as it learns. Under mpirun/srun it uses the ranks it was "
      "given; --np N starts mpirun itself.");
  cmd->add_option("workload", args->workload, "Workload file (YAML)");
  cmd->add_option("--np", args->np, "Start N local ranks (runs mpirun for you)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--hostfile", args->hostfile, "Open MPI hostfile for --np across hosts");
  cmd->add_option("--run-dir", args->run_dir, "Run directory (default: runs/<workload name>)");
  CLI::Option* resume =
      cmd->add_option("--resume", args->resume_dir,
                      "Continue the run in RUN_DIR from its checkpoints (any rank count)")
          ->expected(0, 1);
  cmd->add_option("--device-memory", args->options.device_memory,
                  "Memory capacity of each device (rank), e.g. 2GiB; 0: unlimited on the CPU, "
                  "the GPU's memory less 2 GiB reserved on CUDA, which it may only lower "
                  "(default; on --resume: the interrupted run's)");
  cmd->add_option("--host-memory", args->options.host_memory,
                  "Host memory per rank for offloaded parameters and optimizer state, e.g. "
                  "64MiB; 0: unlimited (default; on --resume: the interrupted run's)");
  cmd->add_option("--store", args->store, "Profile store (default RUN_DIR/profiles.h5)");
  cmd->add_flag("--no-trials", args->no_trials, "Plan from analytic estimates only");
  cmd->add_flag("--quick-calibration", args->quick_calibration,
                "Fewer shapes and sizes when calibrating, a few seconds (smoke tests; coarser "
                "estimates; not kept in the calibration cache)");
  cmd->add_option(
         "--device", args->device,
         std::string(kDeviceOptionHelp) + "; cuda: each rank binds the GPU of its node-local rank")
      ->check(CLI::IsMember(device_option_values()))
      ->capture_default_str();
  cmd->add_flag("--oversubscribe-devices", args->oversubscribe_devices,
                "Let several ranks of a node share a GPU (else an error; also "
                "SATURN_OVERSUBSCRIBE_DEVICES=1)");
  cmd->add_option("--policy", args->options.policy,
                  "Who plans: saturn (the solver), or a baseline to compare against: "
                  "current-practice, optimus-greedy, min (these never re-plan)")
      ->check([](const std::string& name) {
        try {
          exec::parse_policy(name);
          return std::string();
        } catch (const std::exception& e) {
          return std::string(e.what());
        }
      });
  cmd->add_option("--current-practice", args->options.current_practice,
                  "The strategy the current-practice baseline gives every job on a whole node; "
                  "its configuration is tried and offered for every job shape (default with "
                  "--policy current-practice: fsdp, as in the Saturn paper; 'fastest': each "
                  "job's fastest whole-node configuration)")
      ->check([](const std::string& name) {
        for (const auto& s : parallel::strategy_names())
          if (s == name) return std::string();
        if (name == "fastest") return std::string();
        std::string valid;
        for (const auto& s : parallel::strategy_names()) valid += s + ", ";
        return "unknown strategy '" + name + "' (valid: " + valid + "fastest)";
      });
  cmd->add_flag("--no-replan", args->no_replan,
                "Execute the first plan as made: no re-planning at intervals or job ends");
  cmd->add_option("--replan-interval", args->options.replan_interval_s,
                  "Seconds between re-plans (overrides solver.introspection.interval)")
      ->check(finite_range(0.001, 1e9));
  cmd->add_option("--progress-interval", args->options.progress_interval_s,
                  "Seconds between progress tables when the output is not a terminal")
      ->check(finite_range(0.01, 1e6));
  cmd->add_flag("--quiet", args->options.quiet, "No progress output");
  cmd->callback([args, action, argc, argv, resume] {
    if (resume->count() > 0 && args->resume_dir.empty()) args->resume_flag = true;
    *action = [args, argc, argv] { return run_run(*args, argc, argv); };
  });
}

}  // namespace saturn::cli
