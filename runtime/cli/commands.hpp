// Subcommands of the `saturn` executable. Each add_*_command registers its CLI11 subcommand
// and, when that subcommand is chosen, stores in *action the function main() runs after
// parsing. The action returns the process exit code (0, 2, 99, 1: see runtime/core/error.hpp)
// or throws; main() maps typed errors to exit codes and prints one clear message.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace saturn::cli {

using Action = std::function<int()>;

// A CLI11 check: a number in [lo, hi], and finite (CLI::Range lets nan through, and a nan
// interval or time limit would reach sleeps and solvers). Out of range is a usage error (exit 2)
// naming the flag and the valid range.
inline CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double x = 0;
        if (!CLI::detail::lexical_cast(text, x) || !(x >= lo && x <= hi))
          return "'" + text + "' is out of range (valid: " + CLI::detail::to_string(lo) + " to " +
                 CLI::detail::to_string(hi) + ")";
        return std::string();
      },
      "NUMBER in [" + CLI::detail::to_string(lo) + ", " + CLI::detail::to_string(hi) + "]");
}

void add_data_command(CLI::App& root, Action* action);    // data_cmd.cpp
void add_train_command(CLI::App& root, Action* action);   // train_cmd.cpp
void add_plan_command(CLI::App& root, Action* action);    // plan_cmd.cpp
void add_ckpt_command(CLI::App& root, Action* action);    // ckpt_cmd.cpp
void add_sbatch_command(CLI::App& root, Action* action);  // sbatch_cmd.cpp
// run_cmd.cpp; argv is what --np relaunches under mpirun.
void add_run_command(CLI::App& root, Action* action, int argc, char** argv);
void add_profile_command(CLI::App& root, Action* action);  // profile_cmd.cpp
void add_report_command(CLI::App& root, Action* action);   // report_cmd.cpp
void add_status_command(CLI::App& root, Action* action);   // status_cmd.cpp
void add_cancel_command(CLI::App& root, Action* action);   // cancel_cmd.cpp
void add_submit_command(CLI::App& root, Action* action);   // submit_cmd.cpp

// The whole program (main.cpp): parses, runs the chosen action, maps errors to exit codes.
int run_main(int argc, char** argv);

}  // namespace saturn::cli
