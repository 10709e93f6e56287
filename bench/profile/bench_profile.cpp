// The trial runner on a real workload (examples/sweep.yaml), under mpirun -np 4:
//   1. a first profile run on a fresh store (calibration + trials);
//   2. a second run on the same store (must try nothing);
//   3. the same trials again (--refresh): how well a measurement repeats;
//   4. optionally, the trials again one at a time with idle ranks, and one at a time with
//      ballast, to show how concurrent trials interfere on this machine;
// then per configuration the estimate, the measurement and the errors, the memory estimate vs
// the measured peak, and the profiling overhead against the batch's planned makespan. Prints
// tables; never passes or fails on time.
//
//   mpirun -np 4 --oversubscribe bench_profile --workload examples/sweep.yaml [--store F]
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/profile/profiler.hpp"
#include "runtime/profile/util.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/solve.hpp"

using namespace saturn;
using namespace saturn::profile;

namespace {

double rel(double a, double b) {
  return b > 0 ? (a - b) / b : 0.0;
}

std::string pct(double x) {
  return fmt::format("{:+.1f}%", 100.0 * x);
}

std::string med_abs(const std::vector<double>& v) {
  std::vector<double> a;
  for (double x : v) a.push_back(std::abs(x));
  return a.empty() ? std::string("-") : fmt::format("{:.1f}%", 100.0 * median(a));
}

std::map<std::string, const ConfigRow*> tried(const ProfileResult& r) {
  std::map<std::string, const ConfigRow*> out;
  for (const auto& row : r.rows)
    if (row.tried_now && row.measured && row.measured->feasible) out[row.key_id] = &row;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  saturn::install_cuda_provider();
  const comm::MpiSession mpi;
  int code = 0;
  {
    auto world = comm::MpiCommunicator::world();
    const bool root = world->rank() == 0;
    CLI::App app{"Trial runner benchmark: estimates vs measurements, repeatability, overhead"};
    std::string workload_path = "examples/sweep.yaml", store_path, cluster;
    int trials = 1, steps = 2;
    bool interference = true, quick = false;
    app.add_option("--workload", workload_path, "Workload file");
    app.add_option("--store", store_path, "Profile store (default: a fresh temporary file)");
    app.add_option("--cluster", cluster, "Cluster spec (default: this run's ranks)");
    app.add_option("--trials", trials, "Configurations tried per shape and device count");
    app.add_option("--trial-steps", steps, "Timed steps per trial");
    app.add_flag("!--no-interference", interference, "Skip the serial re-runs");
    app.add_flag("--quick-calibration", quick, "Coarser, faster calibration");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    try {
      LoadOptions lo;
      lo.check_data_files = false;
      const Workload w = load_workload(workload_path, lo);
      ProfileRequest req;
      req.workload = &w;
      if (!cluster.empty()) req.cluster = solver::parse_cluster_spec(cluster);
      if (store_path.empty()) {
        std::int64_t pid = getpid();  // rank 0's, so that every rank names the same file
        world->broadcast(&pid, 1, 0);
        store_path =
            (std::filesystem::temp_directory_path() / fmt::format("bench-profile-{}.h5", pid))
                .string();
      }
      if (root) std::filesystem::remove(store_path);
      world->barrier();
      ProfileOptions opt;
      opt.store = store_path;
      opt.trials_per_degree = trials;
      opt.trial.measure_steps = steps;
      opt.calibration.quick = quick;

      const ProfileResult first = profile_workload(req, *world, opt);
      const ProfileResult second = profile_workload(req, *world, opt);
      ProfileOptions again = opt;
      again.refresh = true;
      const ProfileResult third = profile_workload(req, *world, again);
      ProfileResult serial_idle, serial_busy;
      if (interference) {
        ProfileOptions s = again;
        s.trial.serialize = true;
        s.trial.ballast = false;
        serial_idle = profile_workload(req, *world, s);
        s.trial.ballast = true;
        serial_busy = profile_workload(req, *world, s);
      }

      // The batch's makespan as planned from the first run's profile.
      solver::Problem problem;
      problem.cluster = req.cluster.nodes.empty() ? cluster_of(first.hardware) : req.cluster;
      problem.jobs = first.jobs;
      solver::SolveOptions so;
      so.time_limit_s = 5;
      const solver::Plan plan = solver::solve(problem, so);

      if (root) {
        fmt::print("# bench_profile: {} on {} ranks\n", workload_path, world->size());
        fmt::print("hardware: {}\n", first.hardware.describe());
        fmt::print("{}", format_profile_summary(first));
        fmt::print(
            "\n{:<11} {:<26} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}\n",
            "shape", "config", "dev", "est s", "trial s", "err", "again s", "repeat", "est MiB",
            "peak MiB", "mem err", "comm %", "wall s");
        std::vector<double> est_err, raw_err, rep_err, mem_err;
        const auto again_rows = tried(third);
        const double load = first.stats.load_factor;
        for (const auto& [key, row] : tried(first)) {
          const Measurement& m = *row->measured;
          const double e = rel(row->estimate.step_s, m.step_s);
          est_err.push_back(e);
          raw_err.push_back(rel(row->estimate.step_s / load, m.step_s));
          const double me = rel(static_cast<double>(row->estimate.device_bytes),
                                static_cast<double>(m.peak_device_bytes));
          mem_err.push_back(me);
          std::string again_s = "-", rep = "-";
          if (const auto it = again_rows.find(key); it != again_rows.end()) {
            const double t2 = it->second->measured->step_s;
            again_s = fmt::format("{:.4f}", t2);
            rep_err.push_back(rel(t2, m.step_s));
            rep = pct(rep_err.back());
          }
          fmt::print(
              "{:<11} {:<26} {:>3} {:>8.4f} {:>8.4f} {:>8} {:>8} {:>8} {:>8.2f} {:>8.2f} "
              "{:>8} {:>6.0f}% {:>7.2f}\n",
              row->model_name, row->config.label(), row->config.degree, row->estimate.step_s,
              m.step_s, pct(e), again_s, rep,
              static_cast<double>(row->estimate.device_bytes) / (1 << 20),
              static_cast<double>(m.peak_device_bytes) / (1 << 20), pct(me),
              100.0 * m.comm_s / m.step_s, m.wall_s);
        }
        fmt::print("\n{:<58} {:>10} {:>8}\n", "metric", "value", "target");
        fmt::print("{:<58} {:>10} {:>8}\n", "median |error| analytic step time vs trial",
                   med_abs(est_err), "15%");
        fmt::print("{:<58} {:>10} {:>8}\n",
                   fmt::format("  (without the load factor {:.2f} of this run)", load),
                   med_abs(raw_err), "");
        fmt::print("{:<58} {:>10} {:>8}\n", "median |change| trial re-measured in a later run",
                   med_abs(rep_err), "5%");
        fmt::print("{:<58} {:>10} {:>8}\n", "median |error| memory estimate vs measured peak",
                   med_abs(mem_err), "15%");
        const double makespan = plan.makespan_s;
        const double with_cal = first.stats.total_s;
        const double without_cal = first.stats.total_s - first.stats.calibration_s;
        fmt::print("{:<58} {:>9.1f}s {:>8}\n", "planned makespan of the batch (from run 1)",
                   makespan, "");
        fmt::print("{:<58} {:>9.1f}s {:>8}\n", "profiling, first run on this hardware", with_cal,
                   "");
        fmt::print("{:<58} {:>10} {:>8}\n", "  overhead vs makespan, calibration included",
                   fmt::format("{:.1f}%", 100.0 * with_cal / makespan), "");
        fmt::print("{:<58} {:>10} {:>8}\n", "  overhead vs makespan, calibration stored",
                   fmt::format("{:.1f}%", 100.0 * without_cal / makespan), "5%");
        fmt::print("{:<58} {:>9.1f}s {:>8}\n", "second run, same store (trials run)",
                   second.stats.total_s, fmt::format("{} tried", second.stats.trials_run));
        fmt::print("{:<58} {:>10} {:>8}\n", "trials of run 1 (s; scheduled by the estimates)",
                   fmt::format("{} ({:.1f}; {:.1f})", first.stats.trials_run, first.stats.trials_s,
                               first.stats.trials_expected_s),
                   "");

        if (interference) {
          fmt::print(
              "\nInterference of concurrent trials (step time of the same configuration; "
              "ratio to concurrent+ballast)\n");
          fmt::print("{:<11} {:<26} {:>3} {:>10} {:>14} {:>14}\n", "shape", "config", "dev",
                     "concurrent", "serial, idle", "serial, ballast");
          const auto idle = tried(serial_idle), busy = tried(serial_busy);
          std::vector<double> r_idle, r_busy;
          for (const auto& [key, row] : again_rows) {
            const double base = row->measured->step_s;
            std::string a = "-", b = "-";
            if (const auto it = idle.find(key); it != idle.end()) {
              r_idle.push_back(it->second->measured->step_s / base);
              a = fmt::format("{:.4f} x{:.2f}", it->second->measured->step_s, r_idle.back());
            }
            if (const auto it = busy.find(key); it != busy.end()) {
              r_busy.push_back(it->second->measured->step_s / base);
              b = fmt::format("{:.4f} x{:.2f}", it->second->measured->step_s, r_busy.back());
            }
            fmt::print("{:<11} {:<26} {:>3} {:>10.4f} {:>14} {:>14}\n", row->model_name,
                       row->config.label(), row->config.degree, base, a, b);
          }
          fmt::print(
              "median ratio: serial idle x{:.2f}, serial with ballast x{:.2f} "
              "(trial wall time: concurrent {:.1f}s, serial {:.1f}s)\n",
              median(r_idle), median(r_busy), third.stats.trials_s, serial_idle.stats.trials_s);
        }
      }
    } catch (const std::exception& e) {
      if (root) std::fprintf(stderr, "bench_profile: %s\n", e.what());
      code = 1;
    }
  }
  return code;
}
