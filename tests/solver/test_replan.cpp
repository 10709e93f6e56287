// Re-planning (introspection) and the discrete-event simulator.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "instances.hpp"
#include "solver/baselines.hpp"
#include "solver/replan.hpp"
#include "solver/simulator.hpp"
#include "solver/synthetic.hpp"
#include "solver/validate.hpp"

using namespace saturn::solver;
using saturn::solver::testing::cfg;

namespace {

Problem sweep() {
  Problem p;
  p.cluster = parse_cluster_spec("2x4");
  for (int i = 0; i < 6; ++i) {
    Job j{fmt::format("j{}", i), {}, 1000};
    j.configs.push_back(cfg("ddp", 1, 1, 4000.0 + 500 * (i % 3)));
    j.configs.push_back(cfg("fsdp", 2, 1, 2300.0 + 300 * (i % 3)));
    j.configs.push_back(cfg("fsdp", 4, 1, 1400.0 + 200 * (i % 3)));
    p.jobs.push_back(j);
  }
  return p;
}

SolveOptions quick() {
  SolveOptions s;
  s.time_limit_s = 0.3;
  s.use_milp = false;
  return s;
}

}  // namespace

TEST(Replan, RemainingProblemScalesPinsAndCharges) {
  const Problem p = sweep();
  std::vector<JobState> st(p.jobs.size());
  st.at(0).phase = JobState::Phase::done;
  st.at(1).phase = JobState::Phase::running;
  st.at(1).progress = 0.25;
  st.at(1).config = 1;
  st.at(1).devices = {2, 3};
  st.at(2).progress = 0.5;  // a job checkpointed earlier, waiting to resume
  st.at(3).time_scale = 1.5;
  ReplanOptions ro;
  ro.restart_cost_s = 100;
  RemainingMap map;
  const Problem rem = remaining_problem(p, st, ro, &map);
  ASSERT_EQ(rem.jobs.size(), 5u);
  EXPECT_EQ(map.job[0], 1);
  // Running: the pinned configuration first, then every configuration restarted.
  const Job& r = rem.jobs[0];
  ASSERT_EQ(r.configs.size(), 4u);
  EXPECT_TRUE(r.configs[0].pinned());
  EXPECT_DOUBLE_EQ(r.configs[0].time_s, 0.75 * p.jobs[1].configs[1].time_s);
  EXPECT_FALSE(r.configs[1].pinned());
  EXPECT_DOUBLE_EQ(r.configs[2].time_s, 0.75 * p.jobs[1].configs[1].time_s + 100);
  EXPECT_EQ(map.config[0][0], 1);
  EXPECT_EQ(map.restart[0][0], 0);
  EXPECT_EQ(map.restart[0][2], 1);
  EXPECT_EQ(r.steps, 750);
  EXPECT_DOUBLE_EQ(rem.jobs[1].configs[0].time_s, 0.5 * p.jobs[2].configs[0].time_s);
  EXPECT_DOUBLE_EQ(rem.jobs[2].configs[2].time_s, 1.5 * p.jobs[3].configs[2].time_s);
  ro.allow_restarts = false;
  EXPECT_EQ(remaining_problem(p, st, ro, nullptr).jobs[0].configs.size(), 1u);
}

TEST(Replan, KeepsRunningJobsInPlaceAndAdoptsOnlyBetterPlans) {
  const Problem p = sweep();
  // A poor current plan: every job on one device.
  const Plan poor = baseline_plan(p, Baseline::min);
  std::vector<JobState> st(p.jobs.size());
  const double now = 1000;
  for (size_t j = 0; j < p.jobs.size(); ++j) {
    const ScheduledJob& sj = poor.jobs[j];
    if (sj.start_s <= now) {
      st[j].phase = JobState::Phase::running;
      st[j].config = sj.config;
      st[j].devices = sj.devices;
      st[j].progress = (now - sj.start_s) / (sj.end_s - sj.start_s);
    }
  }
  ReplanOptions ro;
  ro.solve = quick();
  ro.threshold = 0.0;
  ReplanResult r = replan(p, poor, st, now, ro);
  EXPECT_TRUE(validate_plan(r.remaining, r.current).empty());
  EXPECT_TRUE(validate_plan(r.remaining, r.candidate).empty());
  EXPECT_LE(r.candidate.makespan_s, r.current.makespan_s);
  EXPECT_TRUE(r.adopted) << r.reason;
  // Whatever is chosen, a kept job continues at time 0 on its own devices (the validator
  // checks pinned configurations); a restarted one pays the restart cost.
  for (size_t i = 0; i < r.remaining.jobs.size(); ++i) {
    const ScheduledJob& sj = r.candidate.jobs[i];
    if (r.map.restart[i][static_cast<size_t>(sj.config)]) {
      EXPECT_GE(sj.end_s - sj.start_s, ro.restart_cost_s);
    }
  }
  // A threshold no plan can meet keeps the current one.
  ro.threshold = 0.99;
  r = replan(p, poor, st, now, ro);
  EXPECT_FALSE(r.adopted);
  EXPECT_EQ(&r.chosen(), &r.current);
  // Without restarts, running jobs keep running.
  ro.allow_restarts = false;
  ro.threshold = 0.0;
  r = replan(p, poor, st, now, ro);
  for (size_t i = 0; i < r.remaining.jobs.size(); ++i)
    if (st.at(static_cast<size_t>(r.map.job[i])).phase == JobState::Phase::running) {
      EXPECT_EQ(r.candidate.jobs[i].start_s, 0.0);
      EXPECT_EQ(r.candidate.jobs[i].devices, st[static_cast<size_t>(r.map.job[i])].devices);
    }
}

