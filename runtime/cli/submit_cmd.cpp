// `saturn submit RUN_DIR MORE.yaml`: adds jobs to the batch in RUN_DIR. MORE.yaml is checked
// against the batch as it stands (its workload, the submissions accepted and those still
// waiting): on any mistake exit 2 with FILE:LINE:COL and the field, and nothing is written.
// Otherwise one request goes to RUN_DIR/spool (runtime/exec/spool.hpp), which rank 0 takes
// within a second while the run goes on (or `saturn run --resume` does): it checks the ids
// once more against submissions accepted meanwhile, plans the jobs and runs them. No MPI.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
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

struct SubmitArgs {
  std::string run_dir;
  std::string file;
};

int run_submit(const SubmitArgs& a) {
  const fs::path dir = a.run_dir;
  if (!RunDir(dir).holds_run() || !fs::exists(RunDir(dir).workload_copy()))
    throw InputError(fmt::format(
        "{} holds no run of `saturn run` (no timeline.jsonl and workload.yaml)", dir.string()));
  const fs::path file = fs::absolute(a.file).lexically_normal();
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) throw InputError(fmt::format("{}: no such file", a.file));
  if (fs::file_size(file, ec) > limits::kFileBytes)
    throw InputError(fmt::format("{}: larger than {} bytes", file.string(), limits::kFileBytes));
  std::ifstream in(file, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in && !in.eof()) throw IoError(fmt::format("{}: cannot read", file.string()));

  // The batch as it stands: accepted submissions and those still waiting in the spool (one
  // that rank 0 will reject, e.g. a racing submission that reuses an id, does not count).
  const Workload base = load_batch_base(dir);
  std::vector<Submission> earlier = accepted_submissions(dir);
  std::size_t before =
      earlier.empty() ? base.jobs.size() : add_submissions(base, earlier).jobs.size();
  for (auto& s : exec::waiting_submissions(dir)) {
    earlier.push_back(std::move(s));
    try {
      LoadOptions checked_when_written;
      checked_when_written.check_data_files = false;
      before = add_submissions(base, earlier, checked_when_written).jobs.size();
    } catch (const InputError& e) {
      std::fprintf(stderr, "note: a request waiting in %s will be rejected: %s\n",
                   exec::spool_dir(dir).string().c_str(), e.what());
      earlier.pop_back();
    }
  }
  std::vector<Submission> all = earlier;
  all.push_back({file, text.str()});
  LoadOptions checks;  // the new jobs' data: files exist, tokens fit their models
  const Workload w = add_submissions(base, all, checks);
  std::vector<std::string> ids;
  for (std::size_t j = before; j < w.jobs.size(); ++j) ids.push_back(w.jobs[j].id);

  const fs::path request = exec::write_submit_request(dir, all.back(), ids);
  std::string list;
  for (const auto& id : ids) list += (list.empty() ? "" : ", ") + id;
  std::printf(
      "submitted %zu job(s) to %s: %s\n  request: %s\n  a running batch takes it within a "
      "second; otherwise `saturn run --resume %s` does\n",
      ids.size(), dir.string().c_str(), list.c_str(), request.string().c_str(),
      dir.string().c_str());
  return kExitOk;
}

}  // namespace

void add_submit_command(CLI::App& root, Action* action) {
  auto args = std::make_shared<SubmitArgs>();
  CLI::App* cmd = root.add_subcommand(
      "submit",
      "Add the jobs of MORE.yaml to the batch in RUN_DIR while it runs (or before `saturn run "
      "--resume`).\n"
      "MORE.yaml holds `jobs:` (jobs and sweeps, as in a workload) and optionally `models:` (new\n"
      "names), `defaults:` (over the batch's) and `data:` (its own token files; default: the\n"
      "batch's). It is checked against the batch: YAML, keys, values, ids new to the batch and\n"
      "to earlier submissions, models and data that exist. The request goes to RUN_DIR/spool;\n"
      "rank 0 takes it within a second, keeps it in RUN_DIR/submitted (a resumed or requeued\n"
      "run has the jobs too), plans the jobs and runs them.\n"
      "Exit codes: 0 request written; 2 a mistake in MORE.yaml or RUN_DIR (FILE:LINE:COL and\n"
      "the field; nothing written).");
  cmd->add_option("run_dir", args->run_dir, "Run directory of `saturn run`")->required();
  cmd->add_option("more_yaml", args->file, "YAML with the jobs to add")->required();
  cmd->callback([args, action] { *action = [args] { return run_submit(*args); }; });
}

}  // namespace saturn::cli
