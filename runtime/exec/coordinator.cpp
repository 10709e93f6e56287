#include "runtime/exec/coordinator.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>
#include <thread>
#include <utility>
#include <variant>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/batch_selection.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/job_runner.hpp"
#include "runtime/exec/job_table.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/replanner.hpp"
#include "runtime/exec/run_files.hpp"
#include "runtime/exec/signals.hpp"
#include "runtime/exec/spool.hpp"
#include "runtime/exec/submission.hpp"
#include "runtime/rundir/run_dir.hpp"
#include "runtime/workload/run_workload.hpp"
#include "solver/gantt.hpp"
#include "solver/plan_io.hpp"
#include "solver/validate.hpp"

namespace saturn::exec {
namespace {

using Clock = std::chrono::steady_clock;

std::string hms(double s) {
  return solver::format_duration(std::max(0.0, s));
}

}  // namespace

std::optional<solver::Baseline> parse_policy(const std::string& name) {
  for (auto b : {solver::Baseline::current_practice, solver::Baseline::optimus_greedy,
                 solver::Baseline::min})
    if (name == solver::to_string(b)) return b;
  if (name == "saturn") return std::nullopt;
  throw InputError(fmt::format(
      "unknown policy '{}': valid are saturn, current-practice, optimus-greedy, min", name));
}

// What the coordinator reacts to. Each turn of the loop gathers them (the ranks' messages, the
// spool's requests, a stop signal of rank 0, the re-plan interval) and handles them in that
// order; after them the re-planner and dispatch run. Jobs are named by id and looked up when
// an event is handled: a submission handled earlier in the turn grows the job table.
struct RankFree {
  int rank = -1;
};
struct SignalArrived {
  int signal = 0;
};
struct ReplanDue {};
struct CancelAsked {  // `saturn cancel`, a request in RUN_DIR/spool
  std::string job;
  std::string request;
};
struct SubmitAsked {  // `saturn submit`, a request in RUN_DIR/spool
  SpoolRequest request;
};
using CoordinatorEvent = std::variant<RankFree, SignalArrived, Progress, SegmentReport, CancelAsked,
                                      SubmitAsked, ReplanDue>;

template <class... F>
struct Handlers : F... {
  using F::operator()...;
};
template <class... F>
Handlers(F...) -> Handlers<F...>;

struct Coordinator::Impl {
  using Event = CoordinatorEvent;

  // The coordinator's own copy of the batch's workload (rank 0's worker thread has another):
  // `saturn submit` adds jobs to it.
  Workload batch;
  CoordinatorSetup setup;
  JobTable table;
  std::vector<JobState>& jobs;
  RunFiles files;
  Replanner replanner;
  BatchSelection selection;
  MPI_Comm control = MPI_COMM_NULL;
  int world_size = 0;
  std::set<int> idle;  // ranks waiting for a command
  Clock::time_point t0 = Clock::now();
  double last_replan_s = 0, last_print_s = -1e9, last_state_s = 0, last_spool_s = -1e9;
  // Bumped whenever a job starts, ends, stops or a plan is adopted: a re-plan made from an
  // older snapshot is stale.
  std::uint64_t version = 0;
  int plan_index = 0;
  int launches = 0;
  bool stopping = false;
  solver::Problem problem;  // the problem the current plan was made for
  solver::Plan plan;
  BatchFacts facts;  // the first plan's predictions, for summary.json
  // Each plan file this run wrote: its number, when, why, its predicted end of the batch.
  std::vector<nlohmann::json> plan_predictions;

  std::vector<Submission> accepted;  // the submissions in the batch (RUN_DIR/submitted)
  PendingSends pending_sends;        // to ranks that may be training (add_jobs)

  static CoordinatorSetup with_workload(CoordinatorSetup s, const Workload& w) {
    s.workload = &w;
    return s;
  }

