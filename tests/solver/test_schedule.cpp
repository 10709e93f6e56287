// Timelines, list scheduling, device mapping and the validator.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "instances.hpp"
#include "solver/baselines.hpp"
#include "solver/clock.hpp"
#include "solver/gantt.hpp"
#include "solver/schedule.hpp"
#include "solver/validate.hpp"

using namespace saturn::solver;
using saturn::solver::testing::cfg;

namespace {

bool any_contains(const std::vector<std::string>& errors, const std::string& part) {
  for (const auto& e : errors)
    if (e.find(part) != std::string::npos) return true;
  return false;
}

Problem two_nodes() {
  Problem p;
  p.cluster = parse_cluster_spec("2x4:40GiB");
  p.jobs.push_back(Job{"a", {cfg("ddp", 2, 1, 100.0)}, 0});
  p.jobs.push_back(Job{"b", {cfg("ddp", 4, 1, 50.0)}, 0});
  p.jobs.push_back(Job{"c", {cfg("fsdp", 8, 2, 30.0)}, 0});
  return p;
}

}  // namespace

TEST(Timeline, EarliestFitWithGaps) {
  Timeline t(4);
  t.add(0, 10, 3);
  t.add(10, 20, 1);
  t.add(20, 30, 4);
  EXPECT_EQ(t.earliest_fit(1, 5, 0), 0);
  EXPECT_EQ(t.earliest_fit(2, 5, 0), 10);
  EXPECT_EQ(t.earliest_fit(2, 11, 0), 30);  // the gap [10,20) is too short
  EXPECT_EQ(t.earliest_fit(3, 10, 0), 10);
  EXPECT_EQ(t.earliest_fit(5, 1, 0), kInfinity);
  EXPECT_EQ(t.used_at(25), 4);
  EXPECT_EQ(t.used_at(35), 0);
}

TEST(ListSchedule, BackfillsAndRespectsWholeNodes) {
  const Problem p = two_nodes();
  const Prepared pr = prepare(p);
  const Schedule s = list_schedule(pr, {0, 0, 0}, {2, 1, 0});
  // c takes both nodes first; then b on one node, a on the other.
  EXPECT_EQ(s.jobs[2].start, 0);
  EXPECT_EQ(s.jobs[1].start, 30);
  EXPECT_EQ(s.jobs[0].start, 30);
  const Plan plan = to_plan(pr, s);
  EXPECT_TRUE(validate_plan(p, plan).empty());
  EXPECT_EQ(plan.jobs[2].devices.size(), 8u);
  EXPECT_DOUBLE_EQ(plan.makespan_s, 130.0);
}

TEST(Validator, CatchesEachKindOfViolation) {
  const Problem p = two_nodes();
  const Prepared pr = prepare(p);
  const Plan good = to_plan(pr, list_schedule(pr, {0, 0, 0}, {2, 1, 0}));
  ASSERT_TRUE(validate_plan(p, good).empty());

  Plan overlap = good;  // a moved onto b's devices at the same time
  overlap.jobs[0].nodes = overlap.jobs[1].nodes;
  overlap.jobs[0].devices = {overlap.jobs[1].devices[0], overlap.jobs[1].devices[1]};
  EXPECT_TRUE(any_contains(validate_plan(p, overlap), "at the same time"));

  Plan shared = good;  // a runs during c on one of c's nodes
  shared.jobs[0].start_s = 0;
  shared.jobs[0].end_s = 100;
  shared.jobs[1].start_s = 100;
  shared.jobs[1].end_s = 150;
  shared.makespan_s = 150;
  shared.jobs[2].devices = {0, 1, 2, 3, 4, 5, 6, 7};
  shared.jobs[0].devices = {0, 1};
  shared.jobs[0].nodes = {0};
  EXPECT_TRUE(any_contains(validate_plan(p, shared), "at the same time"));

  Plan missing_device = good;
  missing_device.jobs[1].devices.pop_back();
  EXPECT_TRUE(any_contains(validate_plan(p, missing_device), "has 3 devices"));

  Plan bad_device = good;
  bad_device.jobs[1].devices.back() = 99;
  EXPECT_TRUE(any_contains(validate_plan(p, bad_device), "device 99 does not exist"));

  Plan split = good;  // a single-node job on devices of two nodes
  split.jobs[0].devices = {3, 4};
  EXPECT_TRUE(any_contains(validate_plan(p, split), "which the job does not list"));

  Plan short_run = good;
  short_run.jobs[0].end_s -= 10;
  short_run.makespan_s = plan_makespan(short_run);
  EXPECT_TRUE(any_contains(validate_plan(p, short_run), "but its configuration takes"));

  Plan bad_makespan = good;
  bad_makespan.makespan_s += 5;
  EXPECT_TRUE(any_contains(validate_plan(p, bad_makespan), "is not the latest end"));

  Plan bound = good;
  bound.lower_bound_s = bound.makespan_s + 1;
  EXPECT_TRUE(any_contains(validate_plan(p, bound), "exceeds the makespan"));

  Plan fewer = good;
  fewer.jobs.pop_back();
  EXPECT_TRUE(any_contains(validate_plan(p, fewer), "places 2 jobs"));

  Problem memory = p;
  memory.jobs[0].configs[0].memory_gib = 50;
  EXPECT_TRUE(any_contains(validate_plan(memory, good), "GiB per device"));

  EXPECT_THROW(check_plan(p, overlap), SolverError);
}

