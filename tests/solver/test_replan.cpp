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