  explicit Impl(CoordinatorSetup s)
      : batch(*s.workload),
        setup(with_workload(std::move(s), batch)),
        table(*setup.workload, setup.planning, setup.steps_done, setup.finished),
        jobs(table.jobs),
        files(setup),
        replanner(setup, table),
        selection(*setup.workload) {
    plan_index = setup.next_plan_index;
    // Submissions parse against the batch's text (workload.source_text, which --resume checked
    // equals the run directory's copy); their messages name the copy, the file `saturn submit`
    // users see.
    batch.source = RunDir(setup.run_dir).workload_copy();
    accepted = accepted_submissions(setup.run_dir);
    if (setup.elapsed_before_s > 0) files.read_history(table);
    // Stopped by their early_stop in an earlier run: they stay stopped.
    if (setup.early_stopped.is_object())
      for (const auto& [id, hit] : setup.early_stopped.items())
        if (JobState* js = table.find(id); js != nullptr && js->status == JobStatus::kPending) {
          js->status = JobStatus::kStopped;
          js->early_stop = hit;
          js->reason = EarlyStopHit::from_json(hit).describe() + " (before --resume)";
        }
    selection.restore(setup.selection_state, RunDir(setup.run_dir).run_state_file().string());
    for (const auto& id : setup.cancelled)
      if (JobState* js = table.find(id); js != nullptr && js->status == JobStatus::kPending) {
        js->status = JobStatus::kCancelled;
        js->reason = "cancelled (saturn cancel, before --resume)";
        selection.withdraw(*js);
      }
    selection.apply_restored(jobs);
    table.fail_unplanned();
  }

  // ---- selection ----

  // At once, not at the next timer: a hard kill before it would make --resume count this
  // job's metric as missing and decide the rung differently.
  void reached_rung(JobState& js, const SegmentOutcome& o) {
    event(selection.reached_rung(js, o));
    write_run_state();
  }

  // What the rule decides now; either way the batch re-plans at once, and --resume keeps
  // every decision.
  void apply_selection() {
    BatchSelection::Decided d = selection.decide(jobs, setup.quiet);
    if (d.events.empty()) return;
    ++version;
    for (auto& e : d.events) event(std::move(e));
    request_replan(fmt::format("selection at rung {}", d.rung));
    write_run_state();
  }

  double now() const {
    return setup.elapsed_before_s + std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void event(nlohmann::json e) { files.event(std::move(e), now()); }

  void write_run_state() {
    nlohmann::json extra = nlohmann::json::object();
    if (selection.enabled()) extra["selection"] = selection.run_state();
    nlohmann::json cancelled = nlohmann::json::array();
    // A cancel still waiting for its job's stop counts: its spool request is already taken. A
    // job its early_stop stopped first is recorded as that, once.
    for (const auto& js : jobs)
      if (js.status == JobStatus::kCancelled ||
          (js.cancel_requested && js.status != JobStatus::kFinished && js.early_stop.is_null()))
        cancelled.push_back(js.spec->id);
    if (!cancelled.empty()) extra["cancelled"] = cancelled;
    nlohmann::json early = nlohmann::json::object();
    for (const auto& js : jobs)
      if (!js.early_stop.is_null()) early[js.spec->id] = js.early_stop;
    if (!early.empty()) extra["early_stopped"] = early;
    files.write_run_state(now(), plan_index, extra);
  }

  void write_summary() {
    facts.makespan_s = now();
    facts.plans = plan_index;
    facts.exit_code = table.exit_code();
    facts.extra["plan_predictions"] = plan_prediction_errors(facts.makespan_s);
    facts.extra["prediction_by_kind"] = prediction_by_kind();
    facts.extra["replans_solved"] = replanner.replans_solved();
    facts.extra["replan_solve_s"] = replanner.replan_solve_s();
    if (selection.enabled()) facts.extra["selection"] = selection.settings_json();
    files.write_summary(table, facts, now(), [&](const JobState& js) {
      nlohmann::json j = nlohmann::json::object();
      if (!js.early_stop.is_null()) {
        j["stopped_by"] = "early_stop";
        j["early_stop"] = js.early_stop;
      }
      selection.add_job_summary(js, j);
      return j;
    });
    write_run_state();
  }

  // Each plan file's prediction of the batch's end against the end measured so far.
  nlohmann::json plan_prediction_errors(double makespan) const {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& p : plan_predictions) {
      nlohmann::json e = p;
      const double predicted = p["predicted_makespan_s"].get<double>();
      e["error"] = predicted > 0 ? (makespan - predicted) / predicted : 0.0;
      out.push_back(e);
    }
    return out;
  }

