#include "solver/selection_sim.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>

namespace saturn::solver {

namespace {

double unit(std::mt19937& rng) {
  return static_cast<double>(rng()) / 4294967296.0;  // [0, 1), the same on every platform
}

enum class Phase { waiting, running, paused, stopped, done };

struct Run {
  Phase phase = Phase::waiting;
  int config = -1;
  std::vector<int> devices, held;
  double steps_done = 0.0;
  int passed = 0;        // rungs it has been promoted past
  bool at_rung = false;  // running, has just reported at rung `passed`, decision pending
  // Reported at rung `passed`, decision pending, and training on toward the next boundary
  // meanwhile (SelectionSimOptions::speculate); paused if it gets there still undecided.
  bool speculating = false;
  double last = 0.0;    // busy time and progress are accounted up to here
  double resume = 0.0;  // restart cost ends here
  double pending_penalty = 0.0;
  double end = 0.0;
};

// Rung boundaries of every job, checked: all rungs strictly before the job's end.
std::vector<std::vector<long long>> all_rungs(const Problem& p, const SelectionRule& rule) {
  std::vector<std::vector<long long>> out;
  for (const Job& job : p.jobs) {
    if (job.steps < 1)
      throw SolverError(fmt::format("selection simulator: job '{}' has no step count", job.id));
    out.push_back(rung_steps(rule, job.steps));
    if (out.back().back() >= job.steps)
      throw SolverError(fmt::format(
          "selection simulator: job '{}' ends at step {}, not after its last rung ({} steps); "
          "lower min_steps or max_rungs",
          job.id, job.steps, out.back().back()));
  }
  return out;
}

// Orders jobs by their metric at a rung, best (lowest loss) first; ties to the lower index.
struct RankAt {
  unsigned seed;
  int rung;
  bool operator()(int a, int b) const {
    const double ma = selection_metric(seed, a, rung), mb = selection_metric(seed, b, rung);
    return ma != mb ? ma < mb : a < b;
  }
};

SelectionSimResult simulate_outside(const Problem& p, const SelectionSimOptions& o,
                                    const std::vector<std::vector<long long>>& rungs) {
  const SelectionRule& rule = o.rule;
  const int R = rule.max_rungs;
  const size_t J = p.jobs.size();
  SelectionSimResult res;
  res.stopped_rung.assign(J, -1);
  res.reports.resize(static_cast<size_t>(R));
  res.report_times.resize(static_cast<size_t>(R));
  std::vector<int> alive(J);
  for (size_t j = 0; j < J; ++j) alive[j] = static_cast<int>(j);
  double now = 0.0;
  for (int s = 0; s <= R; ++s) {
    Problem batch;
    batch.cluster = p.cluster;
    for (int j : alive) {
      const Job& job = p.jobs[static_cast<size_t>(j)];
      const auto& rj = rungs[static_cast<size_t>(j)];
      const long long begin = s == 0 ? 0 : rj[static_cast<size_t>(s - 1)];
      const long long end = s < R ? rj[static_cast<size_t>(s)] : job.steps;
      Job part = job;
      part.steps = end - begin;
      for (Config& c : part.configs)
        c.time_s = c.time_s * static_cast<double>(end - begin) / static_cast<double>(job.steps) +
                   (s > 0 ? o.replan.restart_cost_s : 0.0);
      batch.jobs.push_back(std::move(part));
    }
    const Plan plan = solve(batch, o.replan.solve);
    ++res.plans;
    res.solve_time_s += plan.solver.solve_time_s;
    if (s > 0) res.restarts += static_cast<int>(alive.size());
    std::vector<size_t> finish_order(alive.size());
    for (size_t i = 0; i < alive.size(); ++i) {
      finish_order[i] = i;
      const ScheduledJob& sj = plan.jobs[i];
      res.busy_device_s += static_cast<double>(sj.devices.size()) * (sj.end_s - sj.start_s);
    }
    std::stable_sort(finish_order.begin(), finish_order.end(),
                     [&](size_t a, size_t b) { return plan.jobs[a].end_s < plan.jobs[b].end_s; });
    now += plan.makespan_s;  // run times are the estimates: the batch runs as planned
    if (s == R) break;
    auto& reported = res.reports[static_cast<size_t>(s)];
    for (size_t i : finish_order) {
      reported.push_back(alive[i]);
      res.report_times[static_cast<size_t>(s)].push_back(now - plan.makespan_s +
                                                         plan.jobs[i].end_s);
    }
    // The tuner sees the whole rung: the best rung_keep(n) continue.
    std::vector<int> ranked = alive;
    std::sort(ranked.begin(), ranked.end(), RankAt{o.metric_seed, s});
    const size_t keep = static_cast<size_t>(rung_keep(rule, static_cast<int>(alive.size())));
    const int n = static_cast<int>(alive.size());
    for (size_t r = 0; r < ranked.size(); ++r) {
      res.decisions.push_back({ranked[r], s, now, r < keep, n});
      if (r >= keep) res.stopped_rung[static_cast<size_t>(ranked[r])] = s;
    }
    ranked.resize(keep);
    std::sort(ranked.begin(), ranked.end());
    alive = ranked;
  }
  res.selection_time_s = now;
  return res;
}

class InsideSim {
 public:
  InsideSim(const Problem& p, const SelectionSimOptions& o,
            std::vector<std::vector<long long>> rungs)
      : p_(p),
        o_(o),
        rule_(o.rule),
        R_(o.rule.max_rungs),
        J_(p.jobs.size()),
        rungs_(std::move(rungs)),
        run_(J_),
        device_job_(static_cast<size_t>(p.cluster.total_devices()), -1),
        queue_(device_job_.size()),
        decided_(static_cast<size_t>(R_), std::vector<char>(J_, 0)),
        reported_(static_cast<size_t>(R_), std::vector<char>(J_, 0)) {
    res_.stopped_rung.assign(J_, -1);
    res_.reports.resize(static_cast<size_t>(R_));
    res_.report_times.resize(static_cast<size_t>(R_));
    reaching_.push_back(static_cast<int>(J_));
    for (int k = 1; k < R_; ++k) reaching_.push_back(rung_keep(rule_, reaching_.back()));
  }

