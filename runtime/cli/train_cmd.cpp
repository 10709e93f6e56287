// `saturn train WORKLOAD.yaml [--job ID] ...`: one job on one device (the CPU by default).
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "runtime/checkpoint/mpi_env.hpp"
#include "runtime/cli/commands.hpp"
#ifdef SATURN_HAVE_CUDA
#include "runtime/backend/cuda/device_info.hpp"
#endif
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/train/trainer.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::cli {
namespace {

struct TrainArgs {
  std::string workload;
  std::string job;
  std::string strategy = "single";
  int degree = 1;
  std::string device = "cpu";
  std::string run_dir;
  std::string memory = "0";
  std::int64_t max_steps = -1;
  bool quiet = false;
  bool resume = false;
  int keep_checkpoints = 3;
};

int run_train(const TrainArgs& a) {
  if (a.device == "cuda") {
#ifdef SATURN_HAVE_CUDA
    const auto q = cuda::query_devices();
    if (q.devices.empty()) throw InputError(fmt::format("--device cuda: {}", q.error));
    throw InputError(fmt::format("--device cuda: {} CUDA device(s) found ({}), but this build's "
                                 "CUDA backend has no training kernels yet; use --device cpu",
                                 q.devices.size(), q.devices.front().name));
#else
    throw InputError("--device cuda: this build has no CUDA backend (nvcc was not found when it "
                     "was configured; see INSTALL.md)");
#endif
  }
  if (a.strategy != "single" || a.degree != 1)
    throw InputError(
        fmt::format("--strategy {} --degree {}: only single-device training "
                    "(--strategy single --degree 1) is available in this build",
                    a.strategy, a.degree));
  const Workload w = load_workload(a.workload);
  const JobSpec* spec = nullptr;
  if (!a.job.empty()) {
    spec = &find_job(w, a.job);
  } else if (w.jobs.size() == 1) {
    spec = &w.jobs.front();
  } else {
    std::string ids;
    for (const auto& j : w.jobs) ids += "\n  " + j.id;
    throw InputError(fmt::format("{}: the workload has {} jobs; pick one with --job ID:{}",
                                 a.workload, w.jobs.size(), ids));
  }
  TrainJob job{spec->id, spec->model, spec->train, w.train_data, w.val_data};
  TrainOptions opt;
  opt.device_capacity = parse_bytes(a.memory, "--memory");
  opt.max_steps = a.max_steps;
  opt.quiet = a.quiet;
  opt.resume = a.resume;
  opt.keep_checkpoints = a.keep_checkpoints;
  const std::filesystem::path run_dir =
      a.run_dir.empty() ? std::filesystem::path("runs") / w.name : std::filesystem::path(a.run_dir);
  // Everything that can be wrong with the input is found before the run directory is touched.
  check_trainable(job, opt);
  std::filesystem::create_directories(run_dir);
  std::filesystem::copy_file(a.workload, run_dir / "workload.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  opt.job_dir = run_dir / "jobs" / job.id;
  const ckpt::MpiGuard mpi;  // checkpoints use parallel HDF5, on MPI_COMM_SELF here
  train_single_device(job, opt);
  log::info("metrics: {}", (opt.job_dir / "metrics.jsonl").string());
  return kExitOk;
}

}  // namespace

void add_train_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = root.add_subcommand(
      "train", "Train one job of a workload on one device (or D ranks under mpirun, --strategy).");
  cmd->add_option("workload", args->workload, "Workload file (YAML)")->required();
  cmd->add_option("--job", args->job, "Job id (needed when the workload has several jobs)");
  cmd->add_option("--strategy", args->strategy, "Parallel strategy (this build: single)");
  cmd->add_option("--degree", args->degree, "Number of ranks for the strategy");
  cmd->add_option("--device", args->device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--run-dir", args->run_dir, "Run directory (default: runs/<workload name>)");
  cmd->add_option("--memory", args->memory,
                  "Device memory capacity, e.g. 2GiB (0: unlimited); exceeding it is a clean "
                  "out-of-memory error");
  cmd->add_option("--max-steps", args->max_steps, "Stop after this many steps (smoke tests)");
  cmd->add_flag("--quiet", args->quiet, "No progress lines");
  cmd->add_flag("--resume", args->resume,
                "Continue from the job's newest valid checkpoint in the run directory (weights, "
                "optimizer, step, data position); start from scratch when there is none");
  cmd->add_option("--keep-checkpoints", args->keep_checkpoints,
                  "Step checkpoints kept per job (older ones are deleted)")
      ->check(CLI::PositiveNumber);
  cmd->callback([args, action] { *action = [args] { return run_train(*args); }; });
}

}  // namespace saturn::cli
