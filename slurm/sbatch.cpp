#include "slurm/sbatch.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <optional>

#include "launch/self_launch.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::slurm {
namespace {

std::optional<long> digits_value(std::string_view text) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  long v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// sbatch reads #SBATCH lines itself, without a shell: keep their values plain.
void check_directive_text(std::string_view option, std::string_view value) {
  for (char c : value)
    if (std::isspace(static_cast<unsigned char>(c)) || c == '"' || c == '\'' || c == '\\' ||
        c == '#')
      throw InputError(
          fmt::format("{} \"{}\": must not contain spaces, quotes, '\\' or '#'", option, value));
}

std::string sanitize_job_name(std::string_view name) {
  std::string out;
  for (char c : name)
    out +=
        std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ? c : '_';
  return out;
}

}  // namespace

BatchLauncher parse_launcher(std::string_view name) {
  if (name == "mpirun") return BatchLauncher::kMpirun;
  if (name == "srun") return BatchLauncher::kSrun;
  throw InputError(fmt::format("--launcher {}: expected mpirun or srun", name));
}

long parse_time_limit(std::string_view text) {
  const auto bad = [&](std::string_view why) {
    return InputError(
        fmt::format("--time {}: {} (expected HH:MM:SS or D-HH:MM:SS, e.g. 04:00:00)", text, why));
  };
  std::string_view rest = text;
  long days = 0;
  if (const std::size_t dash = rest.find('-'); dash != rest.npos) {
    const std::optional<long> d = digits_value(rest.substr(0, dash));
    if (!d) throw bad("the days before '-' are not a number");
    days = *d;
    rest.remove_prefix(dash + 1);
  }
  std::array<long, 3> hms{};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::size_t colon = rest.find(':');
    if ((i < 2) != (colon != rest.npos)) throw bad("not three ':'-separated fields");
    const std::string_view field = rest.substr(0, colon);
    const std::optional<long> v = digits_value(field);
    if (!v) throw bad(fmt::format("\"{}\" is not a number", field));
    if (i > 0 && (field.size() != 2 || *v > 59))
      throw bad(fmt::format("\"{}\" is not two digits from 00 to 59", field));
    hms[i] = *v;
    rest.remove_prefix(colon == rest.npos ? rest.size() : colon + 1);
  }
  const long seconds = ((days * 24 + hms[0]) * 60 + hms[1]) * 60 + hms[2];
  if (seconds <= 0) throw bad("the limit must be longer than zero");
  return seconds;
}