  SelectionSimResult run() {
    Problem first = p_;
    for (size_t j = 0; j < J_; ++j)
      for (Config& c : first.jobs[j].configs) c.time_s *= work_fraction(j);
    plan_ = solve(first, o_.replan.solve);
    ++res_.plans;
    res_.solve_time_s += plan_.solver.solve_time_s;
    rebuild_queues();
    while (unfinished() > 0) {
      start_ready();
      double next = kInfinity;
      for (size_t j = 0; j < J_; ++j)
        if (run_[j].phase == Phase::running) next = std::min(next, reach_time(j));
      if (next == kInfinity)
        throw SolverError(fmt::format(
            "selection simulator: at t={:.0f}s no job runs but {} are unfinished (the plan's "
            "device queues are stuck)",
            now_, unfinished()));
      advance(next);
      bool changed = false;
      for (size_t j = 0; j < J_; ++j) {
        Run& r = run_[j];
        if (r.phase != Phase::running || reach_time(j) > now_ + 1e-9 * std::max(1.0, now_))
          continue;
        r.steps_done = static_cast<double>(target(j));
        if (r.speculating) {  // at the next boundary, still undecided: wait there
          r.phase = Phase::paused;
          release(j);
          changed = true;
        } else if (r.passed == R_) {
          r.phase = Phase::done;
          r.end = now_;
          release(j);
          changed = true;
        } else {
          r.at_rung = true;
          reported_[static_cast<size_t>(r.passed)][j] = 1;
          res_.reports[static_cast<size_t>(r.passed)].push_back(static_cast<int>(j));
          res_.report_times[static_cast<size_t>(r.passed)].push_back(now_);
        }
      }
      changed = decide() || changed;
      for (size_t j = 0; j < J_; ++j)
        if (run_[j].at_rung) {
          run_[j].at_rung = false;
          if (o_.speculate) {  // train on in place while the decision is pending
            run_[j].speculating = true;
            continue;
          }
          // Undecided: checkpoint and free the devices until decided.
          run_[j].phase = Phase::paused;
          release(j);
          changed = true;
        }
      if (changed && unfinished() > 0) replan();
    }
    // Selection ends when every job has stopped or finished: under ASHA a job still below the
    // top rung when the first survivors finish may yet be promoted.
    for (const Run& r : run_) res_.selection_time_s = std::max(res_.selection_time_s, r.end);
    return res_;
  }

