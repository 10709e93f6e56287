// `saturn run WORKLOAD --np N [--hostfile F]` starts its own mpirun, so a user never writes an
// mpirun line. This file builds that command line (a pure function of the request, the host's
// facts and the environment, so each flag's rule is unit-tested), detects whether the process
// already runs under a launcher, and runs the child while forwarding signals to it.
//
// Flags (Open MPI 4.1, ../shared/reference/hpc-notes.md §3):
//  * -np N, and --oversubscribe when N exceeds the slots (cores here, the hostfile's slots, or
//    the Slurm allocation's tasks): otherwise mpirun refuses with "not enough slots";
//  * --allow-run-as-root when the effective uid is 0: otherwise mpirun refuses to start;
//  * on one host only: loopback transports (--mca btl self,vader --mca oob_tcp_if_include lo)
//    unless the user set OMPI_MCA_btl / OMPI_MCA_oob_tcp_if_include, and --bind-to none with
//    OMP_NUM_THREADS = cores / N when unset, so each rank's OpenMP threads get their share;
//  * --hostfile F for several hosts, with -x forwarding PATH, LD_LIBRARY_PATH, OMP_NUM_THREADS
//    and SATURN_* (local ranks inherit the environment, remote ones only get what -x names);
//  * -x SATURN_LAUNCHED=1, the marker that stops the child from launching itself again.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launch/slurm_env.hpp"