void validate_sbatch_options(const SbatchOptions& o) {
  if (o.nodes < 1) throw InputError(fmt::format("--nodes {}: must be at least 1", o.nodes));
  if (o.gpus_per_node < 1)
    throw InputError(
        fmt::format("--gpus-per-node {}: must be at least 1 (Saturn starts one rank "
                    "per GPU)",
                    o.gpus_per_node));
  if (o.cpus_per_task < 0)
    throw InputError(fmt::format("--cpus-per-task {}: must be positive", o.cpus_per_task));
  const long limit = parse_time_limit(o.time);
  if (o.signal_lead_s < 1 || o.signal_lead_s > kMaxSignalLead)
    throw InputError(fmt::format("--signal-lead {}: must be from 1 to {} seconds", o.signal_lead_s,
                                 kMaxSignalLead));
  if (o.signal_lead_s >= limit)
    throw InputError(fmt::format(
        "--signal-lead {}: must be shorter than the time limit --time {} ({} s), or the "
        "checkpoint signal would come before the job starts",
        o.signal_lead_s, o.time, limit));
  if (!o.partition.empty()) check_directive_text("--partition", o.partition);
  if (!o.account.empty()) check_directive_text("--account", o.account);
  for (const auto& [option, path] :
       {std::pair{"--run-dir", &o.run_dir}, std::pair{"workload", &o.workload},
        std::pair{"saturn executable", &o.saturn}}) {
    if (path->empty() || !path->is_absolute())
      throw InputError(fmt::format("{} \"{}\": an absolute path is needed in a batch script",
                                   option, path->string()));
    if (path->string().find('\n') != std::string::npos)
      throw InputError(fmt::format("{}: a path with a newline", option));
  }
  check_directive_text("--run-dir", o.run_dir.string());
  if (!o.device.empty() && o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw InputError(fmt::format("--device {}: expected auto, cpu or cuda", o.device));
}

std::filesystem::path sbatch_script_path(const std::filesystem::path& run_dir) {
  return run_dir / "saturn.sbatch";
}

std::string sbatch_log_pattern(const std::filesystem::path& run_dir) {
  // '%' starts a Slurm file-name pattern; a literal one is written "%%".
  std::string dir;
  for (char c : run_dir.string()) dir += c == '%' ? std::string("%%") : std::string(1, c);
  return dir + "/slurm-%j.out";
}

std::string shell_quote(std::string_view text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string render_sbatch_script(const SbatchOptions& o) {
  validate_sbatch_options(o);
  const std::string job_name =
      sanitize_job_name(o.job_name.empty() ? "saturn-" + o.workload.stem().string() : o.job_name);
  const std::string script_path = sbatch_script_path(o.run_dir).string();
  std::string s;
  auto line = [&s](std::string_view text) {
    s += text;
    s += '\n';
  };
  line("#!/bin/bash");
  line("# Written by `saturn sbatch`; submit it again with: sbatch " + shell_quote(script_path));
  line("# Workload:      " + o.workload.string());
  line("# Run directory: " + o.run_dir.string());
  line("#SBATCH --job-name=" + job_name);
  line(fmt::format("#SBATCH --nodes={}", o.nodes));
  line(fmt::format("#SBATCH --ntasks-per-node={}", o.gpus_per_node));
  line(fmt::format("#SBATCH --gpus-per-node={}", o.gpus_per_node));
  if (o.cpus_per_task > 0) line(fmt::format("#SBATCH --cpus-per-task={}", o.cpus_per_task));
  line("#SBATCH --time=" + o.time);
  if (!o.partition.empty()) line("#SBATCH --partition=" + o.partition);
  if (!o.account.empty()) line("#SBATCH --account=" + o.account);
  line("#SBATCH --requeue");
  line("#SBATCH --open-mode=append");
  line(fmt::format("#SBATCH --signal=B:USR1@{}", o.signal_lead_s));
  line("#SBATCH --output=" + sbatch_log_pattern(o.run_dir));
  line("");
  line("set -u");
  line("run_dir=" + shell_quote(o.run_dir.string()));
  line("# Since Slurm 22.05 srun no longer inherits --cpus-per-task from the allocation.");
  line("if [ -n \"${SLURM_CPUS_PER_TASK:-}\" ]; then");
  line("  export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"");
  line("  export OMP_NUM_THREADS=\"${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}\"");
  line("fi");
  line("# A requeued job starts this script again from the top: continue the same run.");
  line("# (A plain word, not an array: \"${a[@]}\" of an empty array fails under set -u before");
  line("# bash 4.4, which some clusters still run.)");
  line("workload=" + shell_quote(o.workload.string()));
  line("resume=");
  std::string state_test = "[ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ]";
  for (const std::string& entry : RunDir::started_entries())
    state_test += fmt::format(" || [ -e \"$run_dir/{}\" ]", entry);
  line("if " + state_test + "; then");
  line("  resume=--resume");
  line("  # It continues the batch its run directory holds, with that copy of the workload once");
  line("  # the run has recorded its data paths (an edit of the original since would make");
  line("  # --resume refuse it); a start stopped before that begins again from the original.");
  line("  [ -e \"$run_dir/run_state.json\" ] && workload=\"$run_dir/workload.yaml\"");
  line("fi");
  line(
      "echo \"saturn: job ${SLURM_JOB_ID:-?} starts $(date -u +%FT%TZ)"
      " restart_count=${SLURM_RESTART_COUNT:-0} $resume workload=$workload\"");
  line("# USR1 (--signal above, or scancel --batch --signal=USR1) asks the ranks to checkpoint.");
  line("# Bash runs a trap only between commands, hence the launcher in the background.");
  line("child=");
  line("forward_usr1() {");
  line("  echo \"saturn: USR1 at $(date -u +%T), asking the ranks to checkpoint\"");
  line("  [ -n \"$child\" ] && kill -USR1 \"$child\" 2>/dev/null");
  line("}");
  line("trap forward_usr1 USR1");
  const std::string device =
      o.device.empty() || o.device == "auto" ? std::string() : " --device " + o.device;
  const std::string run_command = fmt::format("{} run \"$workload\"{} --run-dir \"$run_dir\"",
                                              shell_quote(o.saturn.string()), device);
  if (o.launcher == BatchLauncher::kMpirun) {
    // Under Slurm, mpirun takes the nodes and slots (ntasks-per-node) from the allocation.
    line(fmt::format("{} -np \"$SLURM_NTASKS\" {} $resume &", shell_quote(o.mpirun), run_command));
  } else {
    line(fmt::format("srun --mpi=pmix --kill-on-bad-exit=1 {} $resume &", run_command));
  }
  line("child=$!");
  line(
      "# A trapped signal interrupts wait: wait until the launcher is gone, then take its status.");
  line("while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; done");
  line("wait \"$child\"");
  line("rc=$?");
  line("echo \"saturn: launcher exited with $rc at $(date -u +%FT%TZ)\"");
  line("if [ \"$rc\" -eq 99 ]; then");
  line("  # 99: every job checkpointed but the batch is not finished: back into the queue.");
  line("  if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi");
  line("  echo \"saturn: scontrol requeue failed; submit again: sbatch " +
       shell_quote(script_path) + "\" >&2");
  line("fi");
  line("exit \"$rc\"");
  return s;
}

void write_sbatch_script(const std::filesystem::path& path, const std::string& script) {
  using std::filesystem::perms;
  write_file_atomic(path, script, Durability::kNone,
                    perms::owner_all | perms::group_read | perms::group_exec | perms::others_read |
                        perms::others_exec);
}

std::string submit_sbatch_script(const std::filesystem::path& script,
                                 const launch::Environment& env) {
  const std::string sbatch = launch::find_on_path(env, "sbatch");
  if (sbatch.empty())
    throw IoError(
        fmt::format("sbatch not found on PATH: submit from a Slurm login node, or "
                    "print the script with --dry-run (it is written to {})",
                    script.string()));
  const std::string command =
      fmt::format("{} --parsable {} 2>&1", shell_quote(sbatch), shell_quote(script.string()));
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw IoError(fmt::format("cannot run {}", sbatch));
  std::string output;
  std::array<char, 512> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), pipe) != nullptr)
    output += buf.data();
  const int status = ::pclose(pipe);
  while (!output.empty() && std::isspace(static_cast<unsigned char>(output.back())))
    output.pop_back();
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw Error(fmt::format("sbatch refused {}: {}", script.string(), output));
  // --parsable prints "JOBID" or "JOBID;CLUSTER", after any warnings on earlier lines.
  const std::size_t last_line = output.rfind('\n');
  std::string id = output.substr(last_line == output.npos ? 0 : last_line + 1);
  id = id.substr(0, id.find(';'));
  if (id.empty() || !std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw Error(fmt::format("sbatch printed no job id for {}: {}", script.string(), output));
  return id;
}

}  // namespace saturn::slurm