 private:
  // The share of job j's remaining time that a plan is told about (Planning).
  double work_fraction(size_t j) const {
    const Run& r = run_[j];
    const long long steps = p_.jobs[j].steps;
    const long long done = std::llround(r.steps_done);
    switch (o_.planning) {
      case SelectionSimOptions::Planning::expected_work:
        return expected_work_fraction(rule_, steps, done, r.passed);
      case SelectionSimOptions::Planning::full_steps:
        return 1.0;
      case SelectionSimOptions::Planning::next_rung:
        return done < steps
                   ? static_cast<double>(target(j) - done) / static_cast<double>(steps - done)
                   : 1.0;
    }
    return 1.0;
  }
  long long target(size_t j) const {
    const Run& r = run_[j];
    const int next = r.passed + (r.speculating ? 1 : 0);
    return next < R_ ? rungs_[j][static_cast<size_t>(next)] : p_.jobs[j].steps;
  }
  double step_time(size_t j) const {
    return p_.jobs[j].configs[static_cast<size_t>(run_[j].config)].time_s /
           static_cast<double>(p_.jobs[j].steps);
  }
  double reach_time(size_t j) const {
    const Run& r = run_[j];
    return std::max(now_, r.resume) +
           (static_cast<double>(target(j)) - r.steps_done) * step_time(j);
  }
  size_t unfinished() const {
    size_t n = 0;
    for (const Run& r : run_) n += r.phase != Phase::stopped && r.phase != Phase::done;
    return n;
  }
  void advance(double t) {
    for (size_t j = 0; j < J_; ++j) {
      Run& r = run_[j];
      if (r.phase != Phase::running) continue;
      res_.busy_device_s += static_cast<double>(r.held.size()) * (t - r.last);
      const double from = std::max(r.last, r.resume);
      if (t > from)
        r.steps_done =
            std::min(static_cast<double>(target(j)), r.steps_done + (t - from) / step_time(j));
      r.last = t;
    }
    now_ = t;
  }
  void release(size_t j) {
    for (int d : run_[j].held)
      if (device_job_[static_cast<size_t>(d)] == static_cast<int>(j))
        device_job_[static_cast<size_t>(d)] = -1;
  }
  std::vector<int> held_of(size_t j, int config, const std::vector<int>& devices) const {
    if (p_.jobs[j].configs[static_cast<size_t>(config)].nodes <= 1) return devices;
    std::vector<int> nodes, held;
    for (int d : devices) nodes.push_back(p_.cluster.node_of_device(d));
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    for (int n : nodes)
      for (int d = p_.cluster.first_device(n);
           d < p_.cluster.first_device(n) + p_.cluster.nodes[static_cast<size_t>(n)].devices; ++d)
        held.push_back(d);
    return held;
  }
  void rebuild_queues() {
    for (auto& q : queue_) q.clear();
    std::vector<size_t> waiting;
    for (size_t j = 0; j < J_; ++j)
      if (run_[j].phase == Phase::waiting) waiting.push_back(j);
    std::stable_sort(waiting.begin(), waiting.end(), [&](size_t a, size_t b) {
      return plan_.jobs[a].start_s < plan_.jobs[b].start_s;
    });
    for (size_t j : waiting) {
      run_[j].config = plan_.jobs[j].config;
      run_[j].devices = plan_.jobs[j].devices;
      run_[j].held = held_of(j, run_[j].config, run_[j].devices);
      for (int d : run_[j].held) queue_[static_cast<size_t>(d)].push_back(static_cast<int>(j));
    }
  }
  void start_ready() {
    for (bool started = true; started;) {
      started = false;
      for (size_t d = 0; d < queue_.size(); ++d) {
        if (queue_[d].empty() || device_job_[d] >= 0) continue;
        const size_t j = static_cast<size_t>(queue_[d].front());
        bool ready = true;
        for (int h : run_[j].held)
          ready = ready && device_job_[static_cast<size_t>(h)] < 0 &&
                  queue_[static_cast<size_t>(h)].front() == static_cast<int>(j);
        if (!ready) continue;
        for (int h : run_[j].held) {
          device_job_[static_cast<size_t>(h)] = static_cast<int>(j);
          queue_[static_cast<size_t>(h)].pop_front();
        }
        Run& r = run_[j];
        r.phase = Phase::running;
        r.last = now_;
        r.resume = now_ + r.pending_penalty;
        r.pending_penalty = 0.0;
        started = true;
      }
    }
  }
  // A decision on job j at rung k. Promoting a running job lets it continue in place; a paused
  // one becomes waiting and pays the restart cost when it starts again.
  bool apply(size_t j, int k, bool promote) {
    Run& r = run_[j];
    decided_[static_cast<size_t>(k)][j] = 1;
    res_.decisions.push_back({static_cast<int>(j), k, now_, promote,
                              static_cast<int>(res_.reports[static_cast<size_t>(k)].size())});
    const bool was_paused = r.phase == Phase::paused;
    r.at_rung = false;
    r.speculating = false;
    if (promote) {
      r.passed = k + 1;
      if (!was_paused) return false;
      r.phase = Phase::waiting;
      r.pending_penalty = o_.replan.restart_cost_s;
      ++res_.restarts;
      return true;
    }
    if (r.phase == Phase::running) release(j);
    r.phase = Phase::stopped;
    r.end = now_;
    res_.stopped_rung[j] = k;
    return true;
  }
  bool decide() {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      for (int k = 0; k < R_; ++k) {
        const auto& rep = res_.reports[static_cast<size_t>(k)];
        std::vector<int> ranked = rep;
        std::sort(ranked.begin(), ranked.end(), RankAt{o_.metric_seed, k});
        const int n = static_cast<int>(ranked.size());
        if (rule_.method == SelectionMethod::successive_halving) {
          const int keep = rung_keep(rule_, reaching_[static_cast<size_t>(k)]);
          const int unreported = reaching_[static_cast<size_t>(k)] - n;
          for (int rank = 0; rank < n; ++rank) {
            const size_t j = static_cast<size_t>(ranked[static_cast<size_t>(rank)]);
            if (decided_[static_cast<size_t>(k)][j]) continue;
            if (rank + unreported + 1 <= keep) {
              changed = apply(j, k, true) || changed;
              again = true;
            } else if (rank + 1 > keep) {
              changed = apply(j, k, false) || changed;
              again = true;
            }
          }
        } else {
          bool closed = true;  // no job can still report at rung k
          for (size_t j = 0; j < J_; ++j)
            closed =
                closed && (run_[j].phase == Phase::stopped || reported_[static_cast<size_t>(k)][j]);
          const int quota =
              closed
                  ? rung_keep(rule_, n)
                  : static_cast<int>(std::floor(static_cast<double>(n) / rule_.reduction_factor));
          for (int rank = 0; rank < n; ++rank) {
            const size_t j = static_cast<size_t>(ranked[static_cast<size_t>(rank)]);
            if (decided_[static_cast<size_t>(k)][j]) continue;
            if (rank < quota) {
              changed = apply(j, k, true) || changed;
              again = true;
            } else if (closed) {
              changed = apply(j, k, false) || changed;
              again = true;
            }
          }
        }
      }
    }
    return changed;
  }
  void replan() {
    std::vector<JobState> states(J_);
    for (size_t j = 0; j < J_; ++j) {
      const Run& r = run_[j];
      JobState& s = states[j];
      const Job& job = p_.jobs[j];
      const double steps = static_cast<double>(job.steps);
      s.progress = r.steps_done / steps;
      if (r.phase == Phase::running) {
        s.phase = JobState::Phase::running;
        s.config = r.config;
        s.devices = r.devices;
      } else if (r.phase == Phase::waiting) {
        s.phase = JobState::Phase::waiting;
      } else {
        s.phase = JobState::Phase::done;  // stopped, finished, or paused until decided
        continue;
      }
      // A job promoted while it waited at the boundary it had already trained to has no steps
      // left before its next report, but must still start (and reload) to make it.
      const double f = std::max(1e-6, work_fraction(j));
      const double left = std::max(1e-9, 1.0 - s.progress);
      s.config_scale.assign(job.configs.size(), f);
      if (r.phase == Phase::waiting && r.pending_penalty > 0)  // reload from the checkpoint
        for (size_t c = 0; c < job.configs.size(); ++c)
          s.config_scale[c] += r.pending_penalty / (left * job.configs[c].time_s);
    }
    const ReplanResult rr = replan_fn(states);
    ++res_.plans;
    res_.solve_time_s += rr.candidate.solver.solve_time_s;
    const Plan& chosen = rr.chosen();
    for (size_t i = 0; i < rr.remaining.jobs.size(); ++i) {
      const size_t j = static_cast<size_t>(rr.map.job[i]);
      const ScheduledJob& sj = chosen.jobs[i];
      if (rr.adopted) {
        const bool restart = rr.map.restart[i][static_cast<size_t>(sj.config)] != 0;
        if (run_[j].phase == Phase::running && restart) {
          release(j);
          run_[j].phase = Phase::waiting;
          run_[j].pending_penalty = o_.replan.restart_cost_s;
          ++res_.restarts;
        }
        plan_.jobs[j].config = rr.map.config[i][static_cast<size_t>(sj.config)];
        plan_.jobs[j].nodes = sj.nodes;
        plan_.jobs[j].devices = sj.devices;
      }
      plan_.jobs[j].start_s = now_ + sj.start_s;
      plan_.jobs[j].end_s = now_ + sj.end_s;
    }
    rebuild_queues();
  }
  ReplanResult replan_fn(const std::vector<JobState>& states) const {
    return saturn::solver::replan(p_, plan_, states, now_, o_.replan);
  }

