#include "runtime/exec/replanner.hpp"

#include <algorithm>
#include <chrono>

#include "runtime/core/log.hpp"
#include "solver/solve.hpp"

namespace saturn::exec {

Replanner::Replanner(const CoordinatorSetup& setup, const JobTable& table)
    : setup_(&setup), table_(&table) {}

Replanner::~Replanner() {
  if (solving_.valid()) solving_.wait();
}

solver::Problem Replanner::build_problem(bool allow_moves, bool keep_choices,
                                         PlanJobMap* map) const {
  solver::Problem p;
  p.cluster = setup_->ranks.cluster;
  const auto& jobs = table_->jobs;
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    const JobState& js = jobs[j];
    if (!JobTable::active(js) || js.planning_index < 0) continue;
    const auto& sj = setup_->planning.jobs[static_cast<std::size_t>(js.planning_index)];
    solver::Job job;
    job.id = sj.id;
    job.steps = table_->remaining_steps(js);
    std::vector<int> cmap;
    // A job still stopping for a move already holds its next configuration and devices; it is
    // planned like a pending job (pinning it to devices it does not hold yet could put two
    // kept jobs on one device). Dispatch waits for its old devices to free up.
    const bool running = js.status == JobStatus::kRunning;
    if (running) {
      solver::Config keep = sj.configs[static_cast<std::size_t>(js.config)];
      keep.time_s = std::max(1e-3, table_->remaining_parts(js, js.config, false).total());
      keep.pinned_devices = js.devices;
      job.configs.push_back(keep);
      cmap.push_back(js.config);
    }
    if (!running || allow_moves) {
      // A move costs the running segment's stop (a checkpoint in its present configuration)
      // and the new segment's start.
      const double stop_s = running ? table_->costs(js, js.config).checkpoint_s : 0.0;
      for (std::size_t c = 0; c < sj.configs.size(); ++c) {
        if (keep_choices && !running && static_cast<int>(c) != js.config && js.config >= 0)
          continue;
        solver::Config cfg = sj.configs[c];
        cfg.pinned_devices.clear();
        cfg.time_s =
            std::max(1e-3, table_->remaining_parts(js, static_cast<int>(c), true).total() + stop_s);
        job.configs.push_back(cfg);
        cmap.push_back(static_cast<int>(c));
      }
    }
    p.jobs.push_back(job);
    map->emplace_back(static_cast<int>(j), cmap);
  }
  return p;
}

void Replanner::request(const std::string& why) {
  if (wanted_.empty()) wanted_ = why;
}

void Replanner::start(double t, std::uint64_t version) {
  if (wanted_.empty() || solving_.valid()) return;
  Snapshot snap;
  snap.why = std::exchange(wanted_, std::string());
  snap.t = t;
  snap.version = version;
  snap.keep = build_problem(false, true, &snap.keep_map);
  if (snap.keep.jobs.empty()) return;
  snap.move = build_problem(true, false, &snap.move_map);
  // The solve shares the cores with training: its time is kept to about 1 % of the work left
  // (the plans it improves on are already within a few per cent of their bound). No larger
  // floor: on CPU ranks a 0.5 s floor per solve, two solves per re-plan, took 2 s of rank 0's
  // core from a 15 s batch (bench/makespan: +17 % against +3 % without re-planning).
  double left_s = 0;
  for (const auto& js : table_->jobs)
    if (js.status == JobStatus::kPending || js.status == JobStatus::kRunning)
      left_s = std::max(left_s, js.planned_end_s - snap.t);
  solver::SolveOptions opts = setup_->solve;
  opts.time_limit_s = std::min({opts.time_limit_s, 5.0, std::max(0.05, 0.01 * left_s)});
  snapshot_ = std::move(snap);
  solving_ = std::async(std::launch::async, [keep = snapshot_.keep, move = snapshot_.move, opts] {
    Result r;
    try {
      r.keep = solver::plan_jobs(keep.cluster, keep.jobs, opts);
      r.move = solver::plan_jobs(move.cluster, move.jobs, opts);
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  });
}

std::optional<PlanAdoption> Replanner::poll(std::uint64_t version, bool stopping) {
  if (!solving_.valid() || solving_.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
    return std::nullopt;
  const Result r = solving_.get();
  ++solved_;
  solve_s_ += r.keep.solver.solve_time_s + r.move.solver.solve_time_s;
  const Snapshot& snap = snapshot_;
  if (!r.error.empty()) {
    log::warn("re-plan failed, keeping the current plan: {}", r.error);
    return std::nullopt;
  }
  if (stopping) return std::nullopt;
  if (snap.version != version) {
    request(snap.why);
    return std::nullopt;
  }
  const bool better = r.move.makespan_s < r.keep.makespan_s * (1.0 - setup_->replan_threshold);
  if (better) return PlanAdoption{snap.move, r.move, snap.move_map, snap.why, true, snap.t};
  // Re-timed current choices: devices of pending jobs may change (a job that ended early frees
  // its devices), configurations do not. A plan that places a job promoted at a rung is a new
  // plan file too: it is where that job goes on (the timeline and the report show it).
  bool changed = false;
  for (std::size_t k = 0; k < snap.keep_map.size(); ++k) {
    const JobState& js = table_->jobs[static_cast<std::size_t>(snap.keep_map[k].first)];
    if (js.awaiting_plan ||
        (js.status == JobStatus::kPending && r.keep.jobs[k].devices != js.devices))
      changed = true;
  }
  return PlanAdoption{snap.keep, r.keep, snap.keep_map, snap.why + " (re-timed)", changed, snap.t};
}

}  // namespace saturn::exec
