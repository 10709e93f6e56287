// `saturn cancel RUN_DIR JOB_ID...`: asks the batch in RUN_DIR to cancel jobs. The request is a
// file in RUN_DIR/spool (runtime/exec/spool.hpp) that rank 0 takes within a second while the
// run goes on, or at `saturn run --resume`. The ids are checked against the run's workload
// first: an unknown one is exit 2 and nothing is written. No MPI.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/exec/spool.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::cli {

namespace {

namespace fs = std::filesystem;

struct CancelArgs {
  std::string run_dir;
  std::vector<std::string> jobs;
};

int run_cancel(const CancelArgs& a) {
  const fs::path dir = a.run_dir;
  if (!RunDir(dir).holds_run() || !fs::exists(RunDir(dir).workload_copy()))
    throw InputError(
        fmt::format("{} holds no run of `saturn run` (no timeline.jsonl and "
                    "workload.yaml)",
                    dir.string()));
  // The batch as it stands: the run's copy of the workload and the accepted submissions.
  const Workload w = load_batch_workload(dir);
  for (const auto& id : a.jobs) find_job(w, id);  // InputError naming the valid ids
  const fs::path file = exec::write_cancel_request(dir, a.jobs);
  std::printf(
      "cancel requested for %zu job(s): %s\n  a running batch takes it within a second; "
      "otherwise `saturn run --resume %s` does\n",
      a.jobs.size(), file.string().c_str(), dir.string().c_str());
  return kExitOk;
}

}  // namespace

void add_cancel_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<CancelArgs>();
  CLI::App* cmd = root.add_subcommand(
      "cancel",
      "Cancel jobs of a batch while it runs: a job not running ends at once, a running one at "
      "its next step (with a checkpoint); status `cancelled` in summary.json.");
  cmd->add_option("run_dir", args->run_dir, "Run directory of `saturn run`")->required();
  cmd->add_option("job_ids", args->jobs, "Ids of the jobs to cancel")->required();
  cmd->callback([args, action] { *action = [args] { return run_cancel(*args); }; });
}

}  // namespace saturn::cli
