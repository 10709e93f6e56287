#include "launch/self_launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

#ifndef SATURN_MPIEXEC
#define SATURN_MPIEXEC ""
#endif

namespace saturn::launch {
namespace {

bool has(const Environment& env, std::string_view name) {
  return env_get(env, name) != nullptr;
}

std::string describe(const Environment& env, std::string_view name) {
  return fmt::format("{}={}", name, *env_get(env, name));
}

bool is_executable(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::string search_path_impl(const Environment& env, const std::string& name) {
  if (name.find('/') != std::string::npos) return is_executable(name) ? name : std::string();
  const std::string* path = env_get(env, "PATH");
  std::string_view rest = path ? std::string_view(*path) : std::string_view("/usr/bin:/bin");
  while (true) {
    const std::size_t colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (dir.empty()) dir = ".";
    const std::filesystem::path candidate = std::filesystem::path(dir) / name;
    if (is_executable(candidate)) return candidate.string();
    if (colon == rest.npos) return {};
    rest.remove_prefix(colon + 1);
  }
}

// Variables that an MPI runtime set for *this* process (a singleton MPI_Init sets PMIX_* and
// OMPI_MCA_ess=singleton). Passed on, they make the new mpirun think it is a rank. User tunables
// (other OMPI_MCA_*) and the run-as-root pair are kept.
bool launcher_owned(const std::string& name) {
  if (name.starts_with("PMIX_") || name.starts_with("PMI_")) return true;
  if (name.starts_with("OMPI_ALLOW_RUN_AS_ROOT")) return false;
  if (name.starts_with("OMPI_MCA_")) {
    static constexpr std::array<std::string_view, 10> owned = {
        "OMPI_MCA_ess",
        "OMPI_MCA_pmix",
        "OMPI_MCA_orte_launch",
        "OMPI_MCA_orte_ess_num_procs",
        "OMPI_MCA_orte_precondition_transports",
        "OMPI_MCA_orte_hnp_uri",
        "OMPI_MCA_orte_local_daemon_uri",
        "OMPI_MCA_ess_base_jobid",
        "OMPI_MCA_ess_base_vpid",
        "OMPI_MCA_orte_num_nodes"};
    for (std::string_view o : owned)
      if (name == o) return true;
    return false;
  }
  return name.starts_with("OMPI_");
}

bool is_this_host(const std::string& name, const std::string& hostname) {
  if (name == "localhost" || name == "127.0.0.1" || name == "::1") return true;
  if (hostname.empty()) return false;
  const std::string short_name = hostname.substr(0, hostname.find('.'));
  return name == hostname || name == short_name || name.substr(0, name.find('.')) == short_name;
}

int parse_positive(std::string_view text, std::string_view where) {
  int v = 0;
  const char* end = text.data() + text.size();
  const auto r = std::from_chars(text.data(), end, v);
  if (text.empty() || r.ec != std::errc() || r.ptr != end || v < 1)
    throw InputError(fmt::format("{}: \"{}\" is not a positive integer", where, text));
  return v;
}

// State shared with the signal handler. Only sig_atomic_t-sized plain values are touched there.
volatile std::sig_atomic_t g_child_pid = 0;
volatile std::sig_atomic_t g_pending_signal = 0;
volatile std::sig_atomic_t g_own_group = 0;       // ChildOptions::own_process_group
volatile std::sig_atomic_t g_graceful = 0;        // ChildOptions::graceful_stop_signal
volatile std::sig_atomic_t g_stop_forwarded = 0;  // a graceful stop was sent already
std::atomic<bool> g_child_running{false};
constexpr std::array<int, 5> kForwarded = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

bool is_stop(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
}

// Async-signal-safe note on stderr.
void say(const char* text) {
  [[maybe_unused]] const ssize_t w = ::write(STDERR_FILENO, text, std::strlen(text));
}

void forward_signal(int sig, siginfo_t* info, void*) {
  // A terminal's Ctrl-C reaches the whole foreground process group, the child included, unless
  // the child has a group of its own.
  if (!g_own_group && info != nullptr && info->si_code == SI_KERNEL) return;
  int out = sig;
  if (g_graceful != 0 && is_stop(sig)) {
    if (g_stop_forwarded == 0) {
      g_stop_forwarded = 1;
      out = g_graceful;
      say(sig == SIGINT    ? "saturn: SIGINT: asking every rank to checkpoint and stop (send it "
                             "again to stop them at once)\n"
          : sig == SIGTERM ? "saturn: SIGTERM: asking every rank to checkpoint and stop (send "
                             "it again to stop them at once)\n"
                           : "saturn: SIGHUP: asking every rank to checkpoint and stop\n");
    }
  }
  const pid_t child = g_child_pid;
  if (child > 0) {
    ::kill(child, out);
  } else {
    g_pending_signal = out;
  }
}

}  // namespace

std::string find_on_path(const Environment& env, const std::string& name) {
  return search_path_impl(env, name);
}

std::string_view launcher_name(Launcher launcher) {
  switch (launcher) {
    case Launcher::kNone:
      return "none";
    case Launcher::kMpirun:
      return "mpirun";
    case Launcher::kSrun:
      return "srun";
    case Launcher::kPmi:
      return "a PMI launcher";
    case Launcher::kSaturn:
      return "saturn";
  }
  return "unknown";
}

LauncherInfo detect_launcher(const Environment& env) {
  if (has(env, "OMPI_COMM_WORLD_SIZE"))
    return {Launcher::kMpirun, describe(env, "OMPI_COMM_WORLD_SIZE")};
  const bool step = has(env, "SLURM_STEP_ID") || has(env, "SLURM_STEPID");
  if (step && (has(env, "SLURM_PROCID") || has(env, "PMIX_RANK")))
    return {Launcher::kSrun,
            describe(env, has(env, "SLURM_STEP_ID") ? "SLURM_STEP_ID" : "SLURM_STEPID")};
  for (const char* var : {"PMI_RANK", "PMIX_RANK", "PMI_SIZE"})
    if (has(env, var)) return {Launcher::kPmi, describe(env, var)};
  if (has(env, kLaunchedVar)) return {Launcher::kSaturn, describe(env, kLaunchedVar)};
  return {};
}

int Hostfile::total_slots() const {
  int total = 0;
  for (const auto& h : hosts) {
    if (h.slots < 0) return -1;
    total += h.slots;
  }
  return total;
}

Hostfile parse_hostfile(std::string_view text, std::string_view source) {
  Hostfile hf;
  std::istringstream in{std::string(text)};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string where = fmt::format("{}:{}", source, line_no);
    if (const std::size_t hash = line.find('#'); hash != line.npos) line.resize(hash);
    std::istringstream words(line);
    std::string word;
    if (!(words >> word)) continue;
    Hostfile::Host host{word, -1};
    while (words >> word) {
      const std::size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq == word.npos ||
          (key != "slots" && key != "max_slots" && key != "max-slots" && key != "count"))
        throw InputError(fmt::format("{}: \"{}\" is not slots=N or max_slots=N", where, word));
      const int n = parse_positive(std::string_view(word).substr(eq + 1), where);
      if (key == "slots" || key == "count") host.slots = n;
    }
    hf.hosts.push_back(std::move(host));
  }
  if (hf.hosts.empty()) throw InputError(fmt::format("{}: the hostfile lists no host", source));
  return hf;
}