TEST(Validator, WholeNodeJobsExcludeOthersFromTheirNodes) {
  Problem p;
  p.cluster = parse_cluster_spec("2x4");
  p.jobs.push_back(Job{"wide", {cfg("fsdp", 4, 2, 100.0)}, 0});  // 2 per node, whole nodes
  p.jobs.push_back(Job{"small", {cfg("ddp", 2, 1, 50.0)}, 0});
  Plan plan;
  plan.jobs.resize(2);
  plan.jobs[0] = ScheduledJob{0, {0, 1}, {0, 1, 4, 5}, 0, 100};
  plan.jobs[1] = ScheduledJob{0, {0}, {2, 3}, 0, 50};  // free devices, but on a held node
  plan.makespan_s = 100;
  EXPECT_TRUE(any_contains(validate_plan(p, plan), "spans whole nodes"));
  plan.jobs[1].start_s = 100;
  plan.jobs[1].end_s = 150;
  plan.makespan_s = 150;
  EXPECT_TRUE(validate_plan(p, plan).empty());
  plan.jobs[0].devices = {0, 1, 2, 4};  // 3 + 1 instead of 2 + 2
  EXPECT_TRUE(any_contains(validate_plan(p, plan), "puts 2 on each"));
}

TEST(ToPlan, DevicesAreMappedGreedilyInStartOrder) {
  // Per-node capacity is all the schedule tracks; mapping must never fail.
  Problem p;
  p.cluster = parse_cluster_spec("1x4");
  for (int i = 0; i < 12; ++i)
    p.jobs.push_back(Job{fmt::format("j{}", i), {cfg("x", 1 + i % 3, 1, 10.0 + 7 * (i % 5))}, 0});
  const Prepared pr = prepare(p);
  std::vector<int> option(p.jobs.size(), 0), order(p.jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(order.size() - 1 - i);
  const Plan plan = to_plan(pr, list_schedule(pr, option, order));
  EXPECT_TRUE(validate_plan(p, plan).empty());
}

// The paper's current practice: each job on a whole node with the hand-picked strategy (FSDP),
// one after another, even where another whole-node configuration is faster; "" picks the
// fastest whole-node configuration instead.
TEST(Baselines, CurrentPracticeRunsTheHandPickedStrategyOnTheWholeNode) {
  Problem p;
  p.cluster = parse_cluster_spec("1x4");
  p.jobs.push_back(
      Job{"a", {cfg("ddp", 4, 1, 10.0), cfg("fsdp", 4, 1, 30.0), cfg("ddp", 1, 1, 35.0)}, 0});
  p.jobs.push_back(
      Job{"b", {cfg("fsdp[recompute=true]", 4, 1, 20.0), cfg("pipeline", 4, 1, 12.0)}, 0});
  // The configuration each job runs, as "strategy@devices".
  auto chosen = [&](const Plan& plan, std::size_t j) {
    const Config& c = p.jobs[j].configs.at(static_cast<std::size_t>(plan.jobs.at(j).config));
    return fmt::format("{}@{}", c.strategy, plan.jobs[j].devices.size());
  };
  const Plan paper = baseline_plan(p, Baseline::current_practice);
  EXPECT_EQ(chosen(paper, 0), "fsdp@4");
  EXPECT_EQ(chosen(paper, 1), "fsdp[recompute=true]@4");
  EXPECT_DOUBLE_EQ(paper.makespan_s, 50.0);
  const Plan fastest = baseline_plan(p, Baseline::current_practice, 1, "");
  EXPECT_EQ(chosen(fastest, 0), "ddp@4");
  EXPECT_EQ(chosen(fastest, 1), "pipeline@4");
  EXPECT_DOUBLE_EQ(fastest.makespan_s, 22.0);
  const Plan ddp = baseline_plan(p, Baseline::current_practice, 1, "ddp");
  EXPECT_EQ(chosen(ddp, 0), "ddp@4");
  EXPECT_EQ(chosen(ddp, 1), "pipeline@4");  // no ddp configuration: its fastest
}

// A node of a million devices is drawn in a bounded number of rows (issue 21: one row per
// device made the text output quadratic in devices per node and ignore the time limit).
TEST(Gantt, HugeNodesAreDrawnCompressedAndQuickly) {
  Problem p;
  p.cluster.nodes = {Node{"n0", 1000000, 0.0}, Node{"n1", 4, 0.0}};
  p.jobs.push_back(Job{"wide", {cfg("ddp", 60000, 1, 100.0)}, 0});
  p.jobs.push_back(Job{"narrow", {cfg("ddp", 8, 1, 50.0)}, 0});
  p.jobs.push_back(Job{"small", {cfg("ddp", 2, 1, 80.0)}, 0});
  Plan plan;
  plan.jobs.resize(3);
  plan.jobs[0] = {0, {0}, {}, 0.0, 100.0};
  for (int d = 0; d < 60000; ++d) plan.jobs[0].devices.push_back(d);
  plan.jobs[1] = {0, {0}, {}, 0.0, 50.0};
  for (int d = 62495; d < 62503; ++d) plan.jobs[1].devices.push_back(d);  // rows 1 and 2
  plan.jobs[2] = {0, {1}, {1000001, 1000002}, 20.0, 100.0};
  plan.makespan_s = 100.0;
  EXPECT_TRUE(validate_plan(p, plan).empty());
  // This thread's CPU time: the bound is on the work (linear in devices), not on the load.
  const ScopedClockBasis cpu(ClockBasis::thread_cpu);
  const auto t0 = SolverClock::now();
  const std::string chart = gantt_chart(p, plan, 40);
  const double seconds = seconds_since(t0);
  EXPECT_LT(seconds, 0.2);
  const auto lines = std::count(chart.begin(), chart.end(), '\n');
  ASSERT_EQ(lines, kGanttRowsPerNode + 4 + 2);  // + a row per device of n1 + the axis
  EXPECT_NE(chart.find(" n0:0-31249 |" + std::string(40, 'A') + "|"), std::string::npos) << chart;
  // Two jobs on one row: '*' while both run, then the one left.
  EXPECT_NE(chart.find("n0:31250-62499 |" + std::string(20, '*') + std::string(20, 'A')),
            std::string::npos)
      << chart;
  EXPECT_NE(chart.find("n0:62500-93749 |" + std::string(20, 'B') + std::string(20, '.')),
            std::string::npos)
      << chart;
  EXPECT_NE(chart.find("n0:968750-999999 |" + std::string(40, '.')), std::string::npos) << chart;
  // The small node keeps a row per device.
  EXPECT_NE(chart.find(" n1:1 |" + std::string(8, '.') + std::string(32, 'C')), std::string::npos)
      << chart;
  EXPECT_NE(chart.find(" n1:0 |" + std::string(40, '.')), std::string::npos) << chart;
}
