// `saturn report RUN_DIR [-o FILE]`: the run directory as one self-contained HTML page
// (runtime/report, docs/report.md). No MPI: runs on a login node, during or after the run.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "runtime/cli/commands.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/report/run_data.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::cli {

namespace {

struct ReportArgs {
  std::string run_dir, output;
};

int run_report(const ReportArgs& a) {
  const std::filesystem::path out =
      a.output.empty() ? RunDir(a.run_dir).report_file() : std::filesystem::path(a.output);
  check_output_file(out);  // before reading the run: a refused -o costs nothing
  const report::RunData run = report::read_run(a.run_dir);
  const std::string html = report::render_html(run);
  // Through a temporary name: a browser reloading the page never sees half of it.
  write_file_atomic(out, html);
  std::printf("wrote %s (%zu jobs, %zu plans%s)\n", out.string().c_str(), run.jobs.size(),
              run.plans.size(), run.ended ? "" : ", run not ended");
  return kExitOk;
}

}  // namespace

void add_report_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<ReportArgs>();
  CLI::App* cmd = root.add_subcommand(
      "report",
      "Write a self-contained HTML report of a run directory: devices over time (planned and "
      "actual, re-plans and failures marked), loss curves of every job, a table of jobs, "
      "makespan against prediction and lower bound, device utilisation. Works during a run, "
      "and on interrupted, resumed or failed runs.");
  cmd->add_option("run_dir", args->run_dir, "Run directory of `saturn run`")->required();
  cmd->add_option("-o,--output", args->output, "HTML file to write (default RUN_DIR/report.html)");
  cmd->callback([args, action] { *action = [args] { return run_report(*args); }; });
}

}  // namespace saturn::cli