Hostfile read_hostfile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("--hostfile {}: cannot read it", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_hostfile(text.str(), path.string());
}

std::string find_mpirun(const Environment& env) {
  const std::string compiled = SATURN_MPIEXEC;
  if (!compiled.empty() && is_executable(compiled)) return compiled;
  for (const char* name : {"mpirun", "mpiexec"}) {
    const std::string found = find_on_path(env, name);
    if (!found.empty()) return found;
  }
  throw IoError(fmt::format(
      "no mpirun found (neither {} nor mpirun/mpiexec on PATH); install Open MPI (Debian: "
      "apt-get install openmpi-bin) or load your site's MPI module",
      compiled.empty() ? std::string("a compiled-in path") : compiled));
}

HostFacts current_host_facts(const Environment& env) {
  HostFacts f;
  f.mpirun = find_mpirun(env);
  f.cores = std::max(1u, std::thread::hardware_concurrency());
  f.is_root = ::geteuid() == 0;
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) == 0) f.hostname = name.data();
  f.slurm = parse_slurm_env(env);
  return f;
}

LaunchPlan build_mpirun_command(const LaunchRequest& request, const HostFacts& facts,
                                const Environment& env) {
  if (request.np < 1) throw InputError(fmt::format("--np {}: must be at least 1", request.np));
  if (request.command.empty()) throw InputError("self-launch: no command to run");
  std::optional<Hostfile> hostfile = request.hostfile;
  if (!hostfile && !request.hostfile_path.empty()) hostfile = read_hostfile(request.hostfile_path);

  LaunchPlan plan;
  for (const auto& [name, value] : env)
    if (!launcher_owned(name)) plan.env.emplace(name, value);
  plan.env[kLaunchedVar] = "1";

  // Where the ranks go and how many slots there are.
  bool one_host = true;
  int slots = facts.cores;
  std::string slot_source = fmt::format("{} cores", facts.cores);
  if (hostfile) {
    for (const auto& h : hostfile->hosts)
      one_host = one_host && is_this_host(h.name, facts.hostname);
    slots = hostfile->total_slots();
    slot_source = fmt::format("hostfile {}", request.hostfile_path.empty() ? std::string("(given)")
                                                                           : request.hostfile_path);
  } else if (facts.slurm.in_allocation) {
    one_host = facts.slurm.num_nodes <= 1;
    slots = 0;
    for (int t : facts.slurm.tasks_per_node) slots += t;
    if (facts.slurm.tasks_per_node.empty()) slots = -1;
    slot_source =
        fmt::format("Slurm job {} ({} node(s))", facts.slurm.job_id, facts.slurm.num_nodes);
  }

  auto& argv = plan.argv;
  argv = {facts.mpirun, "-np", std::to_string(request.np)};
  if (slots >= 0 && request.np > slots) {
    argv.push_back("--oversubscribe");
    plan.notes.push_back(
        fmt::format("--oversubscribe: {} ranks on {} slots ({})", request.np, slots, slot_source));
  }
  if (facts.is_root) {
    argv.push_back("--allow-run-as-root");
    plan.notes.push_back("--allow-run-as-root: running as root");
  }
  if (hostfile) {
    argv.insert(argv.end(), {"--hostfile", request.hostfile_path});
  }
  if (one_host) {
    if (!has(env, "OMPI_MCA_btl")) argv.insert(argv.end(), {"--mca", "btl", "self,vader"});
    if (!has(env, "OMPI_MCA_oob_tcp_if_include"))
      argv.insert(argv.end(), {"--mca", "oob_tcp_if_include", "lo"});
    plan.notes.push_back("one host: shared-memory and loopback transports only");
    // Open MPI binds each rank to one core by default, which would pile a rank's OpenMP
    // threads onto that core.
    argv.insert(argv.end(), {"--bind-to", "none"});
    if (!has(env, "OMP_NUM_THREADS")) {
      const int threads = std::max(1, facts.cores / request.np);
      plan.env["OMP_NUM_THREADS"] = std::to_string(threads);
      plan.notes.push_back(
          fmt::format("OMP_NUM_THREADS={}: {} cores / {} ranks", threads, facts.cores, request.np));
    }
  }
  argv.insert(argv.end(), {"-x", fmt::format("{}=1", kLaunchedVar)});
  if (!one_host) {
    // Remote ranks get only what -x names.
    for (const auto& [name, value] : plan.env) {
      if (name == kLaunchedVar) continue;
      if (name == "PATH" || name == "LD_LIBRARY_PATH" || name == "OMP_NUM_THREADS" ||
          name.starts_with("SATURN_"))
        argv.insert(argv.end(), {"-x", name});
    }
  }
  argv.insert(argv.end(), request.command.begin(), request.command.end());
  return plan;
}

