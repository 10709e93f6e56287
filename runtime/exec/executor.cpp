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
#include "runtime/exec/cluster.hpp"
#include "runtime/exec/coordinator.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/job_runner.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/planning.hpp"
#include "runtime/exec/run_lock.hpp"
#include "runtime/exec/selection.hpp"
#include "runtime/exec/signals.hpp"
#include "runtime/exec/submission.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/workload/run_workload.hpp"

namespace saturn::exec {
namespace {

namespace fs = std::filesystem;

// What an earlier, interrupted run of this directory left: jobs finished (final.h5), steps
// done (newest checkpoint's step), wall time spent, plans written.
struct ResumeState {
  std::vector<std::int64_t> steps_done;
  std::vector<bool> finished;
  double elapsed_s = 0;
  int next_plan = 0;
  nlohmann::json selection;            // run_state.json's "selection" (null: none)
  std::vector<std::string> cancelled;  // run_state.json's "cancelled"
  nlohmann::json early_stopped;        // run_state.json's "early_stopped" (null: none)
  // Per job: it will not run again (stopped by its early_stop or by selection, cancelled, or
  // failed and withdrawn from selection), so it is neither profiled nor planned.
  std::vector<bool> settled;
};

// The absolute `from` directories a run recorded (run_state.json "model_dirs"), by model name.
// Not inlined into run_batch's input check: GCC 12 reports a false -Wmaybe-uninitialized on
// the optional run state there.
[[gnu::noinline]] std::map<std::string, fs::path> recorded_model_dirs(const nlohmann::json& state) {
  std::map<std::string, fs::path> dirs;
  const auto it = state.find("model_dirs");
  if (it == state.end() || !it->is_object()) return dirs;
  for (const auto& [model, dir] : it->items())
    if (dir.is_string()) dirs[model] = dir.get<std::string>();
  return dirs;
}

ResumeState read_resume_state(const Workload& w, const fs::path& run_dir) {
  ResumeState s;
  for (const auto& job : w.jobs) {
    const fs::path job_dir = run_dir / "jobs" / job.id;
    const bool done = fs::exists(ckpt::final_path(job_dir));
    std::int64_t step = 0;
    if (done) {
      step = job.train.steps;
    } else {
      for (const auto& f : ckpt::list_checkpoints(job_dir))
        if (auto n = ckpt::parse_step_file_name(f.filename().string())) step = std::max(step, *n);
    }
    s.finished.push_back(done);
    s.steps_done.push_back(step);
  }
  const fs::path state_file = run_dir / "run_state.json";
  if (const auto state = read_run_state(run_dir)) {
    const nlohmann::json& j = *state;
    // Without its selection state a resumed run would decide its rungs again, differently.
    if (w.selection.enabled() && j.is_discarded())
      throw InputError(fmt::format(
          "--resume: {} is not valid JSON: the selection decisions it holds cannot be restored",
          state_file.string()));
    if (!j.is_discarded()) {
      s.elapsed_s = j.value("elapsed_s", 0.0);
      s.next_plan = j.value("next_plan", 0);
      if (j.contains("selection") && w.selection.enabled()) {
        s.selection = j["selection"];
        // Checked here, with the input (exit 2 naming the file and the field), not when the
        // coordinator restores it (its errors end the MPI job).
        std::vector<std::string> ids;
        for (const auto& job : w.jobs) ids.push_back(job.id);
        Selection restored(w.selection, ids);
        restored.restore(s.selection, state_file.string());
        s.settled.resize(w.jobs.size());
        for (std::size_t k = 0; k < w.jobs.size(); ++k)
          s.settled[k] =
              restored.stopped(static_cast<int>(k)) || restored.withdrawn(static_cast<int>(k));
      }
      if (j.contains("early_stopped")) {
        // Checked like the selection state: a malformed entry is exit 2, file and field.
        const nlohmann::json& es = j["early_stopped"];
        if (!es.is_object())
          throw InputError(
              fmt::format("--resume: {}: early_stopped must be an object (job id: "
                          "the early_stop that stopped it), found {}",
                          state_file.string(), es.dump()));
        for (const auto& [id, hit] : es.items()) {
          const bool known = std::any_of(w.jobs.begin(), w.jobs.end(),
                                         [&](const JobSpec& job) { return job.id == id; });
          if (!known)
            throw InputError(
                fmt::format("--resume: {}: early_stopped.{}: the workload has no job '{}' any more",
                            state_file.string(), id, id));
          try {
            const EarlyStopHit h = EarlyStopHit::from_json(hit);
            if (h.rule != "diverged" && h.rule != "patience")
              throw InputError("rule must be diverged or patience");
          } catch (const std::exception& e) {
            throw InputError(fmt::format(
                "--resume: {}: early_stopped.{} is malformed ({}): expected {{rule: diverged | "
                "patience, step, metric, value, reference}}, found {}",
                state_file.string(), id, e.what(), hit.dump()));
          }
        }
        s.early_stopped = es;
      }
      if (j.contains("cancelled") && j["cancelled"].is_array())
        for (const auto& id : j["cancelled"])
          if (id.is_string()) s.cancelled.push_back(id.get<std::string>());
    }
  }
  s.settled.resize(w.jobs.size());
  for (std::size_t k = 0; k < w.jobs.size(); ++k) {
    const std::string& id = w.jobs[k].id;
    if ((s.early_stopped.is_object() && s.early_stopped.contains(id)) ||
        std::find(s.cancelled.begin(), s.cancelled.end(), id) != s.cancelled.end())
      s.settled[k] = true;
  }
  return s;
}

// The root attributes of a checkpoint, or nullopt when it cannot be read (a corrupt newest
// checkpoint is the loader's to skip, with its warning). Rank 0 alone, on MPI_COMM_SELF.
std::optional<ckpt::CheckpointMeta> meta_of(const fs::path& file) {
  try {
    return ckpt::read_meta(MPI_COMM_SELF, file);
  } catch (const ckpt::CheckpointError&) {
    return std::nullopt;
  }
}

// --resume: a job whose checkpoints are another job's, or past its steps, cannot continue from
// them; the resume is refused before any rank trains (it used to "finish" such a job with steps
// that never ran and no final.h5).
void check_resumable(const Workload& w, const fs::path& run_dir) {
  for (const auto& job : w.jobs) {
    const fs::path job_dir = run_dir / "jobs" / job.id;
    const std::int64_t steps = job.train.steps;
    const fs::path final = ckpt::final_path(job_dir);
    if (fs::exists(final)) {
      const auto m = meta_of(final);
      if (m && m->job_id != job.id)
        throw InputError(fmt::format("--resume: {} belongs to job '{}', not to job '{}'",
                                     final.string(), m->job_id, job.id));
      if (m && m->step != steps)
        throw InputError(fmt::format(
            "--resume: job {} finished at step {} ({}), but the workload now gives it {} steps; "
            "restore steps: {}, or move {} away to continue the job from its newest checkpoint",
            job.id, m->step, final.string(), steps, m->step, final.filename().string()));
      continue;
    }
    const auto files = ckpt::list_checkpoints(job_dir);
    if (files.empty()) continue;
    const auto step = ckpt::parse_step_file_name(files.front().filename().string());
    if (step && *step > steps)
      throw InputError(fmt::format(
          "--resume: job {}'s newest checkpoint {} is at step {}, past the job's {} steps (were "
          "the workload's steps lowered?); give it at least {} steps, or move {} away to train "
          "it from scratch",
          job.id, files.front().string(), *step, steps, *step,
          ckpt::checkpoints_dir(job_dir).string()));
    const auto m = meta_of(files.front());
    if (m && m->job_id != job.id)
      throw InputError(fmt::format(
          "--resume: {} belongs to job '{}', not to job '{}' (copied from another job's "
          "directory?); move it away to resume the job",
          files.front().string(), m->job_id, job.id));
  }
}

// --resume: the Hugging Face models the run started from (`from:`) must be as they were. A job
// that checkpointed would continue from other weights than it started with, and one that had
// not started would train another model than the batch planned, silently. The directories are
// read whole again (checksums and finite values, hf::scan_model_dir) and compared with what
// run_state.json recorded, before any rank trains. The verified checksums are recorded again.
void check_models_unchanged(const nlohmann::json& state, const fs::path& run_dir, Workload& w) {
  const fs::path file = run_dir / "run_state.json";
  const auto dirs = recorded_model_dirs(state);
  const auto it = state.find("model_checksums");
  if (it == state.end() || !it->is_object()) {
    if (!dirs.empty())
      log::warn(
          "--resume: {} records no checksums of the run's `from:` models (written by an older "
          "Saturn): whether they changed since the run started is not checked",
          file.string());
    return;
  }
  for (const auto& [model, recorded] : it->items()) {
    const auto dir = dirs.find(model);
    if (dir == dirs.end() || !recorded.is_object())
      throw InputError(fmt::format(
          "--resume: {}: model_checksums.{} is malformed (expected file: checksum, for a model "
          "of model_dirs)",
          file.string(), model));
    const std::string where =
        fmt::format("--resume: models.{}.from {}", model, dir->second.string());
    hf::ModelDirChecksums now;
    try {
      now = hf::scan_model_dir(dir->second, hf::read_config(dir->second).model);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: {}", where, e.what()));
    }
    std::map<std::string, std::uint64_t> was;
    for (const auto& [name, sum] : recorded.items()) {
      std::uint64_t v = 0;
      if (!sum.is_string() || !parse_hash(sum.get<std::string>(), v))
        throw InputError(
            fmt::format("--resume: {}: model_checksums.{}.{}: expected \"0x...\", got {}",
                        file.string(), model, name, sum.dump()));
      was[name] = v;
    }
    for (const auto& [name, sum] : was) {
      const auto n = now.files.find(name);
      if (n == now.files.end() || n->second != sum)
        throw InputError(fmt::format(
            "{} changed since the run started: {} {} (recorded {}); its jobs would continue from "
            "other weights than they started with, or train another model than the batch "
            "planned (valid: restore the directory as it was, or start a new run with another "
            "--run-dir)",
            where, name,
            n == now.files.end() ? "is gone" : "has checksum " + format_hash(n->second),
            format_hash(sum)));
    }
    for (const auto& [name, sum] : now.files)
      if (!was.count(name))
        throw InputError(fmt::format(
            "{} changed since the run started: {} is new (valid: restore the directory as it "
            "was, or start a new run with another --run-dir)",
            where, name));
    w.pretrained_checksums[model] = was;
  }
}

// A resumed run is the run its directory holds: RUN_DIR/workload.yaml, the text it started
// with (or that was edited there to change it), is what `saturn status`, `submit`, `cancel` and
// `report` read and what its submitted jobs follow. A WORKLOAD given with --resume (the form a
// `saturn sbatch` requeue uses) must say the same, or the ranks would run another batch than the
// one the run directory describes.
void check_resumes_its_workload(const Workload& w, const fs::path& run_dir) {
  // No copy: no run there yet, refused later ("holds no run").
  if (!run_copy_differs(run_dir, w)) return;
  const fs::path copy = run_dir / "workload.yaml";
  throw InputError(fmt::format(
      "--resume: {} differs from {}, the workload of the run being resumed (was the file edited "
      "since the run started?); a resumed run continues from its run directory's copy: resume "
      "with `saturn run --resume {}`, or, to change the run, edit {} (e.g. copy {} over it) and "
      "resume",
      w.source.string(), copy.string(), run_dir.string(), copy.string(), w.source.string()));
}

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

}  // namespace

int run_batch(const RunOptions& requested) {
  RunOptions options = requested;  // a --resume of a start that never planned starts afresh
  auto world = comm::MpiCommunicator::world();
  const int rank = world->rank();
  if (world->size() > 1) log::set_rank(rank);
  install_stop_signal_handlers();
  Workload w;
  fs::path run_dir;
  std::size_t capacity = 0, host_capacity = 0;
  ResumeState resume;
  RankMap ranks;
  PlanningInput planning;
  double profiling_s = 0;  // calibration and trials, before the batch's clock starts
  std::shared_ptr<const AddedJobPlanner> added_job_planner;  // rank 0: for `saturn submit`
  std::optional<RunLock> lock;  // rank 0's, released when run_batch returns
  fs::path created_dir;         // rank 0: the outermost directory this run made for run_dir, if any
  try {
    // Everything about the input is checked before any rank trains or anything is written.
    comm::agree_on(*world, [&] {
      parse_policy(options.policy);
      // A resumed run reads the run directory's copy of the workload, whose relative data
      // paths meant the original file's directory: run_state.json recorded them absolute.
      LoadOptions lo;
      lo.check_data_contents = rank == 0;  // one pass over the data is enough (agreed)
      std::optional<nlohmann::json> state;
      if (options.resume && !options.run_dir.empty()) {
        state = read_run_state(options.run_dir);
        if (state && (state->is_discarded() || !state->contains("train_data"))) state.reset();
        if (state) {
          lo.check_data_files = false;
          lo.model_dirs = recorded_model_dirs(*state);
        }
      }
      w = load_workload(options.workload, lo);
      if (state) {
        w.train_data = (*state)["train_data"].get<std::string>();
        w.val_data = (*state)["val_data"].get<std::string>();
        for (const auto& f : {w.train_data, w.val_data})
          if (!fs::exists(f))
            throw InputError(
                fmt::format("--resume: the run's data file {} no longer exists", f.string()));
      }
      check_selection_runs(w, options);
      run_dir = options.run_dir.empty() ? fs::path("runs") / w.name : options.run_dir;
      // A start killed before its first plan (node failure or pre-emption during profiling)
      // left the run's copy of the workload and jobs/ but no timeline: nothing trained, so the
      // --resume that a requeued `saturn sbatch` job passes starts the batch from the beginning.
      if (options.resume && !fs::exists(run_dir / "timeline.jsonl") &&
          (fs::exists(run_dir / "workload.yaml") || fs::is_directory(run_dir / "jobs"))) {
        if (rank == 0 && !options.quiet)
          log::warn(
              "--resume: {} holds a batch that never reached its first plan (no "
              "timeline.jsonl: its start was stopped while profiling?); starting it from the "
              "beginning with {}",
              run_dir.string(), options.workload.string());
        options.resume = false;
      }
      if (options.resume && rank == 0) check_resumes_its_workload(w, run_dir);
      // The jobs `saturn submit` added to the interrupted run, after its own.
      if (options.resume)
        if (const auto subs = accepted_submissions(run_dir); !subs.empty()) {
          LoadOptions checked_when_accepted;
          checked_when_accepted.check_data_files = false;
          w = add_submissions(w, subs, checked_when_accepted);
        }
      if (fs::exists(run_dir) && !fs::is_directory(run_dir))
        throw InputError(fmt::format("run directory {} is not a directory", run_dir.string()));
      // One run per directory (run_lock.hpp), from before anything in it is read or written
      // until the last rank is done. A --resume of nothing is refused below without creating it.
      if (rank == 0 && (!options.resume || fs::is_directory(run_dir))) {
        // The outermost directory the lock (which creates run_dir) is about to make (runs/,
        // when it is new): removed again if the input turns out bad.
        for (fs::path p = fs::absolute(run_dir); !p.empty() && !fs::exists(p); p = p.parent_path())
          created_dir = p;
        lock = RunLock::acquire(run_dir, !options.resume);
      }
      // Not given on --resume: the memory the interrupted run was given (same machine).
      const auto memory = [&](const std::string& given, const char* key, const char* flag) {
        if (given.empty() && state && state->contains(key)) {
          const auto bytes = (*state)[key].get<std::size_t>();
          if (bytes > 0 && rank == 0 && !options.quiet)
            log::info("--resume: {} {} per rank, as the interrupted run was given", flag,
                      format_bytes(bytes));
          return bytes;
        }
        return given.empty() ? std::size_t{0} : parse_bytes(given, flag);
      };
      capacity = memory(options.device_memory, "device_memory_bytes", "--device-memory");
      // On a GPU the capacity is the device's (less a reserve); --device-memory may only
      // lower it.
      capacity =
          device_capacity_for(options.device,
                              options.device_index >= 0 ? options.device_index
                                                        : std::max(0, comm::launcher_local_rank()),
                              capacity, "--device-memory");
      host_capacity = memory(options.host_memory, "host_memory_bytes", "--host-memory");
      const bool has_run = fs::exists(run_dir / "timeline.jsonl");
      if (has_run && !options.resume)
        throw InputError(
            fmt::format("{} already holds a run; continue it with `saturn run "
                        "--resume {}` or choose another --run-dir",
                        run_dir.string(), run_dir.string()));
      if (options.resume && !has_run)
        throw InputError(fmt::format("--resume: {} holds no run to resume (no timeline.jsonl)",
                                     run_dir.string()));
      if (options.resume) {
        if (rank == 0) check_resumable(w, run_dir);
        if (rank == 0 && state) check_models_unchanged(*state, run_dir, w);
        resume = read_resume_state(w, run_dir);
      }
    });
    comm::agree_on(*world, [&] {
      ranks = discover_cluster(MPI_COMM_WORLD, w.cluster, capacity, w.cluster_where);
    });
    if (rank == 0 && !options.quiet)
      log::info("{}: {} jobs on {} ({} ranks){}", w.name, w.jobs.size(),
                solver::format_cluster(ranks.cluster), world->size(),
                options.resume ? fmt::format(", resuming {}", run_dir.string()) : "");
    comm::agree_on(*world, [&] {
      if (rank != 0) return;
      fs::create_directories(run_dir / "jobs");
      // The text every rank parsed, not the file again (it may have changed since).
      if (!options.resume || !fs::exists(run_dir / "workload.yaml"))
        write_file_atomic(run_dir / "workload.yaml", w.source_text, Durability::kFsync);
      std::ofstream(run_dir / "cluster.json") << ranks.to_json().dump(2) << '\n';
    });
    PlanningRequest req;
    req.workload = &w;
    req.ranks = &ranks;
    req.store = options.store.empty() ? run_dir / "profiles.h5" : options.store;
    req.device_capacity = capacity;
    req.host_capacity = host_capacity;
    req.trials = options.trials;
    req.quick_calibration = options.quick_calibration;
    req.device = options.device;
    req.device_index = options.device_index;
    req.current_practice = current_practice_trial(options);
    for (std::size_t j = 0; j < w.jobs.size(); ++j) {
      const bool done = (!resume.finished.empty() && resume.finished[j]) ||
                        (!resume.settled.empty() && resume.settled[j]);
      const std::int64_t did = resume.steps_done.empty() ? 0 : resume.steps_done[j];
      // A job checkpointed at its last step without final.h5 (stopped there by an older
      // version) still has its final weights to write: plan it as one step, which resuming
      // at the last step turns into writing final.h5.
      req.remaining_steps.push_back(done ? 0
                                         : std::max<std::int64_t>(1, w.jobs[j].train.steps - did));
    }
    const auto profile_start = std::chrono::steady_clock::now();
    profile::ProfileResult startup;
    comm::agree_on(*world, [&] {
      planning = build_planning_input(req, *world, &startup);
      // Before the coordinator and the workers start: the planner reads the store file (HDF5,
      // which is not thread-safe here).
      if (rank == 0) added_job_planner = std::make_shared<const AddedJobPlanner>(req, startup);
    });
    profiling_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - profile_start).count();
  } catch (const comm::AgreedFailure& e) {
    // Bad input found once the run directory exists (a job that fits no configuration shows only
    // after the trials wrote their store): a directory this run made goes again, so that an
    // input error leaves nothing behind.
    if (rank == 0 && !created_dir.empty() && e.exit_code() == kExitBadInput) {
      lock.reset();  // its file lives in the directory
      std::error_code ec;
      fs::remove_all(created_dir, ec);
    }
    return comm::report_agreed_failure(*world, e);
  }