TEST(Simulator, ExactEstimatesReproduceThePlan) {
  const Problem p = sweep();
  SimOptions o;
  o.error = 0;
  o.config_error = 0;
  o.initial = quick();
  o.replan.solve = quick();
  o.policy = SimOptions::Policy::static_plan;
  const SimResult s = simulate(p, o);
  EXPECT_NEAR(s.makespan_s, s.planned_makespan_s, 1e-6 * s.planned_makespan_s);
  o.policy = SimOptions::Policy::replan;
  const SimResult r = simulate(p, o);
  EXPECT_EQ(r.replans, 0);  // nothing ever ends off plan
  EXPECT_NEAR(r.makespan_s, s.makespan_s, 1e-6 * s.makespan_s);
}

TEST(Simulator, StartsFromAGivenPlan) {
  const Problem p = sweep();
  const Plan first = baseline_plan(p, Baseline::min);
  SimOptions o;
  o.error = 0;
  o.config_error = 0;
  o.policy = SimOptions::Policy::static_plan;
  const SimResult r = simulate(p, o, &first);
  EXPECT_EQ(r.planned_makespan_s, first.makespan_s);
  EXPECT_EQ(r.solve_time_s, first.solver.solve_time_s);
  // Exact estimates: the plan runs as made (a job may only start earlier, never later).
  EXPECT_LE(r.makespan_s, first.makespan_s * (1 + 1e-9));
  EXPECT_GE(r.makespan_s, 0.99 * first.makespan_s);
  Plan wrong = first;
  wrong.jobs.pop_back();
  EXPECT_THROW(simulate(p, o, &wrong), SolverError);
}

TEST(Simulator, OracleExecutesItsPlanExactly) {
  const Problem p = synthetic::family("txt", parse_cluster_spec("1x8:40GiB"), 12, 1);
  SimOptions o;
  o.seed = 3;
  o.initial = quick();
  o.policy = SimOptions::Policy::oracle;
  const SimResult r = simulate(p, o);
  EXPECT_NEAR(r.makespan_s, r.planned_makespan_s, 1e-6 * r.planned_makespan_s);
  // The actual times the oracle planned with differ from the estimates by at most the error.
  const Problem act = actual_problem(p, o);
  for (size_t j = 0; j < p.jobs.size(); ++j)
    for (size_t c = 0; c < p.jobs[j].configs.size(); ++c) {
      const double ratio = act.jobs[j].configs[c].time_s / p.jobs[j].configs[c].time_s;
      EXPECT_GE(ratio, (1 - o.error) * (1 - o.config_error) - 1e-12);
      EXPECT_LE(ratio, (1 + o.error) * (1 + o.config_error) + 1e-12);
    }
}

TEST(Simulator, ReplanningRunsUnderError) {
  const Problem p = synthetic::family("mixed", parse_cluster_spec("2x8:40GiB"), 30, 2);
  SimOptions o;
  o.seed = 5;
  o.initial = quick();
  o.replan.solve = quick();
  o.replan.solve.time_limit_s = 0.1;
  o.policy = SimOptions::Policy::replan;
  const SimResult a = simulate(p, o);
  EXPECT_GT(a.replans, 0);
  EXPECT_EQ(a.log.size(), static_cast<size_t>(a.replans));
  EXPECT_GT(a.makespan_s, 0);
  o.policy = SimOptions::Policy::static_plan;
  const SimResult s = simulate(p, o);
  EXPECT_GT(s.makespan_s, 0);
  EXPECT_EQ(s.replans, 0);
  // Same seed, same actual times (the plans themselves depend on the solver's time limit).
  const Problem x = actual_problem(p, o), y = actual_problem(p, o);
  for (size_t j = 0; j < p.jobs.size(); ++j)
    EXPECT_EQ(x.jobs[j].configs[0].time_s, y.jobs[j].configs[0].time_s);
}