std::optional<int> self_launch_if_needed(int np, const std::string& hostfile,
                                         const std::vector<std::string>& args,
                                         const Environment& env) {
  const LauncherInfo launcher = detect_launcher(env);
  if (launcher.launcher != Launcher::kNone) {
    log::debug("started by {} ({}): not launching again", launcher_name(launcher.launcher),
               launcher.evidence);
    return std::nullopt;
  }
  LaunchRequest request;
  request.np = np;
  request.hostfile_path = hostfile;
  request.command.push_back(current_executable().string());
  request.command.insert(request.command.end(), args.begin(), args.end());
  // Where rank 0 records the run's exit code (record_exit_code), passed on like every SATURN_
  // variable (to remote ranks too, with -x).
  Environment child_env = env;
  const std::filesystem::path code_file = exit_code_file_for(::getpid(), env);
  child_env[kExitCodeFileVar] = code_file.string();
  const LaunchPlan plan = build_mpirun_command(request, current_host_facts(env), child_env);
  for (const auto& note : plan.notes) log::info("launch: {}", note);
  std::string line;
  for (const auto& a : plan.argv) line += (line.empty() ? "" : " ") + a;
  log::info("launch: {}", line);
  ChildOptions child;
  child.own_process_group = true;
  child.parent_death_signal = SIGTERM;
  child.graceful_stop_signal = SIGUSR1;  // mpirun forwards SIGUSR1 to every rank as it is
  struct RemoveCodeFile {
    std::filesystem::path file;
    ~RemoveCodeFile() {
      std::error_code ec;
      std::filesystem::remove(file, ec);
    }
  } remove_code_file{code_file};
  const int status = run_child(plan.argv, plan.env, child);
  return launch_exit_code(status, read_recorded_exit_code(code_file));
}