  MPI_Comm control = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &control);
  RunContext ctx;
  ctx.world = MPI_COMM_WORLD;
  ctx.control = control;
  ctx.run_dir = run_dir;
  ctx.workload = &w;
  ctx.device_capacity = capacity;
  ctx.host_capacity = host_capacity;
  ctx.device = options.device;
  ctx.device_index = options.device_index;
  ctx.progress_interval_s = 1.0;

  int coordinator_code = 0;
  std::thread coordinator;
  if (rank == 0) {
    CoordinatorSetup cs;
    cs.run_dir = run_dir;
    cs.workload = &w;
    cs.ranks = ranks;
    cs.planning = planning;
    cs.steps_done = resume.steps_done;
    cs.finished = resume.finished;
    cs.selection_state = resume.selection;
    cs.cancelled = resume.cancelled;
    cs.early_stopped = resume.early_stopped;
    cs.solve.time_limit_s = w.solver.time_limit_s;
    cs.solve.backend = w.solver.backend == "cbc" ? solver::Backend::cbc : solver::Backend::glpk;
    cs.policy = options.policy;
    cs.current_practice = options.current_practice.empty()        ? "fsdp"
                          : options.current_practice == "fastest" ? ""
                                                                  : options.current_practice;
    cs.replan = options.replan && !parse_policy(options.policy);
    cs.replan_interval_s = options.replan_interval_s > 0 ? options.replan_interval_s
                                                         : w.solver.introspection.interval_s;
    cs.replan_threshold = w.solver.introspection.threshold;
    cs.elapsed_before_s = resume.elapsed_s;
    cs.profiling_s = profiling_s;
    cs.next_plan_index = resume.next_plan;
    cs.progress_interval_s = options.progress_interval_s;
    cs.quiet = options.quiet;
    cs.device_capacity = capacity;
    cs.host_capacity = host_capacity;
    cs.plan_added_jobs = [added_job_planner](const Workload& batch, std::size_t first) {
      return added_job_planner->plan(batch, first);
    };
    coordinator = std::thread([&coordinator_code, cs = std::move(cs), control]() mutable {
      try {
        Coordinator c(std::move(cs));
        coordinator_code = c.run(control);
      } catch (const std::exception& e) {
        // The coordinator cannot recover its view of the batch: stop the whole MPI job, whose
        // checkpoints let `saturn run --resume` continue.
        log::error("coordinator: {}", e.what());
        MPI_Abort(MPI_COMM_WORLD, kExitFailure);
      }
    });
  }
  const int code = worker_loop(ctx, w);
  if (coordinator.joinable()) coordinator.join();
  MPI_Comm_free(&control);
  if (rank == 0 && !options.quiet) {
    if (code == kExitCheckpointed)
      log::warn("stopped with work left; continue with: saturn run --resume {}", run_dir.string());
    log::info("summary: {}", (run_dir / "summary.json").string());
  }
  (void)coordinator_code;
  return code;
}

}  // namespace saturn::exec
