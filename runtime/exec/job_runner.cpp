#include "runtime/exec/job_runner.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <optional>

#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/signals.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/train/parallel_trainer.hpp"

namespace saturn::exec {
namespace {

using Clock = std::chrono::steady_clock;

// Fault injection for tests: SATURN_FAIL_JOB=<job-id>:<step> makes the job's last rank fail
// while preparing that step (the group must agree on the failure and carry on without it).
bool injected_failure(const std::string& job_id, std::int64_t step) {
  const char* spec = std::getenv("SATURN_FAIL_JOB");
  if (spec == nullptr) return false;
  const std::string s(spec);
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || s.substr(0, colon) != job_id) return false;
  return std::atoll(s.c_str() + colon + 1) == step;
}

// One segment of one job as this rank runs it: the job and options the trainer gets, what this
// rank asks after each step (the early_stop rule, the coordinator's stop, progress, the
// selection rung, a signal, an injected fault), and the outcome reported to the coordinator.
class Segment {
 public:
  Segment(const RunContext& ctx, const SegmentLaunch& launch, comm::Communicator& comm)
      : ctx_(ctx),
        launch_(launch),
        comm_(comm),
        spec_(find_job(*ctx.workload, launch.job_id)),
        leader_(comm.rank() == 0),
        job_dir_(RunDir(ctx.run_dir).job_dir(launch.job_id)),
        early_stop_(spec_.train.early_stop) {}

  SegmentOutcome run() {
    SegmentOutcome out;
    try {
      out = outcome(train_with_strategy(job(), train_options(), parallel_options(), comm_));
    } catch (const comm::AgreedFailure& e) {
      out.status = SegmentStatus::kFailed;
      out.reason = e.what();
    } catch (const std::exception& e) {
      // A failure on this rank alone after set-up: the others may wait in a collective, so the
      // MPI job cannot continue. Its checkpoints let `saturn run --resume` go on.
      log::error("job {}: {} (rank-local failure inside a collective step: stopping the run)",
                 spec_.id, e.what());
      MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    }
    if (out.status == SegmentStatus::kFailed && leader_)
      log::warn("job {} failed: {}", spec_.id, out.reason);
    return out;
  }

 private:
  TrainJob job() const {
    // A job `saturn submit` added with data of its own trains on that.
    const bool own_data = !spec_.train_data.empty();
    return TrainJob{spec_.id,
                    spec_.model,
                    spec_.train,
                    own_data ? spec_.train_data : ctx_.workload->train_data,
                    own_data ? spec_.val_data : ctx_.workload->val_data,
                    spec_.init_from};
  }

  TrainOptions train_options() const {
    TrainOptions opt;
    opt.job_dir = job_dir_;
    opt.resources = ctx_.resources;
    opt.quiet = true;   // the coordinator prints the batch's progress
    opt.resume = true;  // continue from the job's newest checkpoint when it has one
    opt.export_format = export_option(ctx_.workload->export_format);
    return opt;
  }

  ParallelOptions parallel_options() {
    ParallelOptions par;
    par.strategy = launch_.strategy;
    par.degree = static_cast<int>(launch_.ranks.size());
    par.knobs = parallel::parse_knobs(launch_.knobs);
    par.nonfinite_stops = spec_.train.early_stop.diverged;
    par.step_requests = [this](const StepRecord& r) { return requests(r); };
    return par;
  }

  StepRequests requests(const StepRecord& r) {
    StepRequests mine;
    // The step's wall time as the coordinator sees it (evaluation and checkpoints included).
    const auto now = Clock::now();
    const double step_time = std::chrono::duration<double>(now - last_step_end_).count();
    last_step_end_ = now;
    if (leader_) {
      mine.early_stop = observe_early_stop(r);
      mine.stop = stop_poll_due(now) && coordinator_asked_stop();
      report_progress(r, now, step_time);
    }
    mine.signal = stop_signal_received();
    if (at_rung(r.step)) mine.stop = true;  // every rank sees the same step
    mine.fault = comm_.rank() == comm_.size() - 1 && injected_failure(spec_.id, r.step);
    return mine;
  }

