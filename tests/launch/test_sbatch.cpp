// The batch script of `saturn sbatch`: directives, launch lines, requeue and resume logic,
// validation, and the command line (--dry-run; submission through a stand-in sbatch).
#include <stdlib.h>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "runtime/cli/commands.hpp"
#include "runtime/core/error.hpp"
#include "runtime/data/token_file.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "slurm/sbatch.hpp"
#include "tests/data/test_util.hpp"

namespace saturn::slurm {
namespace {

using saturn::testing::error_of;
using saturn::testing::TempDir;
using saturn::testing::write_file;

SbatchOptions base_options() {
  SbatchOptions o;
  o.workload = "/home/u/sweep.yaml";
  o.run_dir = "/scratch/u/runs/gpt-sweep";
  o.saturn = "/opt/saturn/bin/saturn";
  o.mpirun = "/usr/bin/mpirun";
  o.job_name = "saturn-gpt-sweep";
  o.nodes = 2;
  o.gpus_per_node = 4;
  o.time = "04:00:00";
  return o;
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

// Runs `command` through sh; stdout, and the exit status in *rc.
std::string shell(const std::string& command, int* rc) {
  FILE* p = ::popen(command.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf{};
  while (p != nullptr && std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  const int status = p ? ::pclose(p) : -1;
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

TEST(TimeLimit, Parses) {
  EXPECT_EQ(parse_time_limit("04:00:00"), 4 * 3600);
  EXPECT_EQ(parse_time_limit("00:00:30"), 30);
  EXPECT_EQ(parse_time_limit("48:00:00"), 48 * 3600);
  EXPECT_EQ(parse_time_limit("1:02:03"), 3723);
  EXPECT_EQ(parse_time_limit("1-00:00:00"), 86400);
  EXPECT_EQ(parse_time_limit("2-12:30:00"), 2 * 86400 + 12 * 3600 + 30 * 60);
}

TEST(TimeLimit, RejectsOtherForms) {
  for (const char* bad :
       {"", "4:00", "04", "04:60:00", "04:00:60", "1:2:3", "00:00:00", "0-00:00:00", "abc",
        "-01:00:00", "1-2-03:00:00", "04:00:00:00", "04:0a:00", " 04:00:00"}) {
    const std::string msg = error_of<InputError>([&] { parse_time_limit(bad); });
    EXPECT_NE(msg.find("--time"), std::string::npos) << bad;
    EXPECT_NE(msg.find("HH:MM:SS"), std::string::npos) << bad;
  }
}

TEST(SbatchScript, DirectivesForOneRankPerGpu) {
  const std::string s = render_sbatch_script(base_options());
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line :
       {"#SBATCH --job-name=saturn-gpt-sweep", "#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4", "#SBATCH --time=04:00:00", "#SBATCH --requeue",
        "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@300",
        "#SBATCH --output=/scratch/u/runs/gpt-sweep/slurm-%j.out"})
    EXPECT_TRUE(has_line(s, line)) << line << "\n" << s;
  EXPECT_EQ(s.find("--partition"), std::string::npos);
  EXPECT_EQ(s.find("--account"), std::string::npos);
  EXPECT_EQ(s.find("#SBATCH --cpus-per-task"), std::string::npos);

  SbatchOptions o = base_options();
  o.partition = "gpu";
  o.account = "proj42";
  o.cpus_per_task = 8;
  o.signal_lead_s = 600;
  const std::string t = render_sbatch_script(o);
  EXPECT_TRUE(has_line(t, "#SBATCH --partition=gpu"));
  EXPECT_TRUE(has_line(t, "#SBATCH --account=proj42"));
  EXPECT_TRUE(has_line(t, "#SBATCH --cpus-per-task=8"));
  EXPECT_TRUE(has_line(t, "#SBATCH --signal=B:USR1@600"));
  // Every directive comes before the first command, or sbatch ignores it.
  const std::size_t first_command = t.find("\nset -u\n");
  EXPECT_LT(t.rfind("#SBATCH"), first_command);
}

TEST(SbatchScript, LaunchLines) {
  SbatchOptions o = base_options();
  std::string s = render_sbatch_script(o);
  EXPECT_TRUE(has_line(s,
                       "'/usr/bin/mpirun' -np \"$SLURM_NTASKS\" '/opt/saturn/bin/saturn' run "
                       "\"$workload\" --run-dir \"$run_dir\" $resume &"))
      << s;
  EXPECT_TRUE(has_line(s, "run_dir='/scratch/u/runs/gpt-sweep'"));
  EXPECT_TRUE(has_line(s, "workload='/home/u/sweep.yaml'"));
  o.launcher = BatchLauncher::kSrun;
  s = render_sbatch_script(o);
  EXPECT_TRUE(has_line(s,
                       "srun --mpi=pmix --kill-on-bad-exit=1 '/opt/saturn/bin/saturn' run "
                       "\"$workload\" --run-dir \"$run_dir\" $resume &"))
      << s;
  EXPECT_EQ(s.find("mpirun"), std::string::npos);
}

// --device reaches saturn run in the script; auto (the default) is run's own default, so the
// line stays as it was; anything else is refused before a script exists.
TEST(SbatchScript, DeviceReachesRun) {
  SbatchOptions o = base_options();
  o.device = "cuda";
  EXPECT_TRUE(has_line(render_sbatch_script(o),
                       "'/usr/bin/mpirun' -np \"$SLURM_NTASKS\" '/opt/saturn/bin/saturn' run "
                       "\"$workload\" --device cuda --run-dir \"$run_dir\" $resume &"));
  o.device = "auto";
  EXPECT_EQ(render_sbatch_script(o).find("--device"), std::string::npos);
  o.device = "gpu";
  EXPECT_THROW(render_sbatch_script(o), InputError);
}

TEST(SbatchScript, SignalRequeueResume) {
  const std::string s = render_sbatch_script(base_options());
  EXPECT_TRUE(has_line(s, "trap forward_usr1 USR1")) << s;
  EXPECT_TRUE(has_line(s, "  [ -n \"$child\" ] && kill -USR1 \"$child\" 2>/dev/null"));
  EXPECT_TRUE(has_line(s, "while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; done"));
  EXPECT_TRUE(has_line(s, "if [ \"$rc\" -eq 99 ]; then"));
  EXPECT_TRUE(has_line(s, "  if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi"));
  EXPECT_TRUE(has_line(s, "  export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\""));
  EXPECT_TRUE(has_line(s,
                       "if [ \"${SLURM_RESTART_COUNT:-0}\" -gt 0 ] || [ -e "
                       "\"$run_dir/timeline.jsonl\" ] || [ -e \"$run_dir/plans\" ] || [ -e "
                       "\"$run_dir/jobs\" ]; then"))
      << s;
  EXPECT_TRUE(has_line(s, "  resume=--resume"));
  EXPECT_TRUE(has_line(s, "exit \"$rc\""));
}

// The script's shell logic, run by bash with a stand-in launcher: resume detection, the wait
// loop across a forwarded USR1, and the requeue on 99 (scontrol is a stand-in too).
TEST(SbatchScript, RunsUnderBashWithStandIns) {
  TempDir dir;
  SbatchOptions o = base_options();
  o.run_dir = dir / "run";
  o.mpirun = (dir / "mpirun").string();
  const std::string log = (dir / "log").string();
  // The stand-in launcher records its arguments; on USR1 it exits 99.
  write_file(o.mpirun, "#!/bin/bash\ntrap 'echo usr1 >> \"" + log +
                           "\"; exit 99' USR1\necho \"launcher $*\" >> '" + log +
                           "'\nfor i in $(seq 1 200); do sleep 0.05; done\nexit 3\n");
  write_file(dir / "bin" / "scontrol", "#!/bin/bash\necho \"scontrol $*\" >> '" + log + "'\n");
  std::filesystem::permissions(o.mpirun, std::filesystem::perms::owner_all);
  std::filesystem::permissions(dir / "bin" / "scontrol", std::filesystem::perms::owner_all);
  std::filesystem::create_directories(o.run_dir);
  const std::string script = (dir / "job.sh").string();
  write_file(script, render_sbatch_script(o));

  int rc = -1;
  shell("bash -n '" + script + "'", &rc);
  ASSERT_EQ(rc, 0) << "bash -n found a syntax error";

  // First start: no --resume; USR1 to the batch shell reaches the launcher, 99 -> requeue.
  const std::string env =
      "PATH='" + (dir / "bin").string() + "':/usr/bin:/bin SLURM_JOB_ID=77 SLURM_NTASKS=2 ";
  shell(env + "bash '" + script + "' & pid=$!; while ! grep -q launcher '" + log +
            "' 2>/dev/null; do sleep 0.05; done; kill -USR1 $pid; wait $pid; echo $?",
        &rc);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(
      text.str().find("launcher -np 2 /opt/saturn/bin/saturn run /home/u/sweep.yaml --run-dir"),
      std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("--resume"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("usr1\nscontrol requeue 77\n"), std::string::npos) << text.str();

  // Second start after the requeue: SLURM_RESTART_COUNT=1 adds --resume, and the run continues
  // the batch its directory holds (its copy of the workload, once the run has written one); a
  // plain exit code comes back unchanged.
  std::filesystem::remove(log);
  write_file(o.mpirun, "#!/bin/bash\necho \"launcher $*\" >> '" + log + "'\nexit 5\n");
  const std::string out =
      shell(env + "SLURM_RESTART_COUNT=1 bash '" + script + "'; echo \"rc=$?\"", &rc);
  std::ifstream in2(log);
  std::stringstream text2;
  text2 << in2.rdbuf();
  EXPECT_NE(
      text2.str().find("run /home/u/sweep.yaml --run-dir " + o.run_dir.string() + " --resume"),
      std::string::npos)
      << text2.str();
  // With the run's copy but no run_state.json (the start stopped before it recorded its data
  // paths) the original again; once run_state.json exists, the copy.
  const std::string copy_line = "run " + (o.run_dir / "workload.yaml").string() + " --run-dir " +
                                o.run_dir.string() + " --resume";
  const auto resumed_start = [&] {
    std::filesystem::remove(log);
    shell(env + "SLURM_RESTART_COUNT=1 bash '" + script + "' >/dev/null", &rc);
    std::ifstream started(log);
    std::stringstream launched;
    launched << started.rdbuf();
    return launched.str();
  };
  write_file(o.run_dir / "workload.yaml", "name: copy\n");
  const std::string before_state = resumed_start();
  EXPECT_NE(before_state.find("run /home/u/sweep.yaml --run-dir"), std::string::npos)
      << before_state;
  write_file(o.run_dir / "run_state.json", "{}\n");
  const std::string after_state = resumed_start();
  EXPECT_NE(after_state.find(copy_line), std::string::npos) << after_state;
  std::filesystem::remove(o.run_dir / "workload.yaml");
  std::filesystem::remove(o.run_dir / "run_state.json");
  EXPECT_NE(out.find("rc=5"), std::string::npos) << out;

  // State in the run directory also resumes (a resubmitted script, restart count 0).
  std::filesystem::remove(log);
  std::filesystem::create_directories(o.run_dir / "jobs");
  shell(env + "bash '" + script + "' >/dev/null", &rc);
  std::ifstream in3(log);
  std::stringstream text3;
  text3 << in3.rdbuf();
  EXPECT_NE(text3.str().find("--resume"), std::string::npos) << text3.str();
}

TEST(SbatchScript, RejectsBadOptions) {
  const auto error = [](const std::function<void(SbatchOptions&)>& change) {
    SbatchOptions o = base_options();
    change(o);
    return error_of<InputError>([&] { render_sbatch_script(o); });
  };
  EXPECT_NE(error([](auto& o) { o.nodes = 0; }).find("--nodes 0"), std::string::npos);
  EXPECT_NE(error([](auto& o) { o.gpus_per_node = 0; }).find("--gpus-per-node 0"),
            std::string::npos);
  EXPECT_NE(error([](auto& o) { o.gpus_per_node = -2; }).find("at least 1"), std::string::npos);
  EXPECT_NE(error([](auto& o) { o.time = "4h"; }).find("--time 4h"), std::string::npos);
  EXPECT_NE(
      error([](auto& o) {
        o.time = "00:05:00";
        o.signal_lead_s = 300;
      }).find("--signal-lead 300: must be shorter than the time limit --time 00:05:00 (300 s)"),
      std::string::npos);
  EXPECT_NE(error([](auto& o) { o.signal_lead_s = 0; }).find("--signal-lead 0"), std::string::npos);
  EXPECT_NE(error([](auto& o) {
              o.time = "30-00:00:00";
              o.signal_lead_s = 70000;
            }).find("from 1 to 65535"),
            std::string::npos);
  EXPECT_NE(error([](auto& o) { o.partition = "gpu a100"; }).find("--partition"),
            std::string::npos);
  EXPECT_NE(error([](auto& o) { o.account = "a#b"; }).find("--account"), std::string::npos);
  EXPECT_NE(error([](auto& o) { o.run_dir = "runs/x"; }).find("absolute path"), std::string::npos);
  EXPECT_NE(error([](auto& o) { o.run_dir = "/scratch/my runs"; }).find("--run-dir"),
            std::string::npos);
  EXPECT_NE(error([](auto& o) { o.workload = "w.yaml"; }).find("workload"), std::string::npos);
  EXPECT_THROW(parse_launcher("mpiexec"), InputError);
  EXPECT_EQ(parse_launcher("srun"), BatchLauncher::kSrun);
}

TEST(SbatchScript, QuotingAndPercent) {
  SbatchOptions o = base_options();
  o.run_dir = "/scratch/u/100%";
  const std::string s = render_sbatch_script(o);
  EXPECT_TRUE(has_line(s, "#SBATCH --output=/scratch/u/100%%/slurm-%j.out")) << s;
  EXPECT_TRUE(has_line(s, "run_dir='/scratch/u/100%'"));
  int rc = -1;
  for (const std::string text : {"plain", "it's", "$HOME `x` \"q\" \\", ""}) {
    EXPECT_EQ(shell("printf %s " + shell_quote(text), &rc), text);
    EXPECT_EQ(rc, 0);
  }
}

// slurm/templates/saturn.sbatch carries the same logic for hand-written scripts (the local
// Slurm test runs it through a requeue).
TEST(SbatchTemplate, HasTheSameConventions) {
  const char* source = std::getenv("SATURN_SOURCE_DIR");
  ASSERT_NE(source, nullptr);
  const std::string path = std::string(source) + "/slurm/templates/saturn.sbatch";
  std::ifstream in(path);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string t = text.str();
  for (const char* line :
       {"#SBATCH --requeue", "#SBATCH --open-mode=append", "#SBATCH --signal=B:USR1@300",
        "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-node=4", "trap forward_usr1 USR1",
        "  export SRUN_CPUS_PER_TASK=\"$SLURM_CPUS_PER_TASK\"",
        "while kill -0 \"$child\" 2>/dev/null; do wait \"$child\"; done",
        "  if scontrol requeue \"$SLURM_JOB_ID\"; then exit 0; fi", "  resume=--resume"})
    EXPECT_TRUE(has_line(t, line)) << line;
  for (const std::string& entry : RunDir::started_entries())
    EXPECT_NE(t.find(fmt::format("[ -e \"$RUN_DIR/{}\" ]", entry)), std::string::npos) << entry;
  int rc = -1;
  shell("bash -n '" + path + "'", &rc);
  EXPECT_EQ(rc, 0);
}

TEST(SbatchScript, WriteIsAtomicAndExecutable) {
  TempDir dir;
  const auto path = sbatch_script_path(dir.path());
  EXPECT_EQ(path.filename(), "saturn.sbatch");
  write_sbatch_script(path, "#!/bin/bash\nexit 0\n");
  EXPECT_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  EXPECT_NE(std::filesystem::status(path).permissions() & std::filesystem::perms::owner_exec,
            std::filesystem::perms::none);
}

// The `saturn sbatch` command line, through CLI11 as main() drives it.
class SbatchCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    // Real token files: the workload's data is opened and checked when it is loaded.
    const std::vector<std::uint16_t> tokens(64, 7);
    std::filesystem::create_directories(dir_ / "data");
    data::write_llmc_tokens(dir_ / "data" / "train.bin", tokens);
    data::write_llmc_tokens(dir_ / "data" / "val.bin", tokens);
    write_file(dir_ / "w.yaml",
               "name: tiny\ndata: {train: data/train.bin, val: data/val.bin}\n"
               "defaults: {seq_len: 16, steps: 10}\n"
               "models: {m: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}}\n"
               "jobs:\n  - {model: m, lr: 1e-3, batch_size: 4}\n");
  }
  // Parses and runs; returns the exit code, stdout in *out.
  int run(std::vector<std::string> args, std::string* out) {
    CLI::App app;
    cli::Action action;
    cli::add_sbatch_command(app, &action);
    args.insert(args.begin(), "sbatch");
    std::reverse(args.begin(), args.end());
    app.parse(args);
    ::testing::internal::CaptureStdout();
    int rc = -1;
    try {
      rc = action();
    } catch (...) {
      *out = ::testing::internal::GetCapturedStdout();
      throw;
    }
    *out = ::testing::internal::GetCapturedStdout();
    return rc;
  }
  TempDir dir_;
};

TEST_F(SbatchCommand, DryRunPrintsAndWritesNothing) {
  std::string out;
  const std::string run_dir = (dir_ / "runs" / "tiny").string();
  EXPECT_EQ(run({(dir_ / "w.yaml").string(), "--nodes", "1", "--gpus-per-node", "2", "--time",
                 "00:10:00", "--run-dir", run_dir, "--dry-run"},
                &out),
            0);
  EXPECT_TRUE(has_line(out, "#SBATCH --ntasks-per-node=2")) << out;
  EXPECT_TRUE(has_line(out, "#SBATCH --job-name=saturn-tiny")) << out;
  EXPECT_TRUE(has_line(out, "workload='" + (dir_ / "w.yaml").string() + "'")) << out;
  EXPECT_FALSE(std::filesystem::exists(run_dir));
}

TEST_F(SbatchCommand, BadInputIsAnInputError) {
  std::string out;
  const std::string w = (dir_ / "w.yaml").string();
  EXPECT_THROW(
      run({w, "--nodes", "1", "--gpus-per-node", "2", "--time", "10:00", "--dry-run"}, &out),
      InputError);
  EXPECT_THROW(run({w, "--nodes", "1", "--gpus-per-node", "2", "--time", "00:10:00", "--launcher",
                    "ssh", "--dry-run"},
                   &out),
               InputError);
  EXPECT_THROW(run({(dir_ / "missing.yaml").string(), "--nodes", "1", "--gpus-per-node", "2",
                    "--time", "00:10:00", "--dry-run"},
                   &out),
               InputError);
  EXPECT_THROW(run({w, "--gpus-per-node", "2", "--time", "00:10:00"}, &out), CLI::ParseError);
}

// A run directory that holds a run resumes it with its own copy: a WORKLOAD whose text differs
// is refused (it would be ignored), the same text is accepted (the job continues that run).
TEST_F(SbatchCommand, RunDirectoryOfAnotherWorkloadIsRefused) {
  const auto run_dir = dir_ / "held";
  std::filesystem::create_directories(run_dir);
  write_file(run_dir / "timeline.jsonl", "");
  std::ifstream in(dir_ / "w.yaml", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  write_file(run_dir / "workload.yaml", text.str() + "# edited\n");
  const std::vector<std::string> args = {(dir_ / "w.yaml").string(),
                                         "-N",
                                         "1",
                                         "--gpus-per-node",
                                         "2",
                                         "-t",
                                         "00:10:00",
                                         "--run-dir",
                                         run_dir.string(),
                                         "--dry-run"};
  std::string out;
  const std::string msg = error_of<InputError>([&] { run(args, &out); });
  EXPECT_NE(msg.find("already holds a run whose workload (" + (run_dir / "workload.yaml").string() +
                     ") differs from " + (dir_ / "w.yaml").string()),
            std::string::npos)
      << msg;
  write_file(run_dir / "workload.yaml", text.str());
  EXPECT_EQ(run(args, &out), 0);
}

TEST_F(SbatchCommand, SubmitsThroughSbatch) {
  // A stand-in sbatch on PATH records its arguments and answers like --parsable.
  const std::string bin = (dir_ / "bin").string();
  write_file(dir_ / "bin" / "sbatch",
             "#!/bin/sh\necho \"$@\" > '" + (dir_ / "sbatch.args").string() + "'\necho 4242\n");
  std::filesystem::permissions(dir_ / "bin" / "sbatch", std::filesystem::perms::owner_all);
  const std::string old_path = ::getenv("PATH");
  ::setenv("PATH", (bin + ":" + old_path).c_str(), 1);
  std::string out;
  const std::string run_dir = (dir_ / "run").string();
  const int rc = run({(dir_ / "w.yaml").string(), "-N", "1", "--gpus-per-node", "2", "-t",
                      "00:10:00", "--run-dir", run_dir},
                     &out);
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("submitted batch job 4242"), std::string::npos) << out;
  EXPECT_NE(out.find(run_dir + "/slurm-4242.out"), std::string::npos) << out;
  std::ifstream args(dir_ / "sbatch.args");
  std::string line;
  std::getline(args, line);
  EXPECT_EQ(line, "--parsable " + run_dir + "/saturn.sbatch");
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/saturn.sbatch"));

  // sbatch refusing the job: its message comes through.
  write_file(dir_ / "bin" / "sbatch",
             "#!/bin/sh\necho 'sbatch: error: invalid partition specified: gpu' >&2\nexit 1\n");
  ::setenv("PATH", (bin + ":" + old_path).c_str(), 1);
  const std::string msg = error_of<Error>([&] {
    run({(dir_ / "w.yaml").string(), "-N", "1", "--gpus-per-node", "2", "-t", "00:10:00",
         "--run-dir", run_dir, "-p", "gpu"},
        &out);
  });
  ::setenv("PATH", old_path.c_str(), 1);
  EXPECT_NE(msg.find("invalid partition specified: gpu"), std::string::npos) << msg;
}

}  // namespace
}  // namespace saturn::slurm