  // Every job's first prediction against what its segments measured, summed per kind.
  nlohmann::json prediction_by_kind() const {
    profile::RunParts predicted, actual;
    for (const auto& js : table.jobs) {
      predicted += js.predicted_parts;
      for (const auto& s : js.segments) actual += s.parts(now());
    }
    nlohmann::json out = nlohmann::json::object();
    const auto kind = [&](const char* name, double p, double a) {
      out[name] = {{"predicted_s", p}, {"actual_s", a}, {"error", p > 0 ? (a - p) / p : 0.0}};
    };
    kind("start", predicted.start_s, actual.start_s);
    kind("steps", predicted.steps_s, actual.steps_s);
    kind("evals", predicted.evals_s, actual.evals_s);
    kind("checkpoints", predicted.checkpoints_s, actual.checkpoints_s);
    return out;
  }

  // Adopts `a.plan` (made for `a.problem` with `a.map`) as the current plan.
  void adopt(const PlanAdoption& a) {
    ++version;
    bool places_submitted = false;  // a job `saturn submit` added, for the first time
    for (std::size_t k = 0; k < a.map.size(); ++k) {
      JobState& js = jobs[static_cast<std::size_t>(a.map[k].first)];
      const auto& sched = a.plan.jobs[k];
      const int config = a.map[k].second[static_cast<std::size_t>(sched.config)];
      const bool running = js.status == JobStatus::kRunning;
      const bool moved = running && (config != js.config || sched.devices != js.devices);
      if (running && !moved) {
        js.planned_start_s = a.t + sched.start_s;
        js.planned_end_s = a.t + sched.end_s;
        continue;
      }
      JobTable::place(js, config, sched.devices, a.t + sched.start_s, a.t + sched.end_s);
      // A job's prediction: the first plan that places it (the initial plan, or for a job
      // `saturn submit` added, the plan after it).
      if (js.predicted_s == 0) {
        js.predicted_s = sched.end_s - sched.start_s;
        js.predicted_parts = table.remaining_parts(js, config, true);
        if (static_cast<std::size_t>(js.index) >= batch.own_jobs) places_submitted = true;
      }
      if (moved) {
        js.move_after_stop = true;
        request_stop(js, "re-plan");
      }
    }
    // The batch's predicted makespan is the first plan's that knew all of its work: the
    // initial plan's, or, once `saturn submit` added jobs, that of the plan that first placed
    // them (the initial plan knew nothing of them, while the measured makespan includes them).
    if (places_submitted) facts.predicted_makespan_s = a.t + a.plan.makespan_s;
    problem = a.problem;
    plan = a.plan;
    if (a.write_file) {
      nlohmann::json pj = solver::plan_to_json(a.problem, a.plan);
      pj["created_s"] = a.t;
      pj["policy"] = setup.policy;
      pj["reason"] = a.why;
      for (std::size_t k = 0; k < pj["jobs"].size(); ++k) {
        const JobState& js = jobs[static_cast<std::size_t>(a.map[k].first)];
        auto& jj = pj["jobs"][k];
        jj["ranks"] = setup.ranks.ranks_of(js.devices);
        jj["start_s"] = js.planned_start_s;
        jj["end_s"] = js.planned_end_s;
        jj["knobs"] = table.detail(js, js.config).knobs;
      }
      pj["makespan_s"] = a.t + a.plan.makespan_s;
      files.write_plan(plan_index, pj);
      plan_predictions.push_back({{"plan", plan_index},
                                  {"created_s", a.t},
                                  {"reason", a.why},
                                  {"predicted_makespan_s", a.t + a.plan.makespan_s}});
      event({{"event", plan_index == setup.next_plan_index ? "plan" : "replan"},
             {"plan", plan_index},
             {"reason", a.why},
             {"makespan_s", a.t + a.plan.makespan_s},
             {"lower_bound_s", a.t + a.plan.lower_bound_s}});
      ++plan_index;
      write_run_state();  // a resume after a hard kill must not reuse this plan's number
    }
  }