  const Problem& p_;
  const SelectionSimOptions& o_;
  const SelectionRule& rule_;
  const int R_;
  const size_t J_;
  std::vector<std::vector<long long>> rungs_;
  std::vector<Run> run_;
  std::vector<int> device_job_;
  std::vector<std::deque<int>> queue_;
  std::vector<std::vector<char>> decided_, reported_;  // per rung, per job
  std::vector<int> reaching_;                          // successive halving: N_k per rung
  Plan plan_;
  double now_ = 0.0;
  SelectionSimResult res_;
};

}  // namespace

double selection_metric(unsigned seed, int job, int rung) {
  std::seed_seq quality_seed{seed, static_cast<unsigned>(job), 0x5175u};
  std::mt19937 quality(quality_seed);
  std::seed_seq noise_seed{seed, static_cast<unsigned>(job), static_cast<unsigned>(rung) + 1u};
  std::mt19937 noise(noise_seed);
  return 2.0 + unit(quality) + 0.1 * (unit(noise) - 0.5);
}

const char* to_string(SelectionSimOptions::Policy policy) {
  switch (policy) {
    case SelectionSimOptions::Policy::inside:
      return "inside";
    case SelectionSimOptions::Policy::outside:
      return "outside";
  }
  return "?";
}

const char* to_string(SelectionSimOptions::Planning planning) {
  switch (planning) {
    case SelectionSimOptions::Planning::expected_work:
      return "expected-work";
    case SelectionSimOptions::Planning::full_steps:
      return "full-steps";
    case SelectionSimOptions::Planning::next_rung:
      return "next-rung";
  }
  return "?";
}