std::filesystem::path exit_code_file_for(int pid, const Environment& env) {
  const std::string* tmp = env_get(env, "TMPDIR");
  const std::filesystem::path dir = tmp != nullptr && !tmp->empty() ? *tmp : "/tmp";
  return dir / fmt::format("saturn-exit-code.{}", pid);
}

void record_exit_code(int code) {
  const char* file = std::getenv(kExitCodeFileVar);
  if (file == nullptr || *file == '\0') return;
  try {
    write_file_atomic(file, fmt::format("{}\n", code));
  } catch (const std::exception& e) {
    log::warn("cannot record the exit code {} in {}: {}", code, file, e.what());
  }
}

std::optional<int> read_recorded_exit_code(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) return std::nullopt;
  std::ifstream in(file);
  int code = -1;
  if (!(in >> code) || (code != kExitOk && code != kExitFailure && code != kExitBadInput &&
                        code != kExitCheckpointed))
    return std::nullopt;
  return code;
}

int launch_exit_code(int mpirun_status, std::optional<int> recorded) {
  if (recorded) {
    if (*recorded != mpirun_status)
      log::info(
          "mpirun exited with {}; the run recorded exit code {}, which this command exits with",
          mpirun_status, *recorded);
    return *recorded;
  }
  if (mpirun_status == kExitOk || mpirun_status == kExitFailure || mpirun_status == kExitBadInput ||
      mpirun_status == kExitCheckpointed)
    return mpirun_status;
  log::error(
      "mpirun exited with {}{} and rank 0 recorded no exit code: a rank was killed or crashed "
      "before the run ended; exiting with 1 (checkpoints written so far are kept: `saturn run "
      "--resume RUN_DIR` continues from them)",
      mpirun_status,
      mpirun_status > 128 ? fmt::format(" (signal {})", mpirun_status - 128) : std::string());
  return kExitFailure;
}

