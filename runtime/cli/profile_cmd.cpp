// `saturn profile WORKLOAD.yaml`: the trial runner alone (docs/profiling.md). Under mpirun it
// calibrates the hardware once, estimates every candidate configuration of every job shape,
// tries the promising ones for real on disjoint rank groups, and fills the profile store that
// `saturn plan` and `saturn run` read; it prints each configuration's estimate, measurement and
// error.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <numeric>
#include <string>

#include "runtime/cli/commands.hpp"
#include "runtime/cli/device_choice.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/profile/profiler.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/plan_io.hpp"
#include "solver/problem.hpp"

namespace saturn::cli {
namespace {

struct ProfileArgs {
  std::string workload, cluster, store, output, device_memory = "0", host_memory = "0";
  std::string device = "auto";
  int trials = 1;
  int trial_steps = profile::TrialOptions{}.measure_steps;  // what `saturn run` times
  int warmup_steps = profile::TrialOptions{}.warmup_steps;
  double trial_time_limit = 60;
  std::string calibration_cache;  // empty: profile::default_calibration_cache()
  std::string current_practice;   // strategy whose whole-node configuration is always tried
  bool no_trials = false, serial = false, no_ballast = false, refresh = false, recalibrate = false,
       quick_calibration = false, all = false, quiet = false, verbose = false;
};

int run_profile(const ProfileArgs& a) {
  const comm::MpiSession mpi;
  auto world = comm::MpiCommunicator::world();
  const int rank = world->rank();
  if (world->size() > 1) log::set_rank(rank);
  if (a.verbose) log::set_level(log::Level::kDebug);
  try {
    Workload w;
    profile::ProfileRequest req;
    profile::ProfileOptions opt;
    comm::agree_on(*world, [&] {
      // First: under auto this is collective, and no rank may have thrown before it.
      req.resources.device = resolve_device(a.device, *world);
      LoadOptions lo;
      lo.check_data_files = false;  // trials use synthetic batches
      w = load_workload(a.workload, lo);
      const std::string spec = !a.cluster.empty() ? a.cluster : w.cluster;
      if (spec != "auto") {
        try {
          req.cluster = solver::parse_cluster_spec(spec);
        } catch (const solver::SolverError& e) {
          throw InputError(
              fmt::format("{}: {}", a.cluster.empty() ? "cluster" : "--cluster", e.what()));
        }
        // A cluster laid over exactly this run's ranks: device i is rank i, so trials use
        // the spec's nodes; otherwise they use the hosts.
        if (req.cluster.total_devices() == world->size()) {
          req.device_rank.resize(static_cast<std::size_t>(world->size()));
          std::iota(req.device_rank.begin(), req.device_rank.end(), 0);
        }
      }
      req.workload = &w;
      opt.store = !a.store.empty() ? std::filesystem::path(a.store)
                                   : RunDir::default_for(w.name).profile_store();
      opt.trials = !a.no_trials;
      opt.trials_per_degree = a.trials;
      opt.refresh = a.refresh;
      opt.current_practice = a.current_practice;
      opt.recalibrate = a.recalibrate;
      opt.calibration_cache = a.calibration_cache.empty() ? profile::default_calibration_cache()
                              : a.calibration_cache == "none"
                                  ? std::filesystem::path()
                                  : std::filesystem::path(a.calibration_cache);
      opt.calibration.quick = a.quick_calibration;
      opt.trial.measure_steps = a.trial_steps;
      opt.trial.warmup_steps = a.warmup_steps;
      opt.trial.time_limit_s = a.trial_time_limit;
      opt.trial.serialize = a.serial;
      opt.trial.ballast = !a.no_ballast && !a.serial;
      // As in `saturn run`: the estimates and the trials both know the memory per rank (host
      // memory bounds offload).
      req.resources.device_bytes = parse_bytes(a.device_memory, "--device-memory");
      req.resources.host_bytes = parse_bytes(a.host_memory, "--host-memory");
      opt.trial.resources.device_bytes = req.resources.device_bytes;
      opt.trial.resources.host_bytes = req.resources.host_bytes;
      opt.quiet = a.quiet;
    });
    const profile::ProfileResult r = profile::profile_workload(req, *world, opt);
    if (rank != 0) return kExitOk;
    if (!a.output.empty()) {
      solver::Problem problem;
      problem.cluster = req.cluster.nodes.empty() ? profile::cluster_of(r.hardware) : req.cluster;
      problem.jobs = r.jobs;
      solver::write_text_file(a.output, solver::instance_to_json(problem).dump(2) + "\n");
    }
    std::string text = profile::format_profile_summary(r);
    if (!a.quiet) text += profile::format_profile_table(r, a.all);
    text += fmt::format("store: {}\n", opt.store.string());
    if (!a.output.empty()) text += fmt::format("instance: {} (saturn plan --instance)\n", a.output);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  } catch (const comm::AgreedFailure& e) {
    return comm::report_agreed_failure(*world, e);
  } catch (const std::exception&) {
    // Failures after the agreed input checks are the same on every rank (the profiler decides
    // identically everywhere): rank 0 reports.
    if (rank != 0) return kExitFailure;
    throw;
  }
}

}  // namespace

void add_profile_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<ProfileArgs>();
  CLI::App* cmd = root.add_subcommand(
      "profile",
      "Estimate every job's candidate configurations, try the promising ones for real on rank "
      "groups (run under mpirun), and fill the profile store that plan and run read.");
  cmd->add_option("workload", args->workload, "Workload file (YAML)")->required();
  cmd->add_option("--cluster", args->cluster,
                  "Cluster to profile for: NxG[:MEM] or G+G+... (default: the workload's "
                  "cluster:, or the hosts and ranks of this run)");
  cmd->add_option("--store", args->store,
                  "Profile store (HDF5), created if absent (default: runs/<name>/profiles.h5)");
  cmd->add_option("--trials", args->trials,
                  "Try at most N configurations per job shape and device count (the "
                  "analytically best)")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--no-trials", args->no_trials,
                "Estimate only (and use what the store already measured)");
  cmd->add_option("--trial-steps", args->trial_steps,
                  "Timed steps per trial (the median counts, over its replicas too; more for steps "
                  "of a few ms, up to 30 ms of them)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--warmup-steps", args->warmup_steps, "Untimed steps before them")
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--trial-time-limit", args->trial_time_limit,
                  "Seconds one trial may take (0: no limit); a slower one keeps the steps it "
                  "measured")
      ->check(finite_range(0.0, 1e6));
  cmd->add_flag("--serial-trials", args->serial,
                "One trial at a time, the other ranks idle (uncontended measurements)");
  cmd->add_flag("--no-ballast", args->no_ballast,
                "Ranks without a trial idle instead of computing (by default they keep the "
                "contention of a full batch)");
  cmd->add_option("--current-practice", args->current_practice,
                  "Also try, and offer, every job shape's whole-node configuration of this "
                  "strategy (what the current-practice baseline runs, e.g. fsdp)")
      ->check(CLI::IsMember(parallel::strategy_names()));
  cmd->add_flag("--refresh", args->refresh, "Measure again what the store already holds");
  cmd->add_flag("--recalibrate", args->recalibrate, "Calibrate this hardware again");
  cmd->add_option("--calibration-cache", args->calibration_cache,
                  "Calibrations shared by all runs, once per hardware ('none': no cache; "
                  "default $SATURN_CALIBRATION_CACHE, else ~/.cache/saturn/calibration.h5)");
  cmd->add_flag("--quick-calibration", args->quick_calibration,
                "Fewer shapes and sizes when calibrating (smoke tests; coarser estimates)");
  cmd->add_option("--device", args->device,
                  std::string("The backend the estimates and trials are for: ") + kDeviceOptionHelp)
      ->check(CLI::IsMember(device_option_values()))
      ->capture_default_str();
  cmd->add_option("--device-memory", args->device_memory,
                  "Device memory per rank (e.g. 512MiB; 0: the cluster's, else unlimited): "
                  "configurations estimated above it are infeasible, trials that exceed it are "
                  "recorded out of memory");
  cmd->add_option("--host-memory", args->host_memory,
                  "Host memory per rank for offloaded parameters and optimizer state (e.g. "
                  "64MiB; 0: unlimited); offload configurations that need more are infeasible");
  cmd->add_flag("--all", args->all, "Also list configurations infeasible by the estimate");
  cmd->add_option("-o,--output", args->output,
                  "Write the solver instance (JSON) for saturn plan --instance");
  cmd->add_flag("-q,--quiet", args->quiet, "Summary only");
  cmd->add_flag("-v,--verbose", args->verbose, "Progress of calibration and trials");
  cmd->callback([args, action] { *action = [args] { return run_profile(*args); }; });
}

}  // namespace saturn::cli
