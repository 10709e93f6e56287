// `saturn plan`: solve SPASE for a batch and print the plan (table + Gantt chart, with its
// lower bound and gap) or write the plan contract as JSON.
//
//   saturn plan --instance INSTANCE.json [--cluster SPEC] [--solver glpk|cbc] [--time-limit S]
//               [--json] [-o FILE]
//   saturn plan WORKLOAD.yaml [--cluster SPEC] [--store FILE] ...
//
// Planning from a workload file needs candidate configurations with estimated times for every
// job (from a profile store or the analytic cost model); until that exists the workload form
// is an input error that says so. The solver side of it is solver::plan_jobs.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "solver/gantt.hpp"
#include "solver/plan_io.hpp"
#include "solver/problem.hpp"
#include "solver/solve.hpp"

namespace saturn::cli {

namespace {

struct PlanArgs {
  std::string workload, instance, cluster, store, solver = "glpk", output;
  double time_limit = 10.0;
  bool json = false;
  int width = 72;
};

int run_plan(const PlanArgs& a) {
  try {
    if (a.workload.empty() && a.instance.empty())
      throw InputError("saturn plan: give a workload file or --instance FILE.json");
    // Parse what can be checked before anything is solved, so errors come first.
    const solver::Backend backend = solver::parse_backend(a.solver);
    solver::Cluster cluster;
    if (!a.cluster.empty()) cluster = solver::parse_cluster_spec(a.cluster);
    if (!a.workload.empty())
      throw InputError(fmt::format(
          "{}: planning from a workload file needs each job's candidate configurations with "
          "estimated times (a profile store or the analytic cost model), which this build does "
          "not provide yet; plan an instance file instead: saturn plan --instance FILE.json "
          "(format in docs/solver.md)",
          a.workload));
    solver::Problem problem = solver::read_instance(a.instance);
    if (!a.cluster.empty()) {
      problem.cluster = cluster;
      solver::check_problem(problem);
    }
    solver::SolveOptions options;
    options.backend = backend;
    options.time_limit_s = a.time_limit;
    const solver::Plan plan = solver::solve(problem, options);
    const std::string json = solver::plan_to_json(problem, plan).dump(2) + "\n";
    if (!a.output.empty()) solver::write_text_file(a.output, json);
    if (a.json) {
      if (a.output.empty()) std::fputs(json.c_str(), stdout);
      return kExitOk;
    }
    std::string text = solver::plan_summary(problem, plan) + "\n" +
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
  cmd->add_option("--store", args->store, "Profile store (HDF5) with measured step times");
  cmd->add_option("--solver", args->solver, "MILP backend: glpk, or cbc when built with it")
      ->check(CLI::IsMember({"glpk", "cbc"}));
  cmd->add_option("--time-limit", args->time_limit,
                  "Seconds for the whole solve (bounds, heuristics, MILP); the best plan found "
                  "is returned")
      ->check(CLI::Range(0.01, 1e7));
  cmd->add_flag("--json", args->json, "Print the plan as JSON (the plan contract) instead of text");
  cmd->add_option("-o,--output", args->output, "Also write the plan JSON to this file");
  cmd->add_option("--width", args->width, "Columns of the Gantt chart")
      ->check(CLI::Range(10, 1000));
  cmd->callback([args, action] { *action = [args] { return run_plan(*args); }; });
}

}  // namespace saturn::cli
