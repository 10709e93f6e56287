#include "runtime/exec/job_runner.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/signals.hpp"
#include "runtime/parallel/strategy.hpp"
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

}  // namespace

SegmentOutcome run_segment(const RunContext& ctx, const SegmentLaunch& launch,
                           comm::Communicator& comm) {
  const bool leader = comm.rank() == 0;
  const JobSpec& spec = find_job(*ctx.workload, launch.job_id);
  // A job `saturn submit` added with data of its own trains on that.
  const bool own_data = !spec.train_data.empty();
  TrainJob job{spec.id,
               spec.model,
               spec.train,
               own_data ? spec.train_data : ctx.workload->train_data,
               own_data ? spec.val_data : ctx.workload->val_data,
               spec.init_from};
  TrainOptions opt;
  opt.job_dir = ctx.run_dir / "jobs" / job.id;
  opt.device_capacity = ctx.device_capacity;
  opt.host_capacity = ctx.host_capacity;
  opt.device = ctx.device;
  opt.device_index = ctx.device_index;
  opt.quiet = true;   // the coordinator prints the batch's progress
  opt.resume = true;  // continue from the job's newest checkpoint when it has one
  opt.export_hf = ctx.workload->export_format == "hf";
  ParallelOptions par;
  par.strategy = launch.strategy;
  par.degree = static_cast<int>(launch.ranks.size());
  par.nonfinite_stops = spec.train.early_stop.diverged;
  SegmentOutcome out;
  std::string stop_reason;
  // early_stop: the leader runs the rule (the losses are the same on every rank) and the stop
  // is agreed with the others below. Earlier segments' steps come from metrics.jsonl, read at
  // the first step (the trainer has cut it back to the checkpoint by then).
  EarlyStopRule early_stop(spec.train.early_stop);
  bool early_stop_replayed = false;
  std::optional<EarlyStopHit> early_hit;
  auto last_progress = Clock::now() - std::chrono::hours(1);
  auto last_step_end = Clock::now();
  par.after_step = [&](const StepRecord& r) {
    // The step's wall time as the coordinator sees it (evaluation and checkpoints included).
    const auto now = Clock::now();
    const double step_time = std::chrono::duration<double>(now - last_step_end).count();
    last_step_end = now;
    // [0]: 1 stop requested (coordinator or signal), 2 failure injected; [1]: a stop signal
    // some rank received (the job's ranks learn its number, so the report names it).
    // [2]: 1 the job's early_stop rule fired (on the leader).
    std::int32_t flags[3] = {0, 0, 0};
    if (leader && early_stop.enabled()) {
      if (!early_stop_replayed) {
        const std::filesystem::path metrics = opt.job_dir / "metrics.jsonl";
        std::error_code ec;
        early_stop.replay(std::filesystem::exists(metrics, ec) ? read_input_file(metrics) : "",
                          r.step);
        early_stop_replayed = true;
      }
      early_hit = early_stop.observe(r.step, r.loss,
                                     r.has_val ? std::optional<double>(r.val_loss) : std::nullopt);
      if (early_hit) flags[2] = 1;
    }
    if (leader) {
      // A stop sent as an earlier segment of this leader ended (a re-plan or cancel racing
      // its finish or rung) is stale: dropped, or it would stop this segment after one step.
      while (auto stop = try_receive<StopRequest>(ctx.control, 0)) {
        if (stop->job != launch.job_id || stop->segment != launch.segment) continue;
        flags[0] |= 1;
        stop_reason = stop->reason;
        break;
      }
      if (r.has_val || r.step == job.train.steps ||
          std::chrono::duration<double>(now - last_progress).count() >= ctx.progress_interval_s) {
        send(ctx.control, 0,
             Progress{job.id, r.step, r.loss, r.tokens_per_s, step_time,
                      r.has_val ? std::optional<double>(r.val_loss) : std::nullopt});
        last_progress = now;
      }
    }
    if (const int sig = stop_signal_received(); sig != 0) {
      flags[0] |= 1;
      flags[1] = sig;
    }
    // A selection rung: every rank sees the same step, so no agreement is needed for it.
    const bool at_rung = launch.pause_step > 0 && r.step >= launch.pause_step;
    if (at_rung) flags[0] |= 1;
    if (comm.rank() == comm.size() - 1 && injected_failure(job.id, r.step)) flags[0] |= 2;
    comm.allreduce(flags, 3, comm::ReduceOp::kMax);
    if (flags[0] & 2)
      throw comm::AgreedFailure(
          fmt::format("injected failure at step {} (SATURN_FAIL_JOB)", r.step), kExitFailure,
          comm.size() - 1);
    if (flags[1] != 0) {  // a signal outranks a re-plan's stop: the whole batch stops
      out.signal = flags[1];
      stop_reason = describe_signal(flags[1]);
    }
    // The job's own early stop outranks a rung (it goes no further) and names the stop; a
    // signal stays in out.signal, so the batch still stops.
    if (flags[2] != 0) {
      flags[0] |= 1;
      if (early_hit) stop_reason = early_hit->describe();
    }
    if (at_rung && stop_reason.empty())
      stop_reason = fmt::format("selection rung at step {}", launch.pause_step);
    if ((flags[0] & 1) && stop_reason.empty()) stop_reason = "stop requested";
    return (flags[0] & 1) != 0;
  };
  try {
    par.knobs = parallel::parse_knobs(launch.knobs);
    const TrainResult result = train_with_strategy(job, opt, par, comm);
    out.step = result.steps_done;
    out.peak_device_bytes = static_cast<double>(result.peak_device_bytes);
    if (!result.steps.empty() && result.steps.back().has_val)
      out.val_loss = result.steps.back().val_loss;
    if (result.nonfinite_step > 0) {
      // early_stop.diverged: the trainer stopped at a non-finite loss, gradient norm or state
      // (weights, AdamW moments) before saving it.
      early_hit = EarlyStopHit{
          "diverged", result.nonfinite_step, result.nonfinite_metric, result.nonfinite_value, NAN,
          0};
      stop_reason = early_hit->describe();
    }
    if (result.stopped) {
      out.status = SegmentStatus::kStopped;
      out.reason = stop_reason;
      if (leader && early_hit) out.early_stop = early_hit->to_json();
    } else {
      out.status = SegmentStatus::kFinished;
    }
  } catch (const comm::AgreedFailure& e) {
    out.status = SegmentStatus::kFailed;
    out.reason = e.what();
  } catch (const std::exception& e) {
    // A failure on this rank alone after set-up: the others may wait in a collective, so the
    // MPI job cannot continue. Its checkpoints let `saturn run --resume` go on.
    log::error("job {}: {} (rank-local failure inside a collective step: stopping the run)", job.id,
               e.what());
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
  }
  if (out.status == SegmentStatus::kFailed && leader)
    log::warn("job {} failed: {}", job.id, out.reason);
  return out;
}

}  // namespace saturn::exec
