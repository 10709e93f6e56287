// Self-launch: launcher detection, hostfiles, the mpirun command line, and running the child
// (exit codes, signal forwarding, a real mpirun).
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "launch/self_launch.hpp"
#include "runtime/core/error.hpp"
#include "tests/data/test_util.hpp"
#include "tests/launch/recorded_env.hpp"

namespace saturn::launch {
namespace {

using Args = std::vector<std::string>;

bool contains(const Args& argv, const Args& seq) {
  return std::search(argv.begin(), argv.end(), seq.begin(), seq.end()) != argv.end();
}

std::string joined(const Args& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

HostFacts laptop(int cores = 2, bool root = false) {
  HostFacts f;
  f.mpirun = "/usr/bin/mpirun";
  f.cores = cores;
  f.is_root = root;
  f.hostname = "vm";
  return f;
}

LaunchRequest request(int np) {
  LaunchRequest r;
  r.command = {"/opt/saturn/bin/saturn", "run", "w.yaml", "--np", std::to_string(np)};
  r.np = np;
  return r;
}

TEST(DetectLauncher, RecordedEnvironments) {
  EXPECT_EQ(detect_launcher({}).launcher, Launcher::kNone);
  // A batch shell is an allocation, not a launcher: saturn run --np may start mpirun there.
  EXPECT_EQ(detect_launcher(recorded::batch_one_node()).launcher, Launcher::kNone);
  const LauncherInfo m = detect_launcher(recorded::mpirun_rank_two_nodes(1));
  EXPECT_EQ(m.launcher, Launcher::kMpirun);
  EXPECT_EQ(m.evidence, "OMPI_COMM_WORLD_SIZE=4");
  EXPECT_EQ(detect_launcher(recorded::mpirun_rank_one_node(0)).launcher, Launcher::kMpirun);
  EXPECT_EQ(detect_launcher(recorded::srun_task_two_nodes(2)).launcher, Launcher::kSrun);
  EXPECT_EQ(detect_launcher(recorded::srun_pmix_task_one_node(1)).launcher, Launcher::kSrun);
  EXPECT_EQ(detect_launcher({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}).launcher, Launcher::kPmi);
  EXPECT_EQ(detect_launcher({{"PMIX_RANK", "0"}}).launcher, Launcher::kPmi);
  EXPECT_EQ(detect_launcher({{"SATURN_LAUNCHED", "1"}}).launcher, Launcher::kSaturn);
  EXPECT_EQ(launcher_name(Launcher::kSrun), "srun");
}

TEST(Hostfile, Parses) {
  const Hostfile hf = parse_hostfile(
      "# two nodes\nnode01 slots=4   # the first\n\nnode02 slots=2 max_slots=8\n", "hosts");
  ASSERT_EQ(hf.hosts.size(), 2u);
  EXPECT_EQ(hf.hosts[0].name, "node01");
  EXPECT_EQ(hf.hosts[0].slots, 4);
  EXPECT_EQ(hf.total_slots(), 6);
  EXPECT_EQ(parse_hostfile("a\nb slots=2\n", "h").total_slots(), -1);
}

TEST(Hostfile, ErrorsNameFileAndLine) {
  const auto error = [](const std::string& text) {
    return testing::error_of<InputError>([&] { parse_hostfile(text, "hosts.txt"); });
  };
  EXPECT_NE(error("a slots=2\nb cpus=4\n").find("hosts.txt:2: \"cpus=4\""), std::string::npos);
  EXPECT_NE(error("a slots=0\n").find("hosts.txt:1: \"0\" is not a positive integer"),
            std::string::npos);
  EXPECT_NE(error("# nothing\n").find("lists no host"), std::string::npos);
  EXPECT_NE(testing::error_of<InputError>([] {
              read_hostfile("/nonexistent/hosts");
            }).find("--hostfile /nonexistent/hosts: cannot read it"),
            std::string::npos);
}

TEST(BuildMpirun, OneHostNotRoot) {
  const LaunchPlan p = build_mpirun_command(request(2), laptop(), {{"PATH", "/usr/bin"}});
  EXPECT_EQ(joined(p.argv),
            "/usr/bin/mpirun -np 2 --mca btl self,vader --mca oob_tcp_if_include lo --bind-to none "
            "-x SATURN_LAUNCHED=1 /opt/saturn/bin/saturn run w.yaml --np 2");
  EXPECT_EQ(p.env.at("SATURN_LAUNCHED"), "1");
  EXPECT_EQ(p.env.at("OMP_NUM_THREADS"), "1");
  EXPECT_EQ(p.env.at("PATH"), "/usr/bin");
}

TEST(BuildMpirun, OversubscribeWhenRanksExceedCores) {
  const LaunchPlan p = build_mpirun_command(request(4), laptop(2), {});
  EXPECT_TRUE(contains(p.argv, {"--oversubscribe"})) << joined(p.argv);
  EXPECT_NE(joined(p.notes).find("4 ranks on 2 slots (2 cores)"), std::string::npos);
  EXPECT_FALSE(contains(build_mpirun_command(request(2), laptop(2), {}).argv, {"--oversubscribe"}));
  // Cores shared out among ranks for OpenMP.
  EXPECT_EQ(build_mpirun_command(request(2), laptop(16), {}).env.at("OMP_NUM_THREADS"), "8");
}

TEST(BuildMpirun, RootNeedsAllowRunAsRoot) {
  EXPECT_TRUE(contains(build_mpirun_command(request(2), laptop(2, true), {}).argv,
                       {"--allow-run-as-root"}));
  EXPECT_FALSE(contains(build_mpirun_command(request(2), laptop(2, false), {}).argv,
                        {"--allow-run-as-root"}));
}

TEST(BuildMpirun, UserSettingsWin) {
  const Environment env = {{"OMPI_MCA_btl", "self,tcp"}, {"OMP_NUM_THREADS", "3"}};
  const LaunchPlan p = build_mpirun_command(request(2), laptop(), env);
  EXPECT_FALSE(contains(p.argv, {"--mca", "btl", "self,vader"})) << joined(p.argv);
  EXPECT_TRUE(contains(p.argv, {"--mca", "oob_tcp_if_include", "lo"}));
  EXPECT_EQ(p.env.at("OMP_NUM_THREADS"), "3");
  EXPECT_EQ(p.env.at("OMPI_MCA_btl"), "self,tcp");
}

TEST(BuildMpirun, HostfileWithSeveralHosts) {
  LaunchRequest r = request(6);
  r.hostfile_path = "/etc/saturn/hosts";
  r.hostfile = parse_hostfile("n1 slots=2\nn2 slots=2\n", r.hostfile_path);
  const Environment env = {{"PATH", "/usr/bin"},
                           {"LD_LIBRARY_PATH", "/opt/lib"},
                           {"SATURN_LOG", "debug"},
                           {"HOME", "/root"}};
  const LaunchPlan p = build_mpirun_command(r, laptop(), env);
  EXPECT_TRUE(contains(p.argv, {"--hostfile", "/etc/saturn/hosts"})) << joined(p.argv);
  EXPECT_TRUE(contains(p.argv, {"--oversubscribe"}));  // 6 ranks, 4 slots
  EXPECT_FALSE(contains(p.argv, {"--mca", "oob_tcp_if_include", "lo"}));
  EXPECT_FALSE(contains(p.argv, {"--bind-to", "none"}));
  EXPECT_TRUE(contains(p.argv, {"-x", "PATH"}));
  EXPECT_TRUE(contains(p.argv, {"-x", "LD_LIBRARY_PATH"}));
  EXPECT_TRUE(contains(p.argv, {"-x", "SATURN_LOG"}));
  EXPECT_TRUE(contains(p.argv, {"-x", "SATURN_LAUNCHED=1"}));
  EXPECT_FALSE(contains(p.argv, {"-x", "HOME"}));

  r.np = 4;
  EXPECT_FALSE(contains(build_mpirun_command(r, laptop(), env).argv, {"--oversubscribe"}));
  // Slots unknown (Open MPI counts the remote cores): no guess.
  r.np = 64;
  r.hostfile = parse_hostfile("n1\nn2\n", r.hostfile_path);
  EXPECT_FALSE(contains(build_mpirun_command(r, laptop(), env).argv, {"--oversubscribe"}));
}

TEST(BuildMpirun, HostfileOfThisHostOnlyKeepsLoopback) {
  LaunchRequest r = request(4);
  r.hostfile_path = "hosts";
  r.hostfile = parse_hostfile("localhost slots=8\nvm.example.org slots=8\n", "hosts");
  const LaunchPlan p = build_mpirun_command(r, laptop(2), {});
  EXPECT_TRUE(contains(p.argv, {"--mca", "oob_tcp_if_include", "lo"})) << joined(p.argv);
  EXPECT_FALSE(contains(p.argv, {"--oversubscribe"}));  // 16 slots
}

TEST(BuildMpirun, InsideASlurmAllocation) {
  HostFacts f = laptop(2);
  f.slurm = parse_slurm_env(recorded::batch_two_nodes());  // 2 nodes x 2 tasks
  LaunchPlan p = build_mpirun_command(request(4), f, {});
  EXPECT_FALSE(contains(p.argv, {"--oversubscribe"})) << joined(p.argv);
  EXPECT_FALSE(contains(p.argv, {"--mca", "oob_tcp_if_include", "lo"}));
  p = build_mpirun_command(request(5), f, {});
  EXPECT_TRUE(contains(p.argv, {"--oversubscribe"}));
  EXPECT_NE(joined(p.notes).find("Slurm job 4 (2 node(s))"), std::string::npos);
}

TEST(BuildMpirun, DropsWhatAnMpiRuntimeSetForThisProcess) {
  // A singleton MPI_Init leaves these behind; passed on, the new mpirun would misread them.
  const Environment env = {{"PMIX_RANK", "0"},
                           {"PMIX_SERVER_URI4", "x"},
                           {"OMPI_MCA_ess", "singleton"},
                           {"OMPI_MCA_orte_precondition_transports", "x"},
                           {"OMPI_COMM_WORLD_SIZE", "1"},
                           {"OMPI_COMMAND", "test"},
                           {"OMPI_MCA_btl_tcp_if_include", "lo"},
                           {"OMPI_ALLOW_RUN_AS_ROOT", "1"},
                           {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}};
  const LaunchPlan p = build_mpirun_command(request(2), laptop(), env);
  for (const char* gone :
       {"PMIX_RANK", "PMIX_SERVER_URI4", "OMPI_MCA_ess", "OMPI_MCA_orte_precondition_transports",
        "OMPI_COMM_WORLD_SIZE", "OMPI_COMMAND"})
    EXPECT_EQ(p.env.count(gone), 0u) << gone;
  for (const char* kept :
       {"OMPI_MCA_btl_tcp_if_include", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"})
    EXPECT_EQ(p.env.count(kept), 1u) << kept;
}

TEST(BuildMpirun, BadRequests) {
  EXPECT_THROW(build_mpirun_command(request(0), laptop(), {}), InputError);
  LaunchRequest r = request(2);
  r.command.clear();
  EXPECT_THROW(build_mpirun_command(r, laptop(), {}), InputError);
}

TEST(FindMpirun, CompiledPathOrPath) {
  const std::string found = find_mpirun(current_environment());
  EXPECT_TRUE(std::filesystem::path(found).is_absolute()) << found;
  EXPECT_EQ(::access(found.c_str(), X_OK), 0) << found;
  EXPECT_EQ(find_on_path({{"PATH", "/nonexistent"}}, "sh"), "");
  EXPECT_EQ(find_on_path({{"PATH", "/nonexistent:/bin"}}, "sh"), "/bin/sh");
  EXPECT_TRUE(current_executable().is_absolute());
}

Environment plain_env() {
  return {{"PATH", "/usr/bin:/bin"}};
}

TEST(RunChild, ExitStatusAndEnvironment) {
  EXPECT_EQ(run_child({"sh", "-c", "exit 7"}, plain_env()), 7);
  Environment env = plain_env();
  env["SATURN_TEST_VALUE"] = "forty two";
  EXPECT_EQ(run_child({"sh", "-c", "test \"$SATURN_TEST_VALUE\" = 'forty two'"}, env), 0);
  EXPECT_EQ(run_child({"sh", "-c", "kill -9 $$"}, plain_env()), 128 + SIGKILL);
  EXPECT_THROW(run_child({"saturn-no-such-program"}, plain_env()), IoError);
  EXPECT_THROW(run_child({"/nonexistent/prog"}, plain_env()), IoError);
}

// The child traps `sig`, writes READY, and exits with `code` when the signal arrives; a helper
// thread sends `sig` to this (the parent) process once READY exists.
int forwarded_exit(int sig, const char* name, int code) {
  testing::TempDir dir;
  const std::string ready = (dir / "READY").string();
  const std::string script =
      fmt::format("trap 'exit {}' {}; touch '{}'; while :; do sleep 0.02; done", code, name, ready);
  std::thread sender([&] {
    for (int i = 0; i < 500 && !std::filesystem::exists(ready); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(::getpid(), sig);
  });
  const int rc = run_child({"sh", "-c", script}, plain_env());
  sender.join();
  return rc;
}

TEST(RunChild, ForwardsSignalsToTheChild) {
  EXPECT_EQ(forwarded_exit(SIGUSR1, "USR1", 42), 42);
  EXPECT_EQ(forwarded_exit(SIGTERM, "TERM", 43), 43);
  EXPECT_EQ(forwarded_exit(SIGINT, "INT", 44), 44);
  // The previous dispositions are back: an ignored signal stays harmless to this process.
  struct sigaction sa {};
  sigaction(SIGUSR1, nullptr, &sa);
  EXPECT_NE(sa.sa_handler, SIG_IGN);
}

// The real thing: mpirun from inside an MPI-initialised process (the test main called
// MPI_Init), more ranks than cores, as whoever runs the tests.
TEST(RunChild, RealMpirun) {
  const Environment env = current_environment();
  const HostFacts facts = current_host_facts(env);
  LaunchRequest r;
  r.np = facts.cores + 1;
  r.command = {"/bin/sh", "-c",
               "test \"$SATURN_LAUNCHED\" = 1 && test -n \"$OMPI_COMM_WORLD_RANK\" && "
               "test \"$OMPI_COMM_WORLD_SIZE\" = " +
                   std::to_string(r.np)};
  const LaunchPlan p = build_mpirun_command(r, facts, env);
  EXPECT_TRUE(contains(p.argv, {"--oversubscribe"}));
  EXPECT_EQ(run_child(p.argv, p.env), 0) << joined(p.argv);

  // 99 ("checkpointed, not finished") must come back through mpirun for the requeue logic.
  r.np = 2;
  r.command = {"/bin/sh", "-c", "exit 99"};
  const LaunchPlan q = build_mpirun_command(r, facts, env);
  EXPECT_EQ(run_child(q.argv, q.env), 99) << joined(q.argv);
}

// The child half of SelfLaunch.StartsThisExecutableUnderMpirun: skipped unless launched so.
TEST(SelfLaunchChild, SeesMarkerAndWorld) {
  const Environment env = current_environment();
  if (env_get(env, "SATURN_LAUNCHED") == nullptr) GTEST_SKIP() << "only as a self-launched child";
  EXPECT_EQ(detect_launcher(env).launcher, Launcher::kMpirun);
  ASSERT_NE(env_get(env, "OMPI_COMM_WORLD_SIZE"), nullptr);
  EXPECT_EQ(*env_get(env, "OMPI_COMM_WORLD_SIZE"), "2");
}

TEST(SelfLaunch, StartsThisExecutableUnderMpirun) {
  // This process called MPI_Init, so its real environment looks launched; a parent that has not
  // (as saturn run has not, when it calls this) is simulated by dropping what MPI_Init set.
  Environment env;
  for (const auto& [k, v] : current_environment())
    if (!k.starts_with("PMIX_") && !k.starts_with("OMPI_COMM_WORLD") && k != "SATURN_LAUNCHED")
      env.emplace(k, v);
  ASSERT_EQ(detect_launcher(env).launcher, Launcher::kNone);
  const std::optional<int> rc =
      self_launch_if_needed(2, "", {"--gtest_filter=SelfLaunchChild.*"}, env);
  ASSERT_TRUE(rc);
  EXPECT_EQ(*rc, 0);

  env["OMPI_COMM_WORLD_SIZE"] = "2";
  EXPECT_FALSE(self_launch_if_needed(2, "", {"--gtest_filter=SelfLaunchChild.*"}, env));
}

}  // namespace
}  // namespace saturn::launch
