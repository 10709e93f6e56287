#include "runtime/exec/coordinator.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <future>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/exec/job_runner.hpp"
#include "runtime/exec/messages.hpp"
#include "runtime/exec/signals.hpp"
#include "solver/gantt.hpp"
#include "solver/plan_io.hpp"
#include "solver/validate.hpp"

namespace saturn::exec {
namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

enum class Status { kPending, kRunning, kStopping, kFinished, kFailed, kStopped };

const char* status_name(Status s) {
  switch (s) {
    case Status::kPending:
      return "pending";
    case Status::kRunning:
      return "running";
    case Status::kStopping:
      return "stopping";
    case Status::kFinished:
      return "finished";
    case Status::kFailed:
      return "failed";
    case Status::kStopped:
      return "stopped";
  }
  return "?";
}

std::string hms(double s) {
  return solver::format_duration(std::max(0.0, s));
}

// Readers (saturn status, report) poll these files while the run goes on. A file that cannot be
// written is reported and the batch goes on: its checkpoints, not these files, hold the work.
void write_atomic(const fs::path& path, const std::string& text) {
  try {
    write_file_atomic(path, text);
  } catch (const IoError& e) {
    log::warn("{}", e.what());
  }
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

struct Coordinator::Impl {
  struct Segment {
    int config = -1;
    std::vector<int> ranks;
    double start_s = 0, end_s = -1;
    std::int64_t start_step = 0, end_step = 0;
    std::string end_status;
  };
  struct JobState {
    const JobSpec* spec = nullptr;
    int planning_index = -1;  // into setup.planning.jobs (-1: finished before this run)
    Status status = Status::kPending;
    std::int64_t steps_done = 0;
    // Current assignment from the adopted plan.
    int config = -1;
    std::vector<int> devices;
    double planned_start_s = 0, planned_end_s = 0;
    double predicted_s = 0;  // first plan's duration for this job in this run
    std::vector<Segment> segments;
    // Segments of earlier, interrupted runs of this directory (from timeline.jsonl), as they go
    // into summary.json; segment numbers continue after them.
    nlohmann::json past_segments = nlohmann::json::array();
    std::string reason;
    // Progress.
    double loss = NAN, val_loss = NAN, tokens_per_s = 0;
    double step_time_s = 0;  // measured, smoothed
    // measured / estimated step time of the running configuration: scales re-plan estimates.
    double correction = 1.0;
    bool stop_sent = false;
    bool move_after_stop = false;
  };

  struct ReplanSnapshot {
    std::string why;
    double t = 0;  // when the problems were built: the plans' time zero
    std::uint64_t version = 0;
    solver::Problem keep, move;
    std::vector<std::pair<int, std::vector<int>>> keep_map, move_map;
  };
  struct ReplanResult {
    solver::Plan keep, move;
    std::string error;
  };

  CoordinatorSetup setup;
  std::vector<JobState> jobs;
  MPI_Comm control = MPI_COMM_NULL;
  int world_size = 0;
  std::set<int> idle;  // ranks waiting for a command
  Clock::time_point t0 = Clock::now();
  double last_replan_s = 0, last_print_s = -1e9, last_state_s = 0;
  // Bumped whenever a job starts, ends, stops or a plan is adopted: a re-plan made from an
  // older snapshot is stale.
  std::uint64_t version = 0;
  std::string replan_wanted;  // reason of a requested re-plan not yet started ("" = none)
  ReplanSnapshot replanning;  // what the re-plan in flight was made from
  std::future<ReplanResult> solving;
  int plan_index = 0;
  int launches = 0;
  bool stopping = false;
  int stop_signal = 0;
  solver::Problem problem;  // the problem the current plan was made for
  solver::Plan plan;
  double initial_predicted_makespan_s = 0;
  double initial_lower_bound_s = 0;  // the first plan's, in batch time like its makespan
  double initial_solve_time_s = 0;
  // What each baseline's plan predicts for the same problem (simulated, not run): lets one run
  // show the planned advantage next to what bench/makespan measures.
  nlohmann::json baseline_predictions = nlohmann::json::object();
  std::ofstream timeline;

  explicit Impl(CoordinatorSetup s) : setup(std::move(s)) {
    const auto& wj = setup.workload->jobs;
    jobs.resize(wj.size());
    for (std::size_t j = 0; j < wj.size(); ++j) {
      jobs[j].spec = &wj[j];
      jobs[j].steps_done = setup.steps_done.empty() ? 0 : setup.steps_done[j];
      if (!setup.finished.empty() && setup.finished[j]) jobs[j].status = Status::kFinished;
    }
    for (std::size_t p = 0; p < setup.planning.jobs.size(); ++p) {
      for (std::size_t j = 0; j < wj.size(); ++j)
        if (wj[j].id == setup.planning.jobs[p].id) jobs[j].planning_index = static_cast<int>(p);
    }
    // A job left out of planning could never start, and the batch would wait for it forever:
    // it fails instead, with the reason, and the others go on.
    for (auto& js : jobs)
      if (js.status == Status::kPending && js.planning_index < 0) {
        js.status = Status::kFailed;
        js.reason = "left out of the plan (no steps left to run, yet no final.h5)";
      }
    plan_index = setup.next_plan_index;
    if (setup.elapsed_before_s > 0) read_history();
    timeline.open(setup.run_dir / "timeline.jsonl", std::ios::app);
  }

  // On resume: what earlier runs of this directory did, so that summary.json covers the whole
  // batch (every segment, the val loss of jobs that finished before) and not only this run.
  void read_history() {
    std::ifstream in(setup.run_dir / "timeline.jsonl");
    std::string line;
    double last_t = 0;
    // Segments still open when their run ended had no report: the run was killed (SIGKILL, a
    // lost node, an MPI abort) with them, by its last event.
    auto close_killed = [&] {
      for (auto& js : jobs)
        if (!js.past_segments.empty() && js.past_segments.back()["end_s"].is_null()) {
          auto& seg = js.past_segments.back();
          seg["end_s"] = std::max(last_t, seg["start_s"].get<double>());
          seg["status"] = "interrupted";
        }
    };
    while (std::getline(in, line)) {
      nlohmann::json e;
      try {
        e = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception&) {
        continue;  // the half-written last line of a run that was killed
      }
      const std::string kind = e.value("event", "");
      if (kind == "plan") close_killed();  // each run's first event: the previous run is over
      last_t = std::max(last_t, e.value("t", 0.0));
      JobState* js = e.contains("job") ? find(e["job"].get<std::string>()) : nullptr;
      if (js == nullptr) continue;
      if (kind == "job_start") {
        js->past_segments.push_back({{"strategy", e.value("strategy", "")},
                                     {"knobs", e.value("knobs", nlohmann::json::array())},
                                     {"devices", e.value("devices", 0)},
                                     {"ranks", e.value("ranks", nlohmann::json::array())},
                                     {"start_s", e.value("t", 0.0)},
                                     {"end_s", nullptr},
                                     {"start_step", e.value("step", 0)},
                                     {"end_step", nullptr},
                                     {"status", ""}});
        continue;
      }
      if (js->past_segments.empty()) continue;
      auto& seg = js->past_segments.back();
      if (kind == "job_end" || kind == "failure" || kind == "job_stop") {
        seg["end_s"] = e.value("t", 0.0);
        seg["end_step"] = e.value("step", 0);
        seg["status"] = kind == "job_end" ? "finished" : kind == "failure" ? "failed" : "stopped";
        if (kind == "job_end" && e.contains("val_loss")) js->val_loss = e["val_loss"].get<double>();
      }
    }
    close_killed();
    // What a killed segment kept is its job's checkpoint at the time: the step the job's next
    // segment started from, or for its last one the newest checkpoint this run resumes from.
    // A failed or stopped segment reports the step its job had reported when the outcome
    // came; a job whose rank was killed can fail (its peer gone) before its last progress
    // reached the coordinator, so that step may be stale. Its next segment started from a
    // checkpoint this segment wrote, so the job got at least that far.
    for (auto& js : jobs)
      for (std::size_t k = 0; k < js.past_segments.size(); ++k) {
        auto& seg = js.past_segments[k];
        const bool has_next = k + 1 < js.past_segments.size();
        if (seg["status"] == "interrupted") {
          seg["end_step"] =
              has_next ? js.past_segments[k + 1].value("start_step", js.steps_done) : js.steps_done;
        } else if (has_next && seg["status"] != "finished" && seg["end_step"].is_number()) {
          const std::int64_t next = js.past_segments[k + 1].value("start_step", std::int64_t{0});
          if (seg["end_step"].get<std::int64_t>() < next) seg["end_step"] = next;
        }
      }
  }

  double now() const {
    return setup.elapsed_before_s + std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void event(nlohmann::json e) {
    e["t"] = now();
    timeline << e.dump() << '\n';
    timeline.flush();
  }

  std::int64_t remaining_steps(const JobState& js) const {
    return std::max<std::int64_t>(0, js.spec->train.steps - js.steps_done);
  }

  // Step time of config c of job j: the estimate (or trial) scaled by what the job measured.
  double step_time(const JobState& js, int c) const {
    const auto& sj = setup.planning.jobs[static_cast<std::size_t>(js.planning_index)];
    const auto& cfg = sj.configs[static_cast<std::size_t>(c)];
    const double base = sj.steps > 0 ? cfg.time_s / static_cast<double>(sj.steps) : cfg.time_s;
    return base * js.correction;
  }

  // The remaining work as a solver problem. Running jobs: `allow_moves` adds, besides keeping
  // their devices (pinned, remaining time), every other configuration at a restart cost.
  // `keep_choices`: pending jobs may only use their current configuration (re-timing the
  // current plan rather than re-planning). map[k] = (job index, config index in planning).
  solver::Problem build_problem(bool allow_moves, bool keep_choices,
                                std::vector<std::pair<int, std::vector<int>>>* map) const {
    solver::Problem p;
    p.cluster = setup.ranks.cluster;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const JobState& js = jobs[j];
      if (js.status != Status::kPending && js.status != Status::kRunning &&
          js.status != Status::kStopping)
        continue;
      if (js.planning_index < 0) continue;
      const auto& sj = setup.planning.jobs[static_cast<std::size_t>(js.planning_index)];
      solver::Job job;
      job.id = sj.id;
      job.steps = remaining_steps(js);
      std::vector<int> cmap;
      // A job still stopping for a move already holds its next configuration and devices; it is
      // planned like a pending job (pinning it to devices it does not hold yet could put two
      // kept jobs on one device). Dispatch waits for its old devices to free up.
      const bool running = js.status == Status::kRunning;
      if (running) {
        solver::Config keep = sj.configs[static_cast<std::size_t>(js.config)];
        const double measured = js.step_time_s > 0 ? js.step_time_s : step_time(js, js.config);
        keep.time_s = std::max(1e-3, measured * static_cast<double>(job.steps));
        keep.pinned_devices = js.devices;
        job.configs.push_back(keep);
        cmap.push_back(js.config);
      }
      if (!running || allow_moves) {
        for (std::size_t c = 0; c < sj.configs.size(); ++c) {
          if (keep_choices && !running && static_cast<int>(c) != js.config && js.config >= 0)
            continue;
          solver::Config cfg = sj.configs[c];
          cfg.pinned_devices.clear();
          cfg.time_s =
              std::max(1e-3, step_time(js, static_cast<int>(c)) * static_cast<double>(job.steps) +
                                 (running ? setup.restart_cost_s : 0.0));
          job.configs.push_back(cfg);
          cmap.push_back(static_cast<int>(c));
        }
      }
      p.jobs.push_back(job);
      map->emplace_back(static_cast<int>(j), cmap);
    }
    return p;
  }

  // Adopts `np` (made for problem `pr` with `map`) as the current plan.
  void adopt(const solver::Problem& pr, const solver::Plan& np,
             const std::vector<std::pair<int, std::vector<int>>>& map, const std::string& why,
             bool write_file, double t) {
    ++version;
    for (std::size_t k = 0; k < map.size(); ++k) {
      JobState& js = jobs[static_cast<std::size_t>(map[k].first)];
      const auto& sched = np.jobs[k];
      const int config = map[k].second[static_cast<std::size_t>(sched.config)];
      const bool running = js.status == Status::kRunning;
      const bool moved = running && (config != js.config || sched.devices != js.devices);
      js.planned_start_s = t + sched.start_s;
      js.planned_end_s = t + sched.end_s;
      if (running && !moved) continue;
      js.config = config;
      js.devices = sched.devices;
      if (moved) {
        js.move_after_stop = true;
        request_stop(js, "re-plan");
      }
    }
    problem = pr;
    plan = np;
    if (write_file) {
      nlohmann::json pj = solver::plan_to_json(pr, np);
      pj["created_s"] = t;
      pj["policy"] = setup.policy;
      pj["reason"] = why;
      for (std::size_t k = 0; k < pj["jobs"].size(); ++k) {
        const JobState& js = jobs[static_cast<std::size_t>(map[k].first)];
        auto& jj = pj["jobs"][k];
        jj["ranks"] = setup.ranks.ranks_of(js.devices);
        jj["start_s"] = js.planned_start_s;
        jj["end_s"] = js.planned_end_s;
        const auto& detail = setup.planning.details[static_cast<std::size_t>(js.planning_index)]
                                                   [static_cast<std::size_t>(js.config)];
        jj["knobs"] = detail.knobs;
      }
      pj["makespan_s"] = t + np.makespan_s;
      const fs::path dir = setup.run_dir / "plans";
      fs::create_directories(dir);
      write_atomic(dir / fmt::format("plan-{:03}.json", plan_index), pj.dump(2));
      event({{"event", plan_index == setup.next_plan_index ? "plan" : "replan"},
             {"plan", plan_index},
             {"reason", why},
             {"makespan_s", t + np.makespan_s},
             {"lower_bound_s", t + np.lower_bound_s}});
      ++plan_index;
      write_run_state(now());  // a resume after a hard kill must not reuse this plan's number
    }
  }

  void initial_plan() {
    std::vector<std::pair<int, std::vector<int>>> map;
    solver::Problem pr = build_problem(false, false, &map);
    if (pr.jobs.empty()) return;
    const auto baseline = parse_policy(setup.policy);
    const auto solve_start = Clock::now();
    solver::Plan np = baseline ? solver::baseline_plan(pr, *baseline, 1, setup.current_practice)
                               : solver::plan_jobs(pr.cluster, pr.jobs, setup.solve);
    initial_solve_time_s = std::chrono::duration<double>(Clock::now() - solve_start).count();
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
    for (auto b : {solver::Baseline::current_practice, solver::Baseline::optimus_greedy,
                   solver::Baseline::min})
      baseline_predictions[solver::to_string(b)] =
          setup.elapsed_before_s + std::chrono::duration<double>(solve_start - t0).count() +
          solver::baseline_plan(pr, b, 1, setup.current_practice).makespan_s;
    adopt(pr, np, map, baseline ? std::string("initial (") + setup.policy + ")" : "initial", true,
          t);
    initial_predicted_makespan_s = t + np.makespan_s;
    initial_lower_bound_s = t + np.lower_bound_s;
    for (const auto& [j, cm] : map) {
      JobState& js = jobs[static_cast<std::size_t>(j)];
      js.predicted_s = js.planned_end_s - js.planned_start_s;
    }
    if (!setup.quiet) {
      log::info("plan ({}: {} {}, {:.1f} s): makespan {} , lower bound {}, gap {:.1f}%",
                setup.policy, np.solver.method, solver::to_string(np.solver.status),
                np.solver.solve_time_s, hms(np.makespan_s), hms(np.lower_bound_s),
                100 * np.solver.gap);
      std::fputs(solver::plan_table(pr, np).c_str(), stderr);
      std::fputs(solver::gantt_chart(pr, np, 64).c_str(), stderr);
    }
  }

  // Re-planning runs in the background: the solver may take seconds, and while it does the
  // coordinator must go on dispatching and hearing reports, or every rank that frees up waits
  // for it (measured: two 5 s solves at each job end left all 4 ranks idle for 10 s).
  // A request is served after the next dispatch, so jobs that the current plan starts on the
  // freed ranks are part of the snapshot; a result whose snapshot is stale (a job started,
  // ended or stopped meanwhile) is dropped and the re-plan made again.
  void request_replan(const std::string& why) {
    last_replan_s = now();
    if (stopping || !setup.replan) return;
    if (replan_wanted.empty()) replan_wanted = why;
  }

  void start_replan() {
    if (replan_wanted.empty() || solving.valid() || stopping) return;
    ReplanSnapshot snap;
    snap.why = std::exchange(replan_wanted, std::string());
    snap.t = now();
    snap.version = version;
    snap.keep = build_problem(false, true, &snap.keep_map);
    if (snap.keep.jobs.empty()) return;
    snap.move = build_problem(true, false, &snap.move_map);
    // The solve shares the cores with training: its time is kept to about 1 % of the work
    // left (the plans it improves on are already within a few per cent of their bound). No
    // larger floor: on CPU ranks a 0.5 s floor per solve, two solves per re-plan, took 2 s of
    // rank 0's core from a 15 s batch (bench/makespan: +17 % against +3 % without re-planning).
    double left_s = 0;
    for (const auto& js : jobs)
      if (js.status == Status::kPending || js.status == Status::kRunning)
        left_s = std::max(left_s, js.planned_end_s - snap.t);
    solver::SolveOptions opts = setup.solve;
    opts.time_limit_s = std::min({opts.time_limit_s, 5.0, std::max(0.05, 0.01 * left_s)});
    replanning = std::move(snap);
    solving =
        std::async(std::launch::async, [keep = replanning.keep, move = replanning.move, opts] {
          ReplanResult r;
          try {
            r.keep = solver::plan_jobs(keep.cluster, keep.jobs, opts);
            r.move = solver::plan_jobs(move.cluster, move.jobs, opts);
          } catch (const std::exception& e) {
            r.error = e.what();
          }
          return r;
        });
  }

  // Adopts a finished re-plan: one that moves running jobs only when it beats re-timing the
  // current choices by the threshold.
  void finish_replan() {
    if (!solving.valid() || solving.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      return;
    const ReplanResult r = solving.get();
    const ReplanSnapshot& snap = replanning;
    if (!r.error.empty()) {
      log::warn("re-plan failed, keeping the current plan: {}", r.error);
      return;
    }
    if (stopping) return;
    if (snap.version != version) {
      if (replan_wanted.empty()) replan_wanted = snap.why;
      return;
    }
    const bool better = r.move.makespan_s < r.keep.makespan_s * (1.0 - setup.replan_threshold);
    if (better) {
      adopt(snap.move, r.move, snap.move_map, snap.why, true, snap.t);
    } else {
      // Re-timed current choices: devices of pending jobs may change (a job that ended early
      // frees its devices), configurations do not.
      bool changed = false;
      for (std::size_t k = 0; k < snap.keep_map.size(); ++k) {
        const JobState& js = jobs[static_cast<std::size_t>(snap.keep_map[k].first)];
        if (js.status == Status::kPending && r.keep.jobs[k].devices != js.devices) changed = true;
      }
      adopt(snap.keep, r.keep, snap.keep_map, snap.why + " (re-timed)", changed, snap.t);
    }
  }

  void request_stop(JobState& js, const std::string& why) {
    if (js.status != Status::kRunning || js.stop_sent) return;
    send_json(control, js.segments.back().ranks.front(), kTagStop, {{"reason", why}});
    js.stop_sent = true;
    js.status = Status::kStopping;
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
      if (jobs[j].status == Status::kPending && jobs[j].config >= 0)
        order.push_back(static_cast<int>(j));
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
    const auto& detail = setup.planning.details[static_cast<std::size_t>(js.planning_index)]
                                               [static_cast<std::size_t>(js.config)];
    SegmentLaunch l;
    l.job_id = js.spec->id;
    l.strategy = detail.strategy;
    l.knobs = detail.knobs;
    l.ranks = ranks;
    l.segment = static_cast<int>(js.past_segments.size() + js.segments.size());
    l.tag = 1 + (launches++ % 30000);
    const nlohmann::json cmd = {{"type", "launch"}, {"launch", l.to_json()}};
    for (int r : ranks) {
      idle.erase(r);
      send_json(control, r, kTagCommand, cmd);
    }
    Segment seg;
    seg.config = js.config;
    seg.ranks = ranks;
    seg.start_s = now();
    seg.start_step = js.steps_done;
    js.segments.push_back(seg);
    js.status = Status::kRunning;
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

  JobState* find(const std::string& id) {
    for (auto& js : jobs)
      if (js.spec->id == id) return &js;
    return nullptr;
  }

  void on_progress(const nlohmann::json& m) {
    JobState* js = find(m.at("job").get<std::string>());
    if (js == nullptr) return;
    js->steps_done = m.at("step").get<std::int64_t>();
    js->loss = m.value("loss", js->loss);
    if (m.contains("val_loss")) js->val_loss = m["val_loss"].get<double>();
    js->tokens_per_s = m.value("tokens_per_s", js->tokens_per_s);
    const double st = m.value("step_time_s", 0.0);
    if (st > 0) {
      js->step_time_s = js->step_time_s > 0 ? 0.7 * js->step_time_s + 0.3 * st : st;
      const double est = step_time_unscaled(*js);
      if (est > 0) js->correction = js->step_time_s / est;
    }
  }

  double step_time_unscaled(const JobState& js) const {
    if (js.planning_index < 0 || js.config < 0) return 0;
    const auto& sj = setup.planning.jobs[static_cast<std::size_t>(js.planning_index)];
    const auto& cfg = sj.configs[static_cast<std::size_t>(js.config)];
    return sj.steps > 0 ? cfg.time_s / static_cast<double>(sj.steps) : 0;
  }

  void on_report(const nlohmann::json& m) {
    JobState* js = find(m.at("job").get<std::string>());
    if (js == nullptr) return;
    ++version;
    const auto& o = m.at("outcome");
    const std::string status = o.at("status").get<std::string>();
    js->steps_done = o.value("step", js->steps_done);
    if (o.value("has_val", false)) js->val_loss = o.at("val_loss").get<double>();
    Segment& seg = js->segments.back();
    seg.end_s = now();
    seg.end_step = js->steps_done;
    seg.end_status = status;
    nlohmann::json e = {
        {"job", js->spec->id},
        {"step", js->steps_done},
        {"segment", static_cast<int>(js->past_segments.size() + js->segments.size()) - 1}};
    // The segment's device-memory peak on its busiest rank (what a GPU sweep is sized by).
    if (o.value("peak_device_bytes", 0.0) > 0) e["peak_device_bytes"] = o.at("peak_device_bytes");
    if (status == "finished") {
      js->status = Status::kFinished;
      e["event"] = "job_end";
      if (!std::isnan(js->val_loss)) e["val_loss"] = js->val_loss;
      event(e);
      request_replan("job " + js->spec->id + " finished");
    } else if (status == "failed") {
      js->status = Status::kFailed;
      js->reason = o.value("reason", "unknown");
      e["event"] = "failure";
      e["reason"] = js->reason;
      event(e);
      log::error("job {} failed: {}", js->spec->id, js->reason);
      request_replan("job " + js->spec->id + " failed");
    } else {  // stopped
      e["event"] = "job_stop";
      e["reason"] = o.value("reason", "");
      event(e);
      const bool by_signal =
          o.value("signal", 0) != 0 || o.value("reason", "").rfind("signal", 0) == 0;
      if (by_signal && !stopping) enter_stopping(o.value("signal", 0));
      js->status = stopping ? Status::kStopped : Status::kPending;
      if (js->move_after_stop && !stopping) js->status = Status::kPending;
    }
  }

  void enter_stopping(int sig) {
    if (stopping) return;
    ++version;
    stopping = true;
    stop_signal = sig;
    event({{"event", "signal"}, {"signal", sig}});
    const std::string what = sig != 0 ? describe_signal(sig) : std::string("a stop signal");
    log::warn("{} received: checkpointing every running job, then exiting with code 99", what);
    for (auto& js : jobs) request_stop(js, what);
  }

  bool all_done() const {
    for (const auto& js : jobs)
      if (js.status == Status::kRunning || js.status == Status::kStopping) return false;
    if (stopping) return true;
    for (const auto& js : jobs)
      if (js.status == Status::kPending) return false;
    return true;
  }

  int exit_code() const {
    bool failed = false, unfinished = false;
    for (const auto& js : jobs) {
      if (js.status == Status::kFailed) failed = true;
      if (js.status == Status::kPending || js.status == Status::kStopped) unfinished = true;
    }
    if (unfinished) return 99;
    return failed ? 1 : 0;
  }

  void print_progress(bool force) {
    const double t = now();
    const bool tty = isatty(STDERR_FILENO) != 0;
    const double interval = tty ? 1.0 : setup.progress_interval_s;
    if (setup.quiet || (!force && t - last_print_s < interval)) return;
    last_print_s = t;
    int done = 0, running = 0, failed = 0;
    double eta = 0;
    for (const auto& js : jobs) {
      if (js.status == Status::kFinished) ++done;
      if (js.status == Status::kRunning || js.status == Status::kStopping) ++running;
      if (js.status == Status::kFailed) ++failed;
      if (js.status != Status::kFinished && js.status != Status::kFailed)
        eta = std::max(eta, js.planned_end_s - t);
    }
    std::string out = fmt::format(
        "batch: {}/{} jobs done, {} running{} | elapsed {} | ETA {}\n", done, jobs.size(), running,
        failed ? fmt::format(", {} failed", failed) : "", hms(t), hms(eta));
    out += fmt::format("  {:<28} {:<16} {:>13} {:>7} {:>7} {:>8} {:>8}\n", "job", "strategy",
                       "step", "loss", "val", "tok/s", "ETA");
    for (const auto& js : jobs) {
      if (js.status != Status::kRunning && js.status != Status::kStopping) continue;
      const auto& seg = js.segments.back();
      const auto& detail = setup.planning.details[static_cast<std::size_t>(js.planning_index)]
                                                 [static_cast<std::size_t>(seg.config)];
      const double job_eta = js.step_time_s * static_cast<double>(remaining_steps(js));
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

  // What `--resume` needs besides checkpoints: wall time so far, the next plan number, the
  // data files as absolute paths (the run directory's workload copy has relative ones), and the
  // memory per rank the run was given.
  void write_run_state(double elapsed_s) {
    // Models that start from a Hugging Face directory (`from`), absolute, by model name.
    nlohmann::json model_dirs = nlohmann::json::object();
    for (const auto& j : setup.workload->jobs)
      if (!j.init_from.empty()) model_dirs[j.model_name] = fs::absolute(j.init_from).string();
    write_atomic(setup.run_dir / "run_state.json",
                 nlohmann::json{{"elapsed_s", elapsed_s},
                                {"next_plan", plan_index},
                                {"train_data", fs::absolute(setup.workload->train_data).string()},
                                {"val_data", fs::absolute(setup.workload->val_data).string()},
                                {"model_dirs", model_dirs},
                                {"device_memory_bytes", setup.device_capacity},
                                {"host_memory_bytes", setup.host_capacity}}
                     .dump(2));
  }

  void write_summary() {
    nlohmann::json jl = nlohmann::json::array();
    double best = INFINITY;
    std::string best_id;
    for (const auto& js : jobs) {
      nlohmann::json segs = js.past_segments;
      double actual = 0;
      for (const auto& s : segs) actual += s["end_s"].get<double>() - s["start_s"].get<double>();
      for (const auto& s : js.segments) {
        const auto& d = setup.planning.details[static_cast<std::size_t>(js.planning_index)]
                                              [static_cast<std::size_t>(s.config)];
        const double end = s.end_s >= 0 ? s.end_s : now();
        actual += end - s.start_s;
        segs.push_back({{"strategy", d.strategy},
                        {"knobs", d.knobs},
                        {"devices", static_cast<int>(s.ranks.size())},
                        {"ranks", s.ranks},
                        {"start_s", s.start_s},
                        {"end_s", end},
                        {"start_step", s.start_step},
                        {"end_step", s.end_step},
                        {"status", s.end_status}});
      }
      nlohmann::json j = {{"id", js.spec->id},
                          {"model", js.spec->model_name},
                          {"lr", js.spec->train.optimizer.lr},
                          {"batch_size", js.spec->train.batch_size},
                          {"steps", js.spec->train.steps},
                          {"steps_done", js.steps_done},
                          {"status", status_name(js.status)},
                          {"segments", segs},
                          {"predicted_s", js.predicted_s},
                          {"actual_s", actual}};
      if (!js.reason.empty()) j["reason"] = js.reason;
      if (!std::isnan(js.val_loss)) {
        j["final_val_loss"] = js.val_loss;
        if (js.status == Status::kFinished && js.val_loss < best) {
          best = js.val_loss;
          best_id = js.spec->id;
        }
      }
      jl.push_back(j);
    }
    const double makespan = now();
    nlohmann::json s = {{"workload", setup.workload->name},
                        {"policy", setup.policy},
                        {"replan", setup.replan},
                        {"makespan_s", makespan},
                        {"predicted_makespan_s", initial_predicted_makespan_s},
                        {"solve_time_s", initial_solve_time_s},
                        // Not part of the makespan: the batch's clock starts at the first plan.
                        {"profiling_s", setup.profiling_s},
                        {"predicted_baselines_s", baseline_predictions},
                        {"prediction_error", initial_predicted_makespan_s > 0
                                                 ? (makespan - initial_predicted_makespan_s) /
                                                       initial_predicted_makespan_s
                                                 : 0.0},
                        {"lower_bound_s", initial_lower_bound_s},
                        {"exit_code", exit_code()},
                        {"plans", plan_index},
                        {"devices", setup.ranks.cluster.total_devices()},
                        {"jobs", jl}};
    if (!best_id.empty()) s["best_job"] = {{"id", best_id}, {"val_loss", best}};
    write_atomic(setup.run_dir / "summary.json", s.dump(2));
    write_run_state(makespan);
  }

  int run() {
    write_run_state(now());
    initial_plan();
    bool sent_exit = false;
    int exited = 0;
    while (exited < world_size) {
      bool busy = false;
      int from = -1;
      while (auto m = try_recv_json(control, MPI_ANY_SOURCE, kTagReady, &from)) {
        busy = true;
        if (m->value("type", "") == "signal") {
          enter_stopping(m->value("signal", 0));
          continue;
        }
        idle.insert(from);
      }
      while (auto m = try_recv_json(control, MPI_ANY_SOURCE, kTagProgress, &from)) {
        busy = true;
        on_progress(*m);
      }
      while (auto m = try_recv_json(control, MPI_ANY_SOURCE, kTagReport, &from)) {
        busy = true;
        on_report(*m);
      }
      if (int sig = stop_signal_received(); sig != 0 && !stopping) enter_stopping(sig);
      if (!stopping && now() - last_replan_s >= setup.replan_interval_s) request_replan("interval");
      finish_replan();
      if (!sent_exit) dispatch();
      start_replan();
      if (!sent_exit && all_done() && static_cast<int>(idle.size()) == world_size) {
        write_summary();
        const int code = exit_code();
        for (int r = 0; r < world_size; ++r)
          send_json(control, r, kTagCommand, {{"type", "exit"}, {"code", code}});
        exited = world_size;
        sent_exit = true;
        print_progress(true);
        event({{"event", "run_end"}, {"exit_code", code}});
        return code;
      }
      print_progress(false);
      // The batch clock survives a hard kill (SIGKILL, node failure) to within this interval:
      // `--resume` continues it from run_state.json.
      if (now() - last_state_s >= 2.0) {
        write_run_state(now());
        last_state_s = now();
      }
      if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exit_code();
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
