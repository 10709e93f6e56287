// `saturn status RUN_DIR [--watch SECONDS]`: where a batch stands, as terminal text, from the
// files the run writes as it goes (runtime/report, docs/report.md). No MPI.
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/report/run_data.hpp"

namespace saturn::cli {

namespace {

struct StatusArgs {
  std::string run_dir;
  double watch_s = 0;
};

int run_status(const StatusArgs& a) {
  if (a.watch_s < 0) throw InputError("--watch: seconds between refreshes must be positive");
  if (a.watch_s == 0) {
    std::fputs(report::render_status(report::read_run(a.run_dir)).c_str(), stdout);
    return kExitOk;
  }
  const bool tty = isatty(STDOUT_FILENO) != 0;
  for (;;) {
    const report::RunData run = report::read_run(a.run_dir);
    // On a terminal, redraw in place; into a file or pipe, one block per refresh.
    std::string text = report::render_status(run);
    if (tty)
      text = "\x1b[H\x1b[2J" + text;
    else
      text += "\n";
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    if (run.ended) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(a.watch_s));
  }
}

}  // namespace

void add_status_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* cmd = root.add_subcommand(
      "status",
      "Print where a batch stands from its run directory (readable while the run is going): "
      "per job strategy x devices, step/total, last loss, val loss, tokens/s, ETA, status; the "
      "batch's elapsed time and ETA.");
  cmd->add_option("run_dir", args->run_dir, "Run directory of `saturn run`")->required();
  cmd->add_option("--watch", args->watch_s,
                  "Refresh every SECONDS until the run ends (Ctrl-C to leave)")
      ->type_name("SECONDS")
      ->check(finite_range(0.0, 1e6));
  cmd->callback([args, action] { *action = [args] { return run_status(*args); }; });
}

}  // namespace saturn::cli