std::filesystem::path current_executable() {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw IoError(fmt::format("cannot read /proc/self/exe: {}", ec.message()));
  return p;
}

int run_child(const std::vector<std::string>& argv, const Environment& env,
              const ChildOptions& options) {
  if (argv.empty()) throw IoError("run_child: empty command");
  const std::string program = find_on_path(env, argv[0]);
  if (program.empty())
    throw IoError(fmt::format("cannot run {}: not found{}", argv[0],
                              argv[0].find('/') == std::string::npos ? " on PATH" : ""));
  if (g_child_running.exchange(true)) throw Error("run_child: another child is still running");
  struct Release {
    ~Release() {
      g_child_pid = 0;
      g_pending_signal = 0;
      g_own_group = 0;
      g_graceful = 0;
      g_stop_forwarded = 0;
      g_child_running = false;
    }
  } release;
  g_own_group = options.own_process_group ? 1 : 0;
  g_graceful = options.graceful_stop_signal;
  const pid_t parent = ::getpid();

  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<std::string> args = argv;
  std::vector<char*> c_argv, c_env;
  for (auto& a : args) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  for (auto& e : env_strings) c_env.push_back(e.data());
  c_env.push_back(nullptr);

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0)
    throw IoError(fmt::format("run_child: pipe: {}", std::strerror(errno)));

  // Forwarders, except for signals this process was told to ignore.
  std::array<struct sigaction, kForwarded.size()> old{};
  std::array<bool, kForwarded.size()> installed{};
  for (std::size_t i = 0; i < kForwarded.size(); ++i) {
    sigaction(kForwarded[i], nullptr, &old[i]);
    if (old[i].sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_sigaction = forward_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    installed[i] = sigaction(kForwarded[i], &sa, nullptr) == 0;
  }
  auto restore = [&] {
    for (std::size_t i = 0; i < kForwarded.size(); ++i)
      if (installed[i]) sigaction(kForwarded[i], &old[i], nullptr);
  };

  const pid_t pid = ::fork();
  if (pid == 0) {
    if (options.own_process_group) ::setpgid(0, 0);
    if (options.parent_death_signal != 0) {
      ::prctl(PR_SET_PDEATHSIG, options.parent_death_signal);
      if (::getppid() != parent) ::_exit(128 + options.parent_death_signal);  // died already
    }
    for (std::size_t i = 0; i < kForwarded.size(); ++i)
      if (installed[i]) ::signal(kForwarded[i], SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    ::close(pipe_fds[0]);
    ::execve(program.c_str(), c_argv.data(), c_env.data());
    const int err = errno;
    [[maybe_unused]] const ssize_t w = ::write(pipe_fds[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  if (pid < 0) {
    const int err = errno;
    ::close(pipe_fds[0]);
    restore();
    throw IoError(fmt::format("cannot start {}: fork: {}", program, std::strerror(err)));
  }
  g_child_pid = pid;
  if (const int pending = g_pending_signal; pending != 0) {
    g_pending_signal = 0;
    ::kill(pid, pending);
  }

  int exec_errno = 0;
  ssize_t got = 0;
  do {
    got = ::read(pipe_fds[0], &exec_errno, sizeof exec_errno);
  } while (got < 0 && errno == EINTR);
  ::close(pipe_fds[0]);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      const int err = errno;
      restore();
      throw IoError(fmt::format("waiting for {}: {}", program, std::strerror(err)));
    }
  }
  restore();
  if (got == static_cast<ssize_t>(sizeof exec_errno))
    throw IoError(fmt::format("cannot run {}: {}", program, std::strerror(exec_errno)));
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace saturn::launch
