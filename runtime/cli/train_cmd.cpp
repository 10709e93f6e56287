// `saturn train WORKLOAD.yaml [--job ID] ...`: one job on one device (--device auto: the GPU when
// every rank has one, else the CPU), or
// under mpirun on D ranks with a parallel strategy (--strategy S --degree D).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/cli/commands.hpp"
#include "runtime/cli/device_choice.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/train/parallel_trainer.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::cli {
namespace {

struct TrainArgs {
  std::string workload;
  std::string job;
  std::string strategy = parallel::one_device_strategy();
  int degree = 0;  // 0: 1 on one device, the number of ranks otherwise
  std::vector<std::string> knobs;
  std::string device = "auto";
  std::string run_dir;
  std::string device_memory = "0";
  std::string deprecated_memory;  // --memory, the old spelling of --device-memory
  std::string host_memory = "0";
  std::int64_t max_steps = -1;
  bool quiet = false;
  bool resume = false;
  int keep_checkpoints = 3;
};

std::string strategy_list() {
  std::string s;
  for (const auto& n : parallel::strategy_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// --strategy's help: every strategy of the registry with its own line.
std::string strategy_help() {
  std::string s = "The strategy, as the registry describes them (docs/strategies.md):";
  for (const auto& info : parallel::strategy_registry())
    s += fmt::format("\n  {}: {}", info.name, info.help);
  return s;
}

const JobSpec& pick_job(const Workload& w, const TrainArgs& a) {
  if (!a.job.empty()) return find_job(w, a.job);
  if (w.jobs.size() == 1) return w.jobs.front();
  std::string ids;
  for (const auto& j : w.jobs) ids += "\n  " + j.id;
  throw InputError(fmt::format("{}: the workload has {} jobs; pick one with --job ID:{}",
                               a.workload, w.jobs.size(), ids));
}

// One job on every rank of MPI_COMM_WORLD (one rank for the one-device strategy). Every failure
// before training is agreed by all ranks; rank 0 reports it (exit 2 for bad input, infeasible
// configurations and out-of-memory), the other ranks exit with the same code silently.
int run_job(const TrainArgs& a) {
  const comm::MpiSession mpi;
  auto world = comm::MpiCommunicator::world();
  const int rank = world->rank();
  if (world->size() > 1) log::set_rank(rank);
  try {
    Workload w;
    TrainJob job;
    ParallelOptions par;
    TrainOptions opt;
    std::filesystem::path run_dir;
    comm::agree_on(*world, [&] {
      // First: under auto this is collective, and no rank may have thrown before it.
      opt.resources.device = resolve_device(a.device, *world);
      par.knobs = parallel::parse_knobs(a.knobs);
      par.strategy = a.strategy;
      par.degree = a.degree > 0 ? a.degree : world->size();
      LoadOptions lo;
      lo.check_data_contents = rank == 0;  // one pass over the data is enough (agreed)
      w = load_workload(a.workload, lo);
      const JobSpec& spec = pick_job(w, a);
      job = TrainJob{spec.id, spec.model, spec.train, w.train_data, w.val_data, spec.init_from};
      if (spec.train.early_stop.enabled() && rank == 0)
        log::warn(
            "job {}: early_stop applies under `saturn run`; saturn train trains to the last "
            "step",
            spec.id);
      // On a GPU the capacity is the device's (less a reserve); --device-memory may only lower
      // it.
      const bool old_flag = !a.deprecated_memory.empty();
      const char* flag = old_flag ? "--memory" : "--device-memory";
      if (old_flag && rank == 0)
        log::warn("--memory is deprecated: it is --device-memory, as in saturn run and profile");
      opt.resources.device_bytes = device_capacity_for(
          opt.resources.device, std::max(0, comm::launcher_local_rank()),
          parse_bytes(old_flag ? a.deprecated_memory : a.device_memory, flag), flag);
      opt.resources.host_bytes = parse_bytes(a.host_memory, "--host-memory");
      opt.max_steps = a.max_steps;
      opt.quiet = a.quiet || rank != 0;
      opt.resume = a.resume;
      opt.keep_checkpoints = a.keep_checkpoints;
      opt.export_format = export_option(w.export_format);
      run_dir =
          a.run_dir.empty() ? RunDir::default_for(w.name).root() : std::filesystem::path(a.run_dir);
      opt.job_dir = RunDir(run_dir).job_dir(job.id);
    });
    par.prepare = [&] {
      std::filesystem::create_directories(run_dir);
      std::filesystem::copy_file(a.workload, RunDir(run_dir).workload_copy(),
                                 std::filesystem::copy_options::overwrite_existing);
    };
    train_with_strategy(job, opt, par, *world);
    if (rank == 0) log::info("metrics: {}", RunDir::metrics_file(opt.job_dir).string());
    return kExitOk;
  } catch (const comm::AgreedFailure& e) {
    return comm::report_agreed_failure(*world, e);
  } catch (const std::exception& e) {
    // A failure after set-up, possibly on this rank alone: the others may be inside a
    // collective, so the whole job stops here.
    std::fprintf(stderr, "saturn: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    return kExitFailure;
  }
}

int run_train(const TrainArgs& a) {
  // An unknown name is reported by the ranks together, when they make the strategy.
  bool one_device = false;
  for (const auto& info : parallel::strategy_registry())
    if (info.name == a.strategy) one_device = info.max_degree == 1;
  if (one_device) {
    if (a.degree > 1)
      throw InputError(
          fmt::format("--strategy {} trains on one device; --degree {} needs a "
                      "parallel strategy ({})",
                      a.strategy, a.degree, strategy_list()));
    if (comm::launched_with_several_ranks()) {
      if (comm::launcher_rank() > 0) return kExitBadInput;  // rank 0 reports it, once
      throw InputError(
          fmt::format("--strategy {} trains on one device, but this process was "
                      "started as one of several MPI ranks; pick a parallel strategy "
                      "({}) with --degree equal to the number of ranks",
                      a.strategy, strategy_list()));
    }
    if (!a.knobs.empty()) throw InputError("--knob applies to parallel strategies only");
  }
  return run_job(a);
}

}  // namespace

void add_train_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = root.add_subcommand(
      "train", "Train one job of a workload on one device (or D ranks under mpirun, --strategy).");
  cmd->add_option("workload", args->workload, "Workload file (YAML)")->required();
  cmd->add_option("--job", args->job, "Job id (needed when the workload has several jobs)");
  cmd->add_option("--strategy", args->strategy, strategy_help())->capture_default_str();
  cmd->add_option("--degree", args->degree,
                  "Ranks for the strategy; must equal mpirun's -np (default: the number of ranks)");
  cmd->add_option("--knob", args->knobs,
                  "Strategy knob KEY=VALUE, repeatable: micro_batch_size, micro_batches, "
                  "schedule=gpipe|1f1b, stages, tensor_degree, recompute, bucket_bytes, overlap, "
                  "prefetch, balance, device_capacity, host_capacity");
  cmd->add_option("--device", args->device,
                  std::string("The backend every rank trains on: ") + kDeviceOptionHelp)
      ->check(CLI::IsMember(device_option_values()))
      ->capture_default_str();
  cmd->add_option("--run-dir", args->run_dir, "Run directory (default: runs/<workload name>)");
  CLI::Option* device_memory =
      cmd->add_option("--device-memory", args->device_memory,
                      "Device memory per rank, e.g. 2GiB (0: unlimited on the CPU, the GPU's "
                      "memory less 2 GiB reserved on CUDA, which it may only lower); exceeding it "
                      "is a clean out-of-memory error")
          ->capture_default_str();
  cmd->add_option("--memory", args->deprecated_memory,
                  "Deprecated spelling of --device-memory (still accepted, with a warning)")
      ->excludes(device_memory);
  cmd->add_option("--host-memory", args->host_memory,
                  "Host memory per rank for offloaded parameters and optimizer state, e.g. 64MiB "
                  "(0: unlimited)")
      ->capture_default_str();
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