  // early_stop: the leader runs the rule (the losses are the same on every rank); the ranks
  // agree on the stop. Earlier segments' steps come from metrics.jsonl, read at the first step
  // (the trainer has cut it back to the checkpoint by then).
  bool observe_early_stop(const StepRecord& r) {
    if (!early_stop_.enabled()) return false;
    if (!early_stop_replayed_) {
      const std::filesystem::path metrics = RunDir::metrics_file(job_dir_);
      std::error_code ec;
      early_stop_.replay(std::filesystem::exists(metrics, ec) ? read_input_file(metrics) : "",
                         r.step);
      early_stop_replayed_ = true;
    }
    early_hit_ = early_stop_.observe(r.step, r.loss,
                                     r.has_val ? std::optional<double>(r.val_loss) : std::nullopt);
    return early_hit_.has_value();
  }

  // Looking for a message costs a time slice where ranks share cores (MPI yields the processor
  // when it finds none): at most every 20 ms, so a stop waits at most 20 ms longer.
  bool stop_poll_due(Clock::time_point now) {
    if (now - last_stop_poll_ < std::chrono::milliseconds(20)) return false;
    last_stop_poll_ = now;
    return true;
  }

  // A stop sent as an earlier segment of this leader ended (a re-plan or cancel racing its
  // finish or rung) is stale: dropped, or it would stop this segment after one step.
  bool coordinator_asked_stop() {
    while (auto stop = try_receive<StopRequest>(ctx_.control, 0)) {
      if (stop->job != launch_.job_id || stop->segment != launch_.segment) continue;
      asked_ = stop->reason;
      return true;
    }
    return false;
  }

  void report_progress(const StepRecord& r, Clock::time_point now, double step_time) {
    if (!r.has_val && r.step != spec_.train.steps &&
        std::chrono::duration<double>(now - last_progress_).count() < ctx_.progress_interval_s)
      return;
    send(ctx_.control, 0,
         Progress{spec_.id, r.step, r.loss, r.tokens_per_s, step_time,
                  r.has_val ? std::optional<double>(r.val_loss) : std::nullopt, r.times});
    last_progress_ = now;
  }

  bool at_rung(std::int64_t step) const {
    return launch_.pause_step > 0 && step >= launch_.pause_step;
  }

  SegmentOutcome outcome(const TrainResult& result) {
    SegmentOutcome out;
    out.step = result.steps_done;
    out.peak_device_bytes = static_cast<double>(result.peak_device_bytes);
    out.times = result.times;
    if (!result.steps.empty() && result.steps.back().has_val)
      out.val_loss = result.steps.back().val_loss;
    out.signal = result.decision.signal;
    if (!result.stopped) {
      out.status = SegmentStatus::kFinished;
      return out;
    }
    out.status = SegmentStatus::kStopped;
    out.reason = stop_reason(result);
    if (leader_ && early_hit_) out.early_stop = early_hit_->to_json();
    return out;
  }

  // What stopped it, most telling first: a divergence, the job's own early stop (it goes no
  // further), a signal (it outranks a re-plan's stop: the whole batch stops, and out.signal
  // says so whatever else did), the coordinator's reason, the selection rung.
  std::string stop_reason(const TrainResult& result) {
    if (result.nonfinite_step > 0) {
      // early_stop.diverged: the trainer stopped at a non-finite loss, gradient norm or state
      // (weights, AdamW moments) before saving it.
      early_hit_ = EarlyStopHit{
          "diverged", result.nonfinite_step, result.nonfinite_metric, result.nonfinite_value, NAN,
          0};
      return early_hit_->describe();
    }
    const StepDecision& d = result.decision;
    if (d.early_stop && early_hit_) return early_hit_->describe();
    if (d.signal != 0) return describe_signal(d.signal);
    if (!asked_.empty()) return asked_;
    if (at_rung(result.steps_done))
      return fmt::format("selection rung at step {}", launch_.pause_step);
    return "stop requested";
  }

  const RunContext& ctx_;
  const SegmentLaunch& launch_;
  comm::Communicator& comm_;
  const JobSpec& spec_;
  const bool leader_;
  const std::filesystem::path job_dir_;
  EarlyStopRule early_stop_;
  bool early_stop_replayed_ = false;
  std::optional<EarlyStopHit> early_hit_;
  std::string asked_;  // the coordinator's reason for a stop (the leader's)
  Clock::time_point last_progress_ = Clock::now() - std::chrono::hours(1);
  Clock::time_point last_step_end_ = Clock::now();
  Clock::time_point last_stop_poll_ = Clock::now() - std::chrono::hours(1);
};

}  // namespace

SegmentOutcome run_segment(const RunContext& ctx, const SegmentLaunch& launch,
                           comm::Communicator& comm) {
  return Segment(ctx, launch, comm).run();
}

}  // namespace saturn::exec
