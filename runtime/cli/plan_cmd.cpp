// `saturn plan`: solve SPASE for a batch and print the plan (table + Gantt chart, with its
// lower bound and gap) or write the plan contract as JSON.
//
//   saturn plan --instance INSTANCE.json [--cluster SPEC] [--solver glpk|cbc] [--time-limit S]
//               [--clock work|wall|cpu] [--wall-cap S] [--seed N] [--threads N] [--json]
//               [-o FILE]
//   saturn plan WORKLOAD.yaml [--cluster SPEC] [--store FILE] ...
//
// Planning from a workload file takes every job's candidate configurations from the profile
// store (measured where `saturn profile` tried them) and the analytic cost model for the rest
// (runtime/profile, docs/profiling.md); no trial runs here.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/profile/profiler.hpp"
#include "solver/gantt.hpp"
#include "solver/plan_io.hpp"
#include "solver/problem.hpp"
#include "solver/solve.hpp"

namespace saturn::cli {

namespace {

struct PlanArgs {
  std::string workload, instance, cluster, store, hardware, solver = "glpk", output;
  std::string clock = "work";
  double time_limit = 10.0;
  double wall_cap = 0.0;
  unsigned seed = 1;
  int threads = 1;
  bool json = false;
  bool log = false;
  int width = 72;
};

int run_plan(const PlanArgs& a) {
  try {
    if (a.workload.empty() && a.instance.empty())
      throw InputError("saturn plan: give a workload file or --instance FILE.json");
    // Parse what can be checked before anything is solved, so errors come first.
    const solver::Backend backend = solver::parse_backend(a.solver);
    solver::Cluster cluster;
    if (!a.cluster.empty()) {
      try {
        cluster = solver::parse_cluster_spec(a.cluster);
      } catch (const solver::SolverError& e) {
        throw InputError(fmt::format("--cluster: {}", e.what()));
      }
    }
    solver::Problem problem;
    std::string sources;
    if (!a.workload.empty()) {
      const profile::WorkloadProblem in =
          profile::problem_from_store(a.workload, a.cluster, a.store, a.hardware);
      problem = in.problem;
      solver::check_problem(problem);
      sources = profile::describe_sources(in) + "\n";
    } else {
      problem = solver::read_instance(a.instance);
    }
    if (a.workload.empty() && !a.cluster.empty()) {
      problem.cluster = cluster;
      solver::check_problem(problem);
    }
    solver::SolveOptions options;
    options.backend = backend;
    options.time_limit_s = a.time_limit;
    options.clock = solver::parse_clock_basis(a.clock);
    options.wall_cap_s = a.wall_cap;
    options.seed = a.seed;
    options.threads = a.threads;
    solver::SolveReport report;
    const solver::Plan plan = solver::solve(problem, options, &report);
    if (a.log) {
      // The incumbents and bounds over time, on stderr so that --json output stays a plan.
      std::string log = "time_s     makespan_s    lower_bound_s  gap%    by\n";
      for (const solver::SolveEvent& e : report.log)
        log += fmt::format(
            "{:6.2f} {:14.1f} {:14.1f} {:6.2f}  {}\n", e.time_s, e.makespan_s, e.lower_bound_s,
            e.makespan_s > 0 ? 100 * (e.makespan_s - e.lower_bound_s) / e.makespan_s : 0.0, e.what);
      std::fputs(log.c_str(), stderr);
    }
    const std::string json = solver::plan_to_json(problem, plan).dump(2) + "\n";
    if (!a.output.empty()) solver::write_text_file(a.output, json);
    if (a.json) {
      if (a.output.empty()) std::fputs(json.c_str(), stdout);
      return kExitOk;
    }
    std::string text = sources + solver::plan_summary(problem, plan) + "\n" +
                       solver::plan_table(problem, plan) + "\n" +
                       solver::gantt_chart(problem, plan, a.width);
    if (!a.output.empty()) text += fmt::format("\nplan written to {}\n", a.output);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  } catch (const solver::SolverError& e) {
    // The solver names the file and field; the CLI turns it into a usage error (exit 2).
    throw InputError(e.what());
  }
}

}  // namespace

void add_plan_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = root.add_subcommand(
      "plan",
      "Choose every job's parallelism, devices and start time to minimise the batch's "
      "makespan; print the plan (table and Gantt chart, with lower bound and gap) or its JSON.");
  auto* workload = cmd->add_option("workload", args->workload, "Workload file (YAML)");
  auto* instance = cmd->add_option(
      "--instance", args->instance,
      "Plan an instance file instead (JSON: cluster, jobs with candidate configurations and "
      "times; see docs/solver.md)");
  workload->excludes(instance);
  instance->excludes(workload);
  cmd->add_option("--cluster", args->cluster,
                  "Cluster to plan for: NxG[:MEM] (e.g. 2x8:80GiB) or G+G+... for heterogeneous "
                  "nodes (e.g. 8+4); with --instance it replaces the file's cluster");
  cmd->add_option("--store", args->store,
                  "Profile store (HDF5) from saturn profile (default: runs/<name>/profiles.h5 "
                  "when it exists; else analytic estimates only)");
  cmd->add_option("--hardware", args->hardware,
                  "Which of the store's machines to plan for (its id), when it holds several");
  cmd->add_option("--solver", args->solver, "MILP backend: glpk, or cbc when built with it")
      ->check(CLI::IsMember({"glpk", "cbc"}));
  cmd->add_option("--time-limit", args->time_limit,
                  "Seconds for the whole solve (bounds, heuristics, MILP), on --clock; the best "
                  "plan found is returned")
      ->check(finite_range(0.01, 1e7));
  cmd->add_option("--clock", args->clock,
                  "What the time limit counts: work (default: the solver's work in units of "
                  "about 250 ns, so the same input and seed give the same plan on any machine "
                  "load), wall (wall-clock seconds) or cpu (the solving thread's CPU seconds)")
      ->check(CLI::IsMember({"work", "wall", "cpu"}));
  cmd->add_option("--wall-cap", args->wall_cap,
                  "With --clock work: wall-clock seconds after which the solve stops whatever "
                  "work is left (the plan then says it was cut short); default 3 x --time-limit "
                  "+ 5")
      ->check(finite_range(0.01, 1e7));
  cmd->add_option("--seed", args->seed, "The search's random seed");
  cmd->add_option("--threads", args->threads,
                  "Searches run side by side, each with its own seed; the best plan wins. A "
                  "thread count gives the same plan on any load; more threads, a plan as good or "
                  "better")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--json", args->json, "Print the plan as JSON (the plan contract) instead of text");
  cmd->add_flag("--log", args->log,
                "Print the solve's log to stderr: each new best plan and bound with its time");
  cmd->add_option("-o,--output", args->output, "Also write the plan JSON to this file");
  cmd->add_option("--width", args->width, "Columns of the Gantt chart")
      ->check(CLI::Range(10, 1000));
  cmd->callback([args, action] { *action = [args] { return run_plan(*args); }; });
}

}  // namespace saturn::cli
