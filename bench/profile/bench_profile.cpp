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

struct BenchArgs {
  std::string workload = "examples/sweep.yaml", store, cluster;
  int trials = 1, steps = 2;
  bool interference = true, quick = false;
};

// The five profiles the bench compares: a fresh store, the same store again, the trials again
// (--refresh), and optionally the trials one at a time with idle ranks and with ballast.
struct Runs {
  ProfileResult first, second, third, serial_idle, serial_busy;
};

// Every rank names the same fresh store file (rank 0's pid) unless --store names one.
std::string fresh_store(comm::Communicator& world, std::string path) {
  if (path.empty()) {
    std::int64_t pid = getpid();
    world.broadcast(&pid, 1, 0);
    path =
        (std::filesystem::temp_directory_path() / fmt::format("bench-profile-{}.h5", pid)).string();
  }
  if (world.rank() == 0) std::filesystem::remove(path);
  world.barrier();
  return path;
}

Runs run_profiles(const ProfileRequest& req, comm::Communicator& world, const BenchArgs& a,
                  const std::string& store) {
  ProfileOptions opt;
  opt.store = store;
  opt.trials_per_degree = a.trials;
  opt.trial.measure_steps = a.steps;
  opt.calibration.quick = a.quick;
  Runs r;
  r.first = profile_workload(req, world, opt);
  r.second = profile_workload(req, world, opt);
  ProfileOptions again = opt;
  again.refresh = true;
  r.third = profile_workload(req, world, again);
  if (a.interference) {
    ProfileOptions s = again;
    s.trial.serialize = true;
    s.trial.ballast = false;
    r.serial_idle = profile_workload(req, world, s);
    s.trial.ballast = true;
    r.serial_busy = profile_workload(req, world, s);
  }
  return r;
}

// The batch's makespan as planned from a profile.
double planned_makespan(const ProfileRequest& req, const ProfileResult& profile) {
  solver::Problem problem;
  problem.cluster = req.cluster.nodes.empty() ? cluster_of(profile.hardware) : req.cluster;
  problem.jobs = profile.jobs;
  solver::SolveOptions so;
  so.time_limit_s = 5;
  return solver::solve(problem, so).makespan_s;
}

// Relative errors over the tried configurations, for the metrics table.
struct Errors {
  std::vector<double> est, raw, repeat, memory;
};

// Per configuration tried in the first run: estimate, measurement, the re-measurement.
Errors print_trial_table(const Runs& r) {
  fmt::print("\n{:<11} {:<26} {:>3} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7} {:>7}\n",
             "shape", "config", "dev", "est s", "trial s", "err", "again s", "repeat", "est MiB",
             "peak MiB", "mem err", "comm %", "wall s");
  Errors err;
  const auto again_rows = tried(r.third);
  const double load = r.first.stats.load_factor;
  for (const auto& [key, row] : tried(r.first)) {
    const Measurement& m = *row->measured;
    const double e = rel(row->estimate.step_s, m.step_s);
    err.est.push_back(e);
    err.raw.push_back(rel(row->estimate.step_s / load, m.step_s));
    const double me = rel(static_cast<double>(row->estimate.device_bytes),
                          static_cast<double>(m.peak_device_bytes));
    err.memory.push_back(me);
    std::string again_s = "-", rep = "-";
    if (const auto it = again_rows.find(key); it != again_rows.end()) {
      const double t2 = it->second->measured->step_s;
      again_s = fmt::format("{:.4f}", t2);
      err.repeat.push_back(rel(t2, m.step_s));
      rep = pct(err.repeat.back());
    }
    fmt::print(
        "{:<11} {:<26} {:>3} {:>8.4f} {:>8.4f} {:>8} {:>8} {:>8} {:>8.2f} {:>8.2f} "
        "{:>8} {:>6.0f}% {:>7.2f}\n",
        row->model_name, row->config.label(), row->config.degree, row->estimate.step_s, m.step_s,
        pct(e), again_s, rep, static_cast<double>(row->estimate.device_bytes) / (1 << 20),
        static_cast<double>(m.peak_device_bytes) / (1 << 20), pct(me), 100.0 * m.comm_s / m.step_s,
        m.wall_s);
  }
  return err;
}

