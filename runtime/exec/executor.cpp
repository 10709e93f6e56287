#include "runtime/exec/executor.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/store.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/core/byte_hash.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/checkpoint_probe.hpp"
#include "runtime/exec/cluster.hpp"
#include "runtime/exec/coordinator.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/job_runner.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/planning.hpp"
#include "runtime/exec/resume.hpp"
#include "runtime/exec/run_lock.hpp"
#include "runtime/exec/selection.hpp"
#include "runtime/exec/signals.hpp"
#include "runtime/exec/submission.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/profile/file_system.hpp"
#include "runtime/profile/trials.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"

namespace saturn::exec {
namespace {

namespace fs = std::filesystem;

// Each plan covers the jobs up to their next rung: selection lives on re-plans.
void check_selection_runs(const Workload& w, const RunOptions& o) {
  if (!w.selection.enabled() || (o.replan && !parse_policy(o.policy))) return;
  throw InputError(fmt::format(
      "{}: selection: {} needs re-planning (a plan covers each job up to its next rung), so it "
      "cannot run with {}",
      w.selection.where, w.selection.method,
      o.replan ? fmt::format("--policy {}", o.policy) : std::string("--no-replan")));
}

// Every rank: ask the coordinator for work, run it, report, until told to exit. `workload` is
// ctx.workload, this thread's own: jobs `saturn submit` adds join it.
int worker_loop(const RunContext& ctx, Workload& workload) {
  const int rank = [&] {
    int r = 0;
    MPI_Comm_rank(ctx.world, &r);
    return r;
  }();
  bool signal_sent = false;
  send(ctx.control, 0, WorkerMessage{RankReady{}});
  for (;;) {
    std::optional<Command> cmd;
    auto pause = std::chrono::microseconds(200);
    while (!(cmd = try_receive<Command>(ctx.control, 0))) {
      if (!signal_sent && stop_signal_received() != 0) {
        send(ctx.control, 0, WorkerMessage{StopSignal{stop_signal_received()}});
        signal_sent = true;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
    if (const auto* exit = std::get_if<Exit>(&*cmd)) return exit->code;
    if (const auto* add = std::get_if<AddJobs>(&*cmd)) {  // not a task: the rank stays ready
      workload.jobs.insert(workload.jobs.end(), add->jobs.begin(), add->jobs.end());
      continue;
    }
    const SegmentLaunch& launch = std::get<LaunchSegment>(*cmd).launch;
    const SegmentOutcome outcome = run_segment(
        ctx, launch, *comm::MpiCommunicator::create_group(ctx.world, launch.ranks, launch.tag));
    if (rank == launch.ranks.front()) send(ctx.control, 0, SegmentReport{launch.job_id, outcome});
    send(ctx.control, 0, WorkerMessage{RankReady{}});
  }
}

// The strategy whose whole-node configuration the profiles must hold for current practice:
// the one named, else FSDP (the paper's hand-picked default) when current practice plans;
// none when current practice is only predicted (its prediction then uses what is offered).
std::string current_practice_trial(const RunOptions& o) {
  if (o.current_practice == "fastest") return "";
  if (!o.current_practice.empty()) return o.current_practice;
  return o.policy == "current-practice" ? "fsdp" : "";
}

// One `saturn run` on this rank: its steps, each agreed by every rank before the next.
class BatchRun {
 public:
  explicit BatchRun(RunOptions options)
      : options_(std::move(options)),
        world_(comm::MpiCommunicator::world()),
        rank_(world_->rank()) {
    if (world_->size() > 1) log::set_rank(rank_);
  }

  int run() {
    install_stop_signal_handlers();
    try {
      comm::agree_on(*world_, [&] { check_input(); });
      comm::agree_on(*world_, [&] { discover(); });
      comm::agree_on(*world_, [&] { prepare_run_dir(); });
      comm::agree_on(*world_, [&] { profile(); });
    } catch (const comm::AgreedFailure& e) {
      return refuse(e);
    }
    return execute();
  }

 private:
  // Everything about the input, before any rank trains or anything is written: the workload
  // (a resume's as its run recorded it), the run directory and its lock, the memory per rank,
  // and what a resume must find there.
  void check_input() {
    parse_policy(options_.policy);
    const std::optional<RecordedRun> recorded = options_.resume && !options_.run_dir.empty()
                                                    ? read_recorded_run(options_.run_dir)
                                                    : std::nullopt;
    load_batch(recorded);
    check_selection_runs(w_, options_);
    run_dir_ = options_.run_dir.empty() ? RunDir::default_for(w_.name).root() : options_.run_dir;
    start_afresh_if_never_planned();
    if (options_.resume && rank_ == 0) check_resumes_its_workload(w_, run_dir_);
    if (options_.resume) add_accepted_submissions();
    take_run_dir();
    resolve_resources(recorded);
    const bool has_run = RunDir(run_dir_).holds_run();
    if (has_run && !options_.resume)
      throw InputError(
          fmt::format("{} already holds a run; continue it with `saturn run --resume {}` or "
                      "choose another --run-dir",
                      run_dir_.string(), run_dir_.string()));
    if (options_.resume && !has_run)
      throw InputError(fmt::format("--resume: {} holds no run to resume (no timeline.jsonl)",
                                   run_dir_.string()));
    if (!options_.resume) return;
    if (rank_ == 0) check_resumable(w_, run_dir_);
    if (rank_ == 0 && recorded) check_models_unchanged(*recorded, run_dir_, w_);
    resume_ = read_resume_state(w_, run_dir_);
  }

  // A resumed run reads the run directory's copy of the workload, whose relative data and
  // `from:` paths meant the original file's directory: the run recorded them absolute.
  void load_batch(const std::optional<RecordedRun>& recorded) {
    LoadOptions lo;
    lo.check_data_contents = rank_ == 0;  // one pass over the data is enough (agreed)
    if (recorded) {
      lo.check_data_files = false;
      lo.model_dirs = recorded->model_dirs;
    }
    w_ = load_workload(options_.workload, lo);
    if (!recorded) return;
    w_.train_data = recorded->train_data;
    w_.val_data = recorded->val_data;
    for (const auto& f : {w_.train_data, w_.val_data})
      if (!fs::exists(f))
        throw InputError(
            fmt::format("--resume: the run's data file {} no longer exists", f.string()));
  }

  // A start killed before its first plan (node failure or pre-emption during profiling) left
  // the run's copy of the workload and jobs/ but no timeline: nothing trained, so the --resume
  // that a requeued `saturn sbatch` job passes starts the batch from the beginning.
  void start_afresh_if_never_planned() {
    const RunDir run(run_dir_);
    if (!options_.resume || run.holds_run() || !run.holds_start()) return;
    if (rank_ == 0 && !options_.quiet)
      log::warn(
          "--resume: {} holds a batch that never reached its first plan (no timeline.jsonl: its "
          "start was stopped while profiling?); starting it from the beginning with {}",
          run_dir_.string(), options_.workload.string());
    options_.resume = false;
  }

  // The jobs `saturn submit` added to the interrupted run, after its own.
  void add_accepted_submissions() {
    const auto subs = accepted_submissions(run_dir_);
    if (subs.empty()) return;
    LoadOptions checked_when_accepted;
    checked_when_accepted.check_data_files = false;
    w_ = add_submissions(w_, subs, checked_when_accepted);
  }

  // One run per directory (run_lock.hpp), from before anything in it is read or written until
  // the last rank is done. A --resume of nothing is refused later without creating it.
  void take_run_dir() {
    if (fs::exists(run_dir_) && !fs::is_directory(run_dir_))
      throw InputError(fmt::format("run directory {} is not a directory", run_dir_.string()));
    if (rank_ != 0 || (options_.resume && !fs::is_directory(run_dir_))) return;
    // The outermost directory the lock (which creates run_dir) is about to make (runs/, when it
    // is new): removed again if the input turns out bad.
    for (fs::path p = fs::absolute(run_dir_); !p.empty() && !fs::exists(p); p = p.parent_path())
      created_dir_ = p;
    lock_ = RunLock::acquire(run_dir_, !options_.resume);
  }

  // The memory per rank: as given, else on --resume what the interrupted run was given (the
  // same machine); on a GPU the device's less a reserve, which --device-memory may only lower.
  void resolve_resources(const std::optional<RecordedRun>& recorded) {
    const auto memory = [&](const std::string& given, const char* key, const char* flag) {
      if (given.empty() && recorded && recorded->state.contains(key)) {
        const auto bytes = recorded->state[key].get<std::size_t>();
        if (bytes > 0 && rank_ == 0 && !options_.quiet)
          log::info("--resume: {} {} per rank, as the interrupted run was given", flag,
                    format_bytes(bytes));
        return bytes;
      }
      return given.empty() ? std::size_t{0} : parse_bytes(given, flag);
    };
    resources_.device = options_.device;
    resources_.device_index = options_.device_index;
    resources_.device_bytes = device_capacity_for(
        options_.device,
        options_.device_index >= 0 ? options_.device_index
                                   : std::max(0, comm::launcher_local_rank()),
        memory(options_.device_memory, "device_memory_bytes", "--device-memory"),
        "--device-memory");
    resources_.host_bytes = memory(options_.host_memory, "host_memory_bytes", "--host-memory");
  }

  void discover() {
    ranks_ =
        discover_cluster(MPI_COMM_WORLD, w_.cluster, resources_.device_bytes, w_.cluster_where);
    if (rank_ == 0 && !options_.quiet)
      log::info("{}: {} jobs on {} ({} ranks){}", w_.name, w_.jobs.size(),
                solver::format_cluster(ranks_.cluster), world_->size(),
                options_.resume ? fmt::format(", resuming {}", run_dir_.string()) : "");
  }

  // Rank 0: the run directory with the text every rank parsed (not the file again: it may have
  // changed since) and the cluster.
  void prepare_run_dir() {
    if (rank_ != 0) return;
    const RunDir run(run_dir_);
    fs::create_directories(run.jobs_dir());
    if (!options_.resume || !fs::exists(run.workload_copy()))
      run.write_workload_copy(w_.source_text);
    std::ofstream(run.cluster_file()) << ranks_.to_json().dump(2) << '\n';
  }

  // Calibration and trials (collective), the planner's input for the work left, and rank 0's
  // planner for jobs `saturn submit` adds later.
  void profile() {
    PlanningRequest req;
    req.workload = &w_;
    req.ranks = &ranks_;
    req.store = options_.store.empty() ? RunDir(run_dir_).profile_store() : options_.store;
    req.resources = resources_;
    req.trials = options_.trials;
    req.quick_calibration = options_.quick_calibration;
    req.current_practice = current_practice_trial(options_);
    req.remaining_steps = remaining_steps();
    const auto start = std::chrono::steady_clock::now();
    // Measured with the trials' probes, the other ranks computing, as checkpoints are written
    // beside other jobs; once per file system (the calibration keeps the rates).
    req.measure_checkpoint_writes = [this] { return measure_checkpoint_writes(); };
    req.checkpoint_file_system = profile::file_system_id(RunDir(run_dir_).jobs_dir());
    profile::ProfileResult startup;
    planning_ = build_planning_input(req, *world_, &startup);
    req.checkpoint_writes = startup.checkpoint_writes;
    req.measure_checkpoint_writes = nullptr;  // the added jobs' planner prices by these rates
    const profile::WriteRates& w = req.checkpoint_writes;
    if (rank_ == 0 && w.measured() && !options_.quiet)
      log::info("checkpoint writes to {}: {:.1f} ms a file + {:.2f} ms a dataset + {:.0f} MB/s",
                run_dir_.string(), 1e3 * w.latency_s, 1e3 * w.dataset_s, w.bytes_per_s / 1e6);
    // Before the coordinator and the workers start: the planner reads the store file (HDF5,
    // which is not thread-safe here).
    if (rank_ == 0) added_job_planner_ = std::make_shared<const AddedJobPlanner>(req, startup);
    profiling_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // The rates the run directory's file system takes checkpoints at (the rank that runs it
  // writes probe files where the checkpoints go): the planner prices each checkpoint by them. A
  // directory the probe cannot write (a full disk) does not stop the batch: its checkpoints are
  // then unpriced, and each job's own checkpoint writes report the problem where it hurts.
  profile::WriteRates measure_checkpoint_writes() const {
    const fs::path dir = RunDir(run_dir_).jobs_dir();
    try {
      profile::WriteRates r = profile::measure_write_rates(dir);
      r.dataset_s = checkpoint_dataset_seconds(dir, r);
      return r;
    } catch (const Error& e) {  // IoError, or the probe checkpoint's CheckpointError
      log::warn("checkpoint writes to {} not measured ({}): the plan does not price them",
                run_dir_.string(), e.what());
      return {};
    }
  }

  // Per job: 0 when it is done or will not run again; at least 1 otherwise (a job checkpointed
  // at its last step without final.h5, stopped there by an older version, still has its final
  // weights to write: resuming at the last step writes them).
  std::vector<std::int64_t> remaining_steps() const {
    std::vector<std::int64_t> left;
    for (std::size_t j = 0; j < w_.jobs.size(); ++j) {
      const bool done = (!resume_.finished.empty() && resume_.finished[j]) ||
                        (!resume_.settled.empty() && resume_.settled[j]);
      const std::int64_t did = resume_.steps_done.empty() ? 0 : resume_.steps_done[j];
      left.push_back(done ? 0 : std::max<std::int64_t>(1, w_.jobs[j].train.steps - did));
    }
    return left;
  }

  // Bad input found once the run directory exists (a job that fits no configuration shows only
  // after the trials wrote their store): a directory this run made goes again, so that an
  // input error leaves nothing behind.
  int refuse(const comm::AgreedFailure& e) {
    if (rank_ == 0 && !created_dir_.empty() && e.exit_code() == kExitBadInput) {
      lock_.reset();  // its file lives in the directory
      std::error_code ec;
      fs::remove_all(created_dir_, ec);
    }
    return comm::report_agreed_failure(*world_, e);
  }

  CoordinatorSetup coordinator_setup() const {
    CoordinatorSetup cs;
    cs.run_dir = run_dir_;
    cs.workload = &w_;
    cs.ranks = ranks_;
    cs.planning = planning_;
    cs.steps_done = resume_.steps_done;
    cs.finished = resume_.finished;
    cs.selection_state = resume_.selection;
    cs.cancelled = resume_.cancelled;
    cs.early_stopped = resume_.early_stopped;
    cs.solve.time_limit_s = w_.solver.time_limit_s;
    cs.solve.clock = solver::parse_clock_basis(w_.solver.clock);
    cs.solve.threads = w_.solver.threads;
    cs.solve.backend = w_.solver.backend == "cbc" ? solver::Backend::cbc : solver::Backend::glpk;
    cs.policy = options_.policy;
    cs.current_practice = options_.current_practice.empty()        ? "fsdp"
                          : options_.current_practice == "fastest" ? ""
                                                                   : options_.current_practice;
    cs.replan = options_.replan && !parse_policy(options_.policy);
    cs.replan_interval_s = options_.replan_interval_s > 0 ? options_.replan_interval_s
                                                          : w_.solver.introspection.interval_s;
    cs.replan_threshold = w_.solver.introspection.threshold;
    cs.elapsed_before_s = resume_.elapsed_s;
    cs.profiling_s = profiling_s_;
    cs.next_plan_index = resume_.next_plan;
    cs.progress_interval_s = options_.progress_interval_s;
    cs.quiet = options_.quiet;
    cs.resources = resources_;
    cs.plan_added_jobs = [planner = added_job_planner_](const Workload& batch, std::size_t first) {
      return planner->plan(batch, first);
    };
    return cs;
  }

  // Rank 0 coordinates in a thread; every rank, rank 0 too, trains what it is given until the
  // coordinator says the batch is over (the exit code is the coordinator's).
  int execute() {
    MPI_Comm control = MPI_COMM_NULL;
    MPI_Comm_dup(MPI_COMM_WORLD, &control);
    RunContext ctx;
    ctx.world = MPI_COMM_WORLD;
    ctx.control = control;
    ctx.run_dir = run_dir_;
    ctx.workload = &w_;
    ctx.resources = resources_;
    ctx.progress_interval_s = 1.0;
    std::thread coordinator;
    if (rank_ == 0)
      coordinator = std::thread([cs = coordinator_setup(), control]() mutable {
        try {
          Coordinator(std::move(cs)).run(control);
        } catch (const std::exception& e) {
          // The coordinator cannot recover its view of the batch: stop the whole MPI job,
          // whose checkpoints let `saturn run --resume` continue.
          log::error("coordinator: {}", e.what());
          MPI_Abort(MPI_COMM_WORLD, kExitFailure);
        }
      });
    const int code = worker_loop(ctx, w_);
    if (coordinator.joinable()) coordinator.join();
    MPI_Comm_free(&control);
    if (rank_ == 0 && !options_.quiet) {
      if (code == kExitCheckpointed)
        log::warn("stopped with work left; continue with: saturn run --resume {}",
                  run_dir_.string());
      log::info("summary: {}", RunDir(run_dir_).summary_file().string());
    }
    return code;
  }

  RunOptions options_;  // a --resume of a start that never planned starts afresh
  std::unique_ptr<comm::MpiCommunicator> world_;
  int rank_ = 0;
  Workload w_;
  fs::path run_dir_;
  Resources resources_;  // this rank's: the backend, its device, the memory per rank
  ResumeState resume_;
  RankMap ranks_;
  PlanningInput planning_;
  double profiling_s_ = 0;  // calibration and trials, before the batch's clock starts
  std::shared_ptr<const AddedJobPlanner> added_job_planner_;  // rank 0: for `saturn submit`
  std::optional<RunLock> lock_;  // rank 0's, released when the run ends
  fs::path created_dir_;  // rank 0: the outermost directory this run made for run_dir, if any
};

}  // namespace

int run_batch(const RunOptions& options) {
  return BatchRun(options).run();
}

}  // namespace saturn::exec