  void initial_plan() {
    PlanJobMap map;
    solver::Problem pr = replanner.build_problem(false, false, &map);
    if (pr.jobs.empty()) return;
    const auto baseline = parse_policy(setup.policy);
    const auto solve_start = Clock::now();
    solver::Plan np = baseline ? solver::baseline_plan(pr, *baseline, 1, setup.current_practice)
                               : solver::plan_jobs(pr.cluster, pr.jobs, setup.solve);
    facts.solve_time_s = std::chrono::duration<double>(Clock::now() - solve_start).count();
    if (baseline == solver::Baseline::current_practice && !setup.current_practice.empty())
      for (std::size_t k = 0; k < np.jobs.size(); ++k) {
        // No silent substitute: say which jobs current practice could not run as named.
        const solver::Config& c =
            pr.jobs[k].configs.at(static_cast<std::size_t>(np.jobs[k].config));
        if (c.strategy.substr(0, c.strategy.find('[')) != setup.current_practice)
          log::warn(
              "current practice: job {} has no {} configuration on a whole node (not "
              "feasible, or not in the workload's strategies); it runs {} on {} devices",
              pr.jobs[k].id, setup.current_practice, c.strategy, c.devices);
      }
    const double t = now();  // the plan's time zero: the moment its solve ended
    solver::check_plan(pr, np);
    // What each baseline's plan predicts for the same problem (simulated, not run): lets one
    // run show the planned advantage next to what bench/makespan measures.
    for (auto b : {solver::Baseline::current_practice, solver::Baseline::optimus_greedy,
                   solver::Baseline::min})
      facts.predicted_baselines[solver::to_string(b)] =
          setup.elapsed_before_s + std::chrono::duration<double>(solve_start - t0).count() +
          solver::baseline_plan(pr, b, 1, setup.current_practice).makespan_s;
    adopt({pr, np, map, baseline ? std::string("initial (") + setup.policy + ")" : "initial", true,
           t});
    facts.predicted_makespan_s = t + np.makespan_s;
    facts.lower_bound_s = t + np.lower_bound_s;
    if (!setup.quiet) {
      log::info("plan ({}: {} {}, {:.1f} s): makespan {} , lower bound {}, gap {:.1f}%",
                setup.policy, np.solver.method, solver::to_string(np.solver.status),
                np.solver.solve_time_s, hms(np.makespan_s), hms(np.lower_bound_s),
                100 * np.solver.gap);
      std::fputs(solver::plan_table(pr, np).c_str(), stderr);
      std::fputs(solver::gantt_chart(pr, np, 64).c_str(), stderr);
    }
  }

  void request_replan(const std::string& why) {
    last_replan_s = now();
    if (stopping || !setup.replan) return;
    replanner.request(why);
  }

  void request_stop(JobState& js, const std::string& why) {
    if (js.status != JobStatus::kRunning || js.stop_sent) return;
    // Addressed to this segment: if it has just ended, the leader's next segment drops it.
    const int segment = static_cast<int>(js.past_segments.size() + js.segments.size()) - 1;
    send(control, js.segments.back().ranks.front(), StopRequest{js.spec->id, segment, why});
    js.stop_sent = true;
    js.status = JobStatus::kStopping;
  }

  bool ranks_idle(const std::vector<int>& ranks, const std::set<int>& reserved) const {
    for (int r : ranks)
      if (!idle.count(r) || reserved.count(r)) return false;
    return true;
  }