namespace saturn::launch {

inline constexpr const char* kLaunchedVar = "SATURN_LAUNCHED";

enum class Launcher {
  kNone,    // a plain process: saturn may launch itself
  kMpirun,  // Open MPI's mpirun/mpiexec (OMPI_COMM_WORLD_SIZE)
  kSrun,    // a task of an srun step (SLURM_STEP_ID with SLURM_PROCID or PMIX_RANK)
  kPmi,     // another PMI/PMIx launcher (MPICH's hydra: PMI_RANK; PMIX_RANK alone)
  kSaturn,  // only our marker is set (someone exported SATURN_LAUNCHED=1)
};

struct LauncherInfo {
  Launcher launcher = Launcher::kNone;
  std::string evidence;  // the variable that told, e.g. "OMPI_COMM_WORLD_SIZE=4"
};

// Whether this process was started by a launcher. Only meaningful before MPI_Init: a singleton
// MPI_Init sets PMIX_RANK itself. A Slurm batch shell (SLURM_JOB_ID without SLURM_STEP_ID) is
// not a launcher: `saturn run --np N` there starts mpirun, which uses the allocation.
LauncherInfo detect_launcher(const Environment& env);
std::string_view launcher_name(Launcher launcher);

// An Open MPI hostfile: "host [slots=N] [max_slots=M]" per line, '#' comments.
struct Hostfile {
  struct Host {
    std::string name;
    int slots = -1;  // -1: not given (Open MPI then counts the host's cores)
  };
  std::vector<Host> hosts;
  // Sum of the slots, or -1 when a host does not give its slots.
  int total_slots() const;
};
// `source` names the file in errors ("FILE:LINE: ...").
Hostfile parse_hostfile(std::string_view text, std::string_view source);
Hostfile read_hostfile(const std::filesystem::path& path);

// Facts about the launching host that the command line depends on.
struct HostFacts {
  std::string mpirun;    // path of mpirun
  int cores = 1;         // std::thread::hardware_concurrency (at least 1)
  bool is_root = false;  // effective uid 0
  std::string hostname;  // short and full names count as "this host"
  SlurmEnv slurm;        // the allocation we are in, if any
};
// Facts of this process (find_mpirun, hardware_concurrency, geteuid, gethostname, Slurm env).
HostFacts current_host_facts(const Environment& env);

// mpirun to use: the one CMake found (MPIEXEC_EXECUTABLE, compiled in) when it exists, else
// mpirun or mpiexec on env's PATH. Throws IoError when there is none.
std::string find_mpirun(const Environment& env);

struct LaunchRequest {
  std::vector<std::string> command;  // the child: argv[0] absolute (current_executable()), args
  int np = 0;
  std::string hostfile_path;         // empty: this host (or the Slurm allocation)
  std::optional<Hostfile> hostfile;  // parsed hostfile_path; read from it when absent
};

struct LaunchPlan {
  std::vector<std::string> argv;   // mpirun, its flags, then request.command
  Environment env;                 // the child's whole environment
  std::vector<std::string> notes;  // one line per decision, for the log
};

// Builds the mpirun command. Throws InputError for np < 1, an empty command or a bad hostfile.
LaunchPlan build_mpirun_command(const LaunchRequest& request, const HostFacts& facts,
                                const Environment& env);

// `name` when it holds a '/' and is executable, else the first executable `name` on env's PATH;
// empty when there is none.
std::string find_on_path(const Environment& env, const std::string& name);

// The running executable's absolute path (/proc/self/exe), so remote ranks start the same file.
std::filesystem::path current_executable();

// The environment variable naming the file in which rank 0 records the run's exit code, set by
// self_launch_if_needed for its ranks.
inline constexpr const char* kExitCodeFileVar = "SATURN_EXIT_CODE_FILE";
// $TMPDIR (else /tmp)/saturn-exit-code.PID: the launcher's file for kExitCodeFileVar.
std::filesystem::path exit_code_file_for(int pid, const Environment& env);
// Rank 0 of a self-launched run, at its end: writes `code` to the file kExitCodeFileVar names
// (nothing when unset; a warning when it cannot be written).
void record_exit_code(int code);
// The code recorded in `file`: nullopt when there is none, or it is not one of 0, 1, 2, 99.
std::optional<int> read_recorded_exit_code(const std::filesystem::path& file);
// What the launching process exits with: the code the run recorded, however mpirun ended
// (mpirun stopped by SIGTERM exits 1 even when every rank checkpointed and exited 99, so a
// wrapper that requeues on 99 would not); without one, mpirun's status when it is a code of the
// contract (0, 1, 2, 99), else 1 (a rank killed by a signal: 137 is not a code of Saturn's).
int launch_exit_code(int mpirun_status, std::optional<int> recorded);

// What `saturn run --np N [--hostfile F]` calls first, before MPI_Init. When no launcher
// started this process (detect_launcher(env) is kNone), it logs the decisions, runs
// `mpirun ... <this executable> <args>` with the child's environment built from `env`, and
// returns the exit code for the parent to exit with: the one the run recorded (launch_exit_code;
// 99 passes through for requeues, also when mpirun itself was stopped by a signal).
// mpirun runs in its own process group and dies with this process (SIGTERM: it stops the
// ranks); SIGINT, SIGTERM or SIGHUP here reach the ranks as SIGUSR1 (checkpoint, exit 99).
// Otherwise it returns nullopt: this process is a rank, and the caller initialises MPI (and
// should check that the world size equals np). `args` are this process's arguments after
// argv[0], passed on unchanged. InputError for np < 1 or a bad hostfile.
std::optional<int> self_launch_if_needed(int np, const std::string& hostfile,
                                         const std::vector<std::string>& args,
                                         const Environment& env);

// How run_child ties the child to this process.
struct ChildOptions {
  // The child gets a process group of its own, so a terminal's Ctrl-C reaches this process
  // alone and is forwarded as below (mpirun itself would kill the ranks one second after
  // SIGINT or SIGTERM, whatever they were doing).
  bool own_process_group = false;
  // Sent to the child when this process dies, even by SIGKILL (PR_SET_PDEATHSIG); 0: none.
  int parent_death_signal = 0;
  // The first SIGINT, SIGTERM or SIGHUP is forwarded as this signal (0: as itself), with a
  // note on stderr; a second one as itself.
  int graceful_stop_signal = 0;
};

// Runs argv with exactly `env` as its environment, waits, and returns its exit status (128 + N
// when signal N killed it). While it runs, SIGINT, SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2 sent to
// this process are forwarded to the child (see ChildOptions); without own_process_group,
// signals a terminal sends to the whole process group are not sent twice; signals this process
// ignores stay ignored. argv[0] is looked up on env's PATH when it has no '/'. Throws IoError
// when it cannot be started. One child at a time per process.
int run_child(const std::vector<std::string>& argv, const Environment& env,
              const ChildOptions& options = {});

}  // namespace saturn::launch