double selection_time_lower_bound(const Problem& problem, const SelectionRule& rule,
                                  const std::vector<int>& stopped_rung) {
  check_problem(problem);
  check_rule(rule);
  if (rule.method != SelectionMethod::successive_halving)
    throw SolverError("selection bound: only successive halving's decisions are bounded here");
  const auto rungs = all_rungs(problem, rule);
  const size_t J = problem.jobs.size();
  if (stopped_rung.size() != J)
    throw SolverError(
        fmt::format("selection bound: {} stop rungs for {} jobs", stopped_rung.size(), J));
  const int R = rule.max_rungs;
  // Per job, the fewest device-seconds and the shortest time per step over its eligible
  // configurations (a multi-node configuration holds its nodes' devices, at least `devices`).
  std::vector<double> area_per_step(J, kInfinity), time_per_step(J, kInfinity);
  for (size_t j = 0; j < J; ++j) {
    const Job& job = problem.jobs[j];
    for (const Config& c : job.configs) {
      if (eligible_nodes(problem.cluster, c).empty()) continue;
      const double per_step = c.time_s / static_cast<double>(job.steps);
      area_per_step[j] = std::min(area_per_step[j], per_step * c.devices);
      time_per_step[j] = std::min(time_per_step[j], per_step);
    }
  }
  double area = 0.0, longest = 0.0;
  std::vector<double> to_last_rung;  // fastest arrival at the last rung of the jobs reaching it
  double after_last_rung = 0.0;      // the slowest survivor's fastest rest after it
  for (size_t j = 0; j < J; ++j) {
    const int s = stopped_rung[j];
    if (s < -1 || s >= R)
      throw SolverError(fmt::format("selection bound: job '{}' stops at rung {} of {}",
                                    problem.jobs[j].id, s, R));
    const long long steps = s < 0 ? problem.jobs[j].steps : rungs[j][static_cast<size_t>(s)];
    area += area_per_step[j] * static_cast<double>(steps);
    longest = std::max(longest, time_per_step[j] * static_cast<double>(steps));
    const long long last = rungs[j][static_cast<size_t>(R - 1)];
    if (s < 0 || s == R - 1) to_last_rung.push_back(time_per_step[j] * static_cast<double>(last));
    if (s < 0)
      after_last_rung = std::max(
          after_last_rung, time_per_step[j] * static_cast<double>(problem.jobs[j].steps - last));
  }
  double decision = 0.0;
  if (!to_last_rung.empty()) {
    std::sort(to_last_rung.begin(), to_last_rung.end());
    const int n = static_cast<int>(to_last_rung.size());
    const int reports = n - rung_keep(rule, n) + 1;  // before the first winner is certain
    decision = to_last_rung[static_cast<size_t>(std::clamp(reports, 1, n) - 1)] + after_last_rung;
  }
  return std::max({area / static_cast<double>(problem.cluster.total_devices()), longest, decision});
}

SelectionSimResult simulate_selection(const Problem& problem, const SelectionSimOptions& options) {
  check_problem(problem);
  check_rule(options.rule);
  auto rungs = all_rungs(problem, options.rule);
  if (options.policy == SelectionSimOptions::Policy::outside)
    return simulate_outside(problem, options, rungs);
  return InsideSim(problem, options, std::move(rungs)).run();
}

}  // namespace saturn::solver