  void dispatch() {
    if (stopping) return;
    std::vector<int> order;
    for (std::size_t j = 0; j < jobs.size(); ++j)
      if (JobTable::dispatchable(jobs[j])) order.push_back(static_cast<int>(j));
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      return jobs[static_cast<std::size_t>(a)].planned_start_s <
             jobs[static_cast<std::size_t>(b)].planned_start_s;
    });
    std::set<int> reserved;
    for (int j : order) {
      JobState& js = jobs[static_cast<std::size_t>(j)];
      std::vector<int> ranks = setup.ranks.ranks_of(js.devices);
      std::sort(ranks.begin(), ranks.end());
      if (ranks_idle(ranks, reserved)) {
        launch(js, ranks);
      } else {
        reserved.insert(ranks.begin(), ranks.end());  // keep plan order: later jobs wait
      }
    }
  }

  void launch(JobState& js, const std::vector<int>& ranks) {
    ++version;
    const auto& detail = table.detail(js, js.config);
    SegmentLaunch l;
    l.job_id = js.spec->id;
    l.strategy = detail.strategy;
    l.knobs = detail.knobs;
    l.ranks = ranks;
    l.segment = static_cast<int>(js.past_segments.size() + js.segments.size());
    l.tag = 1 + (launches++ % 30000);
    l.pause_step = js.pause_step;
    for (int r : ranks) {
      idle.erase(r);
      send(control, r, Command{LaunchSegment{l}});
    }
    Segment seg;
    seg.config = js.config;
    seg.ranks = ranks;
    seg.start_s = now();
    seg.start_step = js.steps_done;
    seg.costs_at_launch = table.costs(js, js.config);
    js.segments.push_back(seg);
    js.status = JobStatus::kRunning;
    js.stop_sent = false;
    js.move_after_stop = false;
    js.step_time_s = 0;
    event({{"event", "job_start"},
           {"job", js.spec->id},
           {"strategy", detail.strategy},
           {"knobs", detail.knobs},
           {"devices", static_cast<int>(ranks.size())},
           {"ranks", ranks},
           {"step", js.steps_done},
           {"segment", l.segment}});
  }

  // ---- events ----

  // This turn's events: the ranks' messages (ready or signal, progress, segment reports, in that
  // order), then the spool's requests.
  std::vector<Event> gather_events() {
    std::vector<Event> out;
    int from = -1;
    while (auto m = try_receive<WorkerMessage>(control, MPI_ANY_SOURCE, &from)) {
      if (const auto* s = std::get_if<StopSignal>(&*m))
        out.emplace_back(SignalArrived{s->signal});
      else
        out.emplace_back(RankFree{from});
    }
    while (auto m = try_receive<Progress>(control, MPI_ANY_SOURCE)) out.emplace_back(*m);
    while (auto m = try_receive<SegmentReport>(control, MPI_ANY_SOURCE)) out.emplace_back(*m);
    // Requests in RUN_DIR/spool (saturn cancel, saturn submit), twice a second.
    if (now() - last_spool_s >= 0.5) {
      last_spool_s = now();
      for (const SpoolRequest& r : take_spool_requests(setup.run_dir)) {
        if (!r.error.empty()) {
          log::warn("request {} rejected: {}", r.file.string(), r.error);
        } else if (r.kind == "submit") {
          out.emplace_back(SubmitAsked{r});
        } else {
          for (const auto& id : r.jobs) out.emplace_back(CancelAsked{id, r.file.string()});
        }
      }
    }
    return out;
  }

  void handle(const Event& e) {
    std::visit(Handlers{[&](const RankFree& r) { idle.insert(r.rank); },
                        [&](const SignalArrived& s) { on_signal(s.signal); },
                        [&](const ReplanDue&) { request_replan("interval"); },
                        [&](const Progress& p) {
                          if (JobState* js = table.find(p.job)) table.record_progress(*js, p);
                        },
                        [&](const SegmentReport& r) { on_segment_end(r); },
                        [&](const CancelAsked& c) { on_cancel_asked(c); },
                        [&](const SubmitAsked& s) { on_jobs_submitted(s.request); }},
               e);
  }

  void on_segment_end(const SegmentReport& r) {
    JobState* js = table.find(r.job);
    if (js == nullptr) return;
    switch (r.outcome.status) {
      case SegmentStatus::kFinished:
        return on_job_finished(*js, r.outcome);
      case SegmentStatus::kFailed:
        return on_job_failed(*js, r.outcome);
      case SegmentStatus::kStopped:
        return on_job_stopped(*js, r.outcome);
    }
  }

  void on_cancel_asked(const CancelAsked& c) {
    if (JobState* js = table.find(c.job))
      on_job_cancelled(*js);
    else
      log::warn("request {}: no job '{}' in this batch", c.request, c.job);
  }

  // A segment's end, whatever its outcome: the segment closes and the event it writes to the
  // timeline gets the job's step.
  nlohmann::json close_segment(JobState& js, const SegmentOutcome& o) {
    ++version;
    js.steps_done = o.step;
    if (o.val_loss) js.val_loss = *o.val_loss;
    Segment& seg = js.segments.back();
    seg.end_s = now();
    seg.end_step = js.steps_done;
    seg.end_status = segment_status_name(o.status);
    seg.times = o.times;
    nlohmann::json e = {
        {"job", js.spec->id},
        {"step", js.steps_done},
        {"segment", static_cast<int>(js.past_segments.size() + js.segments.size()) - 1},
        {"parts", RunFiles::parts_json(seg.parts(seg.end_s))}};
    // The segment's device-memory peak on its busiest rank (what a GPU sweep is sized by).
    if (o.peak_device_bytes > 0) e["peak_device_bytes"] = o.peak_device_bytes;
    return e;
  }

  void on_job_finished(JobState& js, const SegmentOutcome& o) {
    nlohmann::json e = close_segment(js, o);
    js.status = JobStatus::kFinished;
    e["event"] = "job_end";
    if (!std::isnan(js.val_loss)) e["val_loss"] = js.val_loss;
    event(e);
    if (ended_as_planned(js)) return;
    request_replan("job " + js.spec->id + " finished");
  }

  // A job that ended about when the plan said (within the re-plan threshold of the batch's time
  // left) leaves the rest of the plan as good as it was: a re-plan could gain little, and its
  // two solves would take rank 0's CPU from the training beside them.
  bool ended_as_planned(const JobState& js) const {
    const double t = now();
    return std::abs(t - js.planned_end_s) <= setup.replan_threshold * table.eta_s(t);
  }

  void on_job_failed(JobState& js, const SegmentOutcome& o) {
    nlohmann::json e = close_segment(js, o);
    js.status = JobStatus::kFailed;
    js.reason = o.reason.empty() ? "unknown" : o.reason;
    selection.withdraw(js);
    e["event"] = "failure";
    e["reason"] = js.reason;
    event(e);
    if (js.cancel_requested) {  // the user asked for it to end: cancelled, failure noted
      const std::string failure = js.reason;
      cancel(js);
      js.reason = "cancelled (saturn cancel); its last segment failed: " + failure;
      return;
    }
    log::error("job {} failed: {}", js.spec->id, js.reason);
    request_replan("job " + js.spec->id + " failed");
  }

  void on_job_stopped(JobState& js, const SegmentOutcome& o) {
    nlohmann::json e = close_segment(js, o);
    e["event"] = "job_stop";
    e["reason"] = o.reason;
    event(e);
    if (!o.early_stop.is_null()) {
      stopped_early(js, o.early_stop);
      if (o.signal != 0 && !stopping) on_signal(o.signal);
      return;
    }
    if (!js.cancel_requested && js.pause_step > 0 && js.steps_done >= js.pause_step)
      reached_rung(js, o);
    const bool by_signal = o.signal != 0 || o.reason.rfind("signal", 0) == 0;
    if (by_signal && !stopping) on_signal(o.signal);
    js.status = stopping ? JobStatus::kStopped : JobStatus::kPending;
    if (js.move_after_stop && !stopping) js.status = JobStatus::kPending;
    if (js.cancel_requested) {
      js.status = JobStatus::kPending;
      cancel(js);
    }
  }

  // The job's early_stop rule stopped it (checkpointed, unless its weights were poisoned by a
  // non-finite loss): done as far as the batch is concerned, its ranks free, the batch re-plans
  // at once, as after a selection stop.
  void stopped_early(JobState& js, const nlohmann::json& hit) {
    ++version;
    js.status = JobStatus::kStopped;
    js.early_stop = hit;
    js.held = false;
    js.pause_step = 0;
    const EarlyStopHit h = EarlyStopHit::from_json(hit);
    js.reason = h.describe();
    selection.withdraw(js);
    nlohmann::json e = {{"event", "early_stop"}, {"job", js.spec->id}};
    for (const auto& [k, v] : hit.items()) e[k] = v;
    event(e);
    if (!setup.quiet) log::info("job {} stopped by {}", js.spec->id, js.reason);
    request_replan("job " + js.spec->id + " stopped by early_stop");
    write_run_state();  // --resume keeps it stopped
  }

  // `saturn cancel`: a job not running is cancelled at once; a running one stops at its next
  // step boundary (with a checkpoint) and is cancelled when it has.
  void on_job_cancelled(JobState& js) {
    if (js.status == JobStatus::kRunning || js.status == JobStatus::kStopping) {
      js.cancel_requested = true;
      request_stop(js, "cancelled");
      log::info("job {}: cancel requested, stopping it at its next step", js.spec->id);
      write_run_state();  // durable before the stop lands: --resume then cancels it
      return;
    }
    // A job stopped by a signal or failed would run again on --resume: cancel it now. One
    // stopped by selection, finished or already cancelled has nothing left to cancel.
    const bool resumable = (js.status == JobStatus::kStopped && !js.stopped_for_good()) ||
                           js.status == JobStatus::kFailed;
    if (js.status != JobStatus::kPending && !resumable) {
      log::warn("job {}: cancel ignored, the job is {}", js.spec->id, status_name(js.status));
      return;
    }
    cancel(js);
  }

  void cancel(JobState& js) {
    ++version;
    js.status = JobStatus::kCancelled;
    js.held = false;
    js.reason = "cancelled (saturn cancel)";
    selection.withdraw(js);
    event({{"event", "cancel"}, {"job", js.spec->id}, {"step", js.steps_done}});
    if (!setup.quiet) log::info("job {} cancelled at step {}", js.spec->id, js.steps_done);
    request_replan("job " + js.spec->id + " cancelled");
    write_run_state();  // --resume keeps it cancelled
  }

  // `saturn submit` (runtime/exec/submission.hpp): the jobs join every rank's workload (before
  // any launch of them), then the table, and the batch re-plans at once; a refused request
  // goes to spool/rejected with its reason, and nothing is added.
  void on_jobs_submitted(SpoolRequest r) {
    // Recorded by a run that stopped before moving it out of the spool: this run already has
    // its jobs (added back from RUN_DIR/submitted on --resume).
    if (submission_recorded(setup.run_dir, r.file.filename().string())) {
      finish_taken_request(r);
      return;
    }
    AcceptedSubmission a;
    try {
      a = accept_submission(setup, batch, accepted, r);
    } catch (const Error& e) {
      reject_taken_request(r, e.what());
      event({{"event", "submit_rejected"},
             {"request", r.file.filename().string()},
             {"source", r.submission.source.string()},
             {"reason", e.what()}});
      log::error("submission {} rejected: {}", r.submission.source.string(), e.what());
      return;
    }
    finish_taken_request(r);  // recorded in RUN_DIR/submitted by accept_submission
    ++version;
    accepted.push_back(r.submission);
    const AddJobs added{std::vector<JobSpec>(
        a.batch.jobs.begin() + static_cast<std::ptrdiff_t>(batch.jobs.size()), a.batch.jobs.end())};
    for (int rank = 0; rank < world_size; ++rank) pending_sends.send(control, rank, Command{added});
    const std::size_t planning_first = setup.planning.jobs.size();
    for (std::size_t k = 0; k < a.planning.jobs.size(); ++k) {
      setup.planning.jobs.push_back(a.planning.jobs[k]);
      setup.planning.details.push_back(a.planning.details[k]);
    }
    batch = std::move(a.batch);
    table.add_jobs(batch, planning_first);
    event({{"event", "submit"},
           {"jobs", a.ids},
           {"request", r.file.filename().string()},
           {"source", r.submission.source.string()}});
    if (!setup.quiet) log::info("submission {}: added {}", r.submission.source.string(), a.sources);
    request_replan(fmt::format("{} job(s) submitted", a.ids.size()));
    write_run_state();
  }

  // A stop signal: checkpoint every running job, then exit 99.
  void on_signal(int sig) {
    if (stopping) return;
    ++version;
    stopping = true;
    event({{"event", "signal"}, {"signal", sig}});
    const std::string what = sig != 0 ? describe_signal(sig) : std::string("a stop signal");
    log::warn("{} received: checkpointing every running job, then exiting with code 99", what);
    for (auto& js : jobs) request_stop(js, what);
  }

  void print_progress(bool force) {
    const double t = now();
    const bool tty = isatty(STDERR_FILENO) != 0;
    const double interval = tty ? 1.0 : setup.progress_interval_s;
    if (setup.quiet || (!force && t - last_print_s < interval)) return;
    last_print_s = t;
    int done = 0, running = 0, failed = 0;
    const double eta = table.eta_s(t);
    for (const auto& js : jobs) {
      if (js.status == JobStatus::kFinished) ++done;
      if (js.status == JobStatus::kRunning || js.status == JobStatus::kStopping) ++running;
      if (js.status == JobStatus::kFailed) ++failed;
    }
    std::string out = fmt::format(
        "batch: {}/{} jobs done, {} running{} | elapsed {} | ETA {}\n", done, jobs.size(), running,
        failed ? fmt::format(", {} failed", failed) : "", hms(t), hms(eta));
    out += fmt::format("  {:<28} {:<16} {:>13} {:>7} {:>7} {:>8} {:>8}\n", "job", "strategy",
                       "step", "loss", "val", "tok/s", "ETA");
    for (const auto& js : jobs) {
      if (js.status != JobStatus::kRunning && js.status != JobStatus::kStopping) continue;
      const auto& seg = js.segments.back();
      const auto& detail = table.detail(js, seg.config);
      const double job_eta = js.step_time_s * static_cast<double>(table.remaining_steps(js));
      out += fmt::format("  {:<28} {:<16} {:>13} {:>7.4f} {:>7} {:>8.0f} {:>8}\n",
                         js.spec->id.substr(0, 28),
                         fmt::format("{} x{}", detail.strategy, seg.ranks.size()),
                         fmt::format("{}/{}", js.steps_done, js.spec->train.steps), js.loss,
                         std::isnan(js.val_loss) ? "-" : fmt::format("{:.4f}", js.val_loss),
                         js.tokens_per_s, js.step_time_s > 0 ? hms(job_eta) : "?");
    }
    std::fputs(out.c_str(), stderr);
    std::fflush(stderr);
  }

  int run() {
    write_run_state();
    apply_selection();  // a resumed run's rungs may be complete already
    initial_plan();
    for (;;) {
      std::vector<Event> events = gather_events();
      const bool busy = !events.empty();
      if (int sig = stop_signal_received(); sig != 0 && !stopping)
        events.emplace_back(SignalArrived{sig});
      if (!stopping && now() - last_replan_s >= setup.replan_interval_s)
        events.emplace_back(ReplanDue{});
      for (const Event& e : events) handle(e);
      apply_selection();
      pending_sends.progress();
      if (auto a = replanner.poll(version, stopping)) adopt(*a);
      dispatch();
      if (!stopping) replanner.start(now(), version);
      if (table.all_done(stopping) && static_cast<int>(idle.size()) == world_size) {
        write_summary();
        const int code = table.exit_code();
        for (int r = 0; r < world_size; ++r) send(control, r, Command{Exit{code}});
        print_progress(true);
        event({{"event", "run_end"}, {"exit_code", code}});
        return code;
      }
      print_progress(false);
      // The batch clock survives a hard kill (SIGKILL, node failure) to within this interval:
      // `--resume` continues it from run_state.json.
      if (now() - last_state_s >= 2.0) {
        write_run_state();
        last_state_s = now();
      }
      if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
};

Coordinator::Coordinator(CoordinatorSetup setup)
    : impl_(std::make_unique<Impl>(std::move(setup))) {}
Coordinator::~Coordinator() = default;

int Coordinator::run(MPI_Comm control) {
  impl_->control = control;
  MPI_Comm_size(control, &impl_->world_size);
  impl_->last_replan_s = impl_->now();
  return impl_->run();
}

}  // namespace saturn::exec
