// The `saturn` program: one binary, subcommands as in DESIGN.md's command-line contract.
// main_entry.cpp calls it (saturn; saturn_emu with the emulated CUDA backend).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"

int saturn::cli::run_main(int argc, char** argv) {
  CLI::App app{
      "Saturn: train a batch of large models at once, choosing each job's parallel "
      "strategy, devices and start time to minimise the batch's makespan."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "saturn 0.1.0");
  saturn::cli::Action action;
  saturn::cli::add_data_command(app, &action);
  saturn::cli::add_train_command(app, &action);
  saturn::cli::add_ckpt_command(app, &action);
  saturn::cli::add_sbatch_command(app, &action);
  saturn::cli::add_run_command(app, &action, argc, argv);
  saturn::cli::add_profile_command(app, &action);
  saturn::cli::add_plan_command(app, &action);
  saturn::cli::add_status_command(app, &action);
  saturn::cli::add_cancel_command(app, &action);
  saturn::cli::add_submit_command(app, &action);
  saturn::cli::add_report_command(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : saturn::kExitBadInput;
  }
  try {
    return action ? action() : saturn::kExitBadInput;
  } catch (const saturn::InputError& e) {
    std::fprintf(stderr, "saturn: error: %s\n", e.what());
    return saturn::kExitBadInput;
  } catch (const saturn::OutOfMemoryError& e) {
    std::fprintf(stderr, "saturn: error: %s\n", e.what());
    return saturn::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "saturn: error: %s\n", e.what());
    return saturn::kExitFailure;
  }
}