void print_metrics(const Runs& r, const Errors& err, double makespan) {
  const ProfileStats& st = r.first.stats;
  const auto line = [](const std::string& metric, const std::string& value,
                       const std::string& target) {
    fmt::print("{:<58} {:>10} {:>8}\n", metric, value, target);
  };
  fmt::print("\n{:<58} {:>10} {:>8}\n", "metric", "value", "target");
  line("median |error| analytic step time vs trial", med_abs(err.est), "15%");
  line(fmt::format("  (without the load factor {:.2f} of this run)", st.load_factor),
       med_abs(err.raw), "");
  line("median |change| trial re-measured in a later run", med_abs(err.repeat), "5%");
  line("median |error| memory estimate vs measured peak", med_abs(err.memory), "15%");
  const double with_cal = st.total_s, without_cal = st.total_s - st.calibration_s;
  line("planned makespan of the batch (from run 1)", fmt::format("{:.1f}s", makespan), "");
  line("profiling, first run on this hardware", fmt::format("{:.1f}s", with_cal), "");
  line("  overhead vs makespan, calibration included",
       fmt::format("{:.1f}%", 100.0 * with_cal / makespan), "");
  line("  overhead vs makespan, calibration stored",
       fmt::format("{:.1f}%", 100.0 * without_cal / makespan), "5%");
  line("second run, same store (trials run)", fmt::format("{:.1f}s", r.second.stats.total_s),
       fmt::format("{} tried", r.second.stats.trials_run));
  line("trials of run 1 (s; scheduled by the estimates)",
       fmt::format("{} ({:.1f}; {:.1f})", st.trials_run, st.trials_s, st.trials_expected_s), "");
}

// The same configurations' step times: concurrent with ballast, serial idle, serial with ballast.
void print_interference(const Runs& r) {
  fmt::print(
      "\nInterference of concurrent trials (step time of the same configuration; "
      "ratio to concurrent+ballast)\n");
  fmt::print("{:<11} {:<26} {:>3} {:>10} {:>14} {:>14}\n", "shape", "config", "dev", "concurrent",
             "serial, idle", "serial, ballast");
  const auto idle = tried(r.serial_idle), busy = tried(r.serial_busy);
  std::vector<double> r_idle, r_busy;
  for (const auto& [key, row] : tried(r.third)) {
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
      median(r_idle), median(r_busy), r.third.stats.trials_s, r.serial_idle.stats.trials_s);
}

}  // namespace

int main(int argc, char** argv) {
  saturn::install_cuda_provider();
  const comm::MpiSession mpi;
  int code = 0;
  {
    auto world = comm::MpiCommunicator::world();
    CLI::App app{"Trial runner benchmark: estimates vs measurements, repeatability, overhead"};
    BenchArgs a;
    app.add_option("--workload", a.workload, "Workload file");
    app.add_option("--store", a.store, "Profile store (default: a fresh temporary file)");
    app.add_option("--cluster", a.cluster, "Cluster spec (default: this run's ranks)");
    app.add_option("--trials", a.trials, "Configurations tried per shape and device count");
    app.add_option("--trial-steps", a.steps, "Timed steps per trial");
    app.add_flag("!--no-interference", a.interference, "Skip the serial re-runs");
    app.add_flag("--quick-calibration", a.quick, "Coarser, faster calibration");
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    try {
      LoadOptions lo;
      lo.check_data_files = false;
      const Workload w = load_workload(a.workload, lo);
      ProfileRequest req;
      req.workload = &w;
      if (!a.cluster.empty()) req.cluster = solver::parse_cluster_spec(a.cluster);
      const Runs runs = run_profiles(req, *world, a, fresh_store(*world, a.store));
      const double makespan = planned_makespan(req, runs.first);
      if (world->rank() == 0) {
        fmt::print("# bench_profile: {} on {} ranks\n", a.workload, world->size());
        fmt::print("hardware: {}\n", runs.first.hardware.describe());
        fmt::print("{}", format_profile_summary(runs.first));
        const Errors err = print_trial_table(runs);
        print_metrics(runs, err, makespan);
        if (a.interference) print_interference(runs);
      }
    } catch (const std::exception& e) {
      if (world->rank() == 0) std::fprintf(stderr, "bench_profile: %s\n", e.what());
      code = 1;
    }
  }
  return code;
}