namespace {

// A re-plan instance as the executor builds it (runtime/exec/coordinator.cpp): running jobs
// keep their devices (pinned, measured remaining time) or restart anywhere at a cost; pending
// jobs take any configuration.
Problem running_and_pending(bool restarts) {
  Problem p;
  p.cluster = parse_cluster_spec("2x4");
  auto running = [&](const std::string& id, long long steps_left, Config keep,
                     std::vector<int> devices) {
    Job j{id, {}, steps_left};
    keep.pinned_devices = std::move(devices);
    j.configs.push_back(keep);
    if (restarts)
      for (int g : {1, 2, 4}) j.configs.push_back(cfg("fsdp", g, 1, 3600.0 / g + 120.0));
    p.jobs.push_back(j);
  };
  running("a", 300, cfg("fsdp", 4, 1, 900.0), {0, 1, 2, 3});
  running("b", 100, cfg("ddp", 2, 1, 250.0), {5, 6});
  running("c", 500, cfg("fsdp", 1, 1, 1700.0), {7});
  for (int i = 0; i < 4; ++i) {
    Job j{fmt::format("p{}", i), {}, 1000};
    for (int g : {1, 2, 4}) j.configs.push_back(cfg("fsdp", g, 1, (2000.0 + 300 * i) / g + 50));
    j.configs.push_back(cfg("fsdp", 8, 2, (2000.0 + 300 * i) / 6));
    p.jobs.push_back(j);
  }
  return p;
}

}  // namespace

TEST(Replan, PinnedJobsContinueAtTimeZeroUnderEveryMethod) {
  for (bool restarts : {false, true}) {
    const Problem p = running_and_pending(restarts);
    std::vector<SolveOptions> methods(2, quick());
    methods[1].use_milp = true;
    methods[1].time_limit_s = 1;
    if (backend_available(Backend::cbc)) {
      methods.push_back(methods[1]);
      methods.back().backend = Backend::cbc;
    }
    for (const SolveOptions& o : methods) {
      const Plan plan = solve(p, o);
      EXPECT_TRUE(validate_plan(p, plan).empty());
      for (size_t j = 0; j < 3; ++j) {
        const ScheduledJob& sj = plan.jobs[j];
        if (p.jobs[j].configs[static_cast<size_t>(sj.config)].pinned()) {
          EXPECT_EQ(sj.start_s, 0.0) << p.jobs[j].id;
        } else {
          EXPECT_TRUE(restarts) << p.jobs[j].id << " left its devices without a restart option";
        }
      }
    }
  }
}

// The executor once pinned a job it was stopping (to move it) to the devices of its *next*
// placement, which another running job still held. Two jobs kept running on one device cannot
// both start at time 0, and the solver returned a plan the validator rejected ("kept running
// but does not continue at time 0"). Such an instance is now a clear input error.
TEST(Replan, TwoJobsKeptRunningOnOneDeviceIsABadInstance) {
  for (bool restarts : {false, true}) {
    Problem p = running_and_pending(restarts);
    Job moving{"m", {}, 200};
    Config next = cfg("fsdp", 2, 1, 600.0);
    next.pinned_devices = {2, 3};  // 'a' runs there
    moving.configs.push_back(next);
    p.jobs.push_back(moving);
    try {
      solve(p, quick());
      ADD_FAILURE() << "conflicting pins were accepted";
    } catch (const SolverError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'a' and 'm' are both kept running on device 2"), std::string::npos)
          << what;
    }
  }
  // Whole-node pins hold every device of their nodes.
  Problem p = running_and_pending(false);
  p.jobs.erase(p.jobs.begin());  // node 0 is free without 'a'
  Job wide{"w", {}, 200};
  Config whole = cfg("fsdp", 2, 2, 600.0);
  whole.pinned_devices = {0, 4};  // device 4 is free, but 'w' holds all of node 1
  wide.configs.push_back(whole);
  p.jobs.insert(p.jobs.begin(), wide);
  try {
    solve(p, quick());
    ADD_FAILURE() << "a whole-node pin beside other running jobs was accepted";
  } catch (const SolverError& e) {
    EXPECT_NE(std::string(e.what()).find("'w' and 'b' are both kept running on device 5"),
              std::string::npos)
        << e.what();
  }
}
