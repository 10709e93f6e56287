// What the re-planner prices the rest of a batch by (issue 34): each configuration's costs per
// step, evaluation, checkpoint and start, learned from the segments this run measured in the
// same configuration of the same shape, and a segment's time split by kind. No MPI.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/exec/job_table.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {
namespace {

Workload two_jobs() {
  LoadOptions no_data;
  no_data.check_data_files = false;
  return parse_workload(R"(name: costs
data: {train: t.bin, val: v.bin}
defaults: {seq_len: 16, steps: 100, eval_every: 25, checkpoint_every: 50, batch_size: 4}
models:
  m: {arch: gpt2, n_layer: 1, n_head: 1, d_model: 8}
jobs:
  - sweep: {model: m, lr: [1e-3, 2e-3]}
)",
                        "/tmp/w.yaml", no_data);
}

// Both jobs share a shape: configuration 0 (key "k1") and configuration 1 (key "k2") each.
PlanningInput planning(const Workload& w) {
  PlanningInput in;
  for (const auto& job : w.jobs) {
    solver::Job sj;
    sj.id = job.id;
    sj.steps = job.train.steps;
    std::vector<ConfigDetail> details;
    for (const char* key : {"k1", "k2"}) {
      solver::Config c;
      c.strategy = "ddp";
      c.devices = 1;
      sj.configs.push_back(c);
      ConfigDetail d;
      d.key_id = key;
      d.step_s = 0.10;
      d.eval_s = 0.50;
      d.checkpoint_s = 1.0;
      d.start_s = 2.0;
      details.push_back(d);
    }
    in.jobs.push_back(sj);
    in.details.push_back(details);
  }
  return in;
}

Segment segment(int config, double start_s, double end_s, SegmentTimes t) {
  Segment s;
  s.config = config;
  s.start_s = start_s;
  s.end_s = end_s;
  s.times = t;
  return s;
}

TEST(JobCosts, ProfiledFiguresWhileNothingIsMeasured) {
  const Workload w = two_jobs();
  const PlanningInput in = planning(w);
  JobTable table(w, in, {}, {});
  const profile::UnitCosts c = table.costs(table.jobs[0], 0);
  EXPECT_DOUBLE_EQ(c.step_s, 0.10);
  EXPECT_DOUBLE_EQ(c.eval_s, 0.50);
  EXPECT_DOUBLE_EQ(c.checkpoint_s, 1.0);
  EXPECT_DOUBLE_EQ(c.start_s, 2.0);
  // 100 steps, evaluations at 25, 50, 75, 100, checkpoints at 50, 100 and final.h5, one start.
  const profile::RunParts p = table.remaining_parts(table.jobs[0], 0, true);
  EXPECT_DOUBLE_EQ(p.steps_s, 10.0);
  EXPECT_DOUBLE_EQ(p.evals_s, 2.0);
  EXPECT_DOUBLE_EQ(p.checkpoints_s, 3.0);
  EXPECT_DOUBLE_EQ(p.start_s, 2.0);
  EXPECT_DOUBLE_EQ(table.remaining_parts(table.jobs[0], 0, false).start_s, 0.0);
}

// One job measured configuration k1 to the end: the other job's k1 is priced by that (the same
// shape and configuration), its k2 by the profile, its steps scaled by its own correction.
TEST(JobCosts, MeasuredConfigurationsPriceOtherJobsOfTheSameShape) {
  const Workload w = two_jobs();
  const PlanningInput in = planning(w);
  JobTable table(w, in, {}, {});
  SegmentTimes t;
  t.setup_s = 0.5;
  t.steps_s = 20.0;  // 0.2 s a step: twice the profile's
  t.steps = 100;
  t.evals_s = 1.2;
  t.evals = 4;
  t.checkpoints_s = 0.9;
  t.checkpoints = 3;
  // The segment's wall time is 25 s: 3.9 s are its start (launch, set-up, reports).
  table.jobs[0].segments.push_back(segment(0, 10.0, 35.0, t));
  const Segment& s = table.jobs[0].segments.back();
  const profile::RunParts parts = s.parts(100.0);
  EXPECT_DOUBLE_EQ(parts.steps_s, 20.0);
  EXPECT_NEAR(parts.start_s, 25.0 - 20.0 - 1.2 - 0.9, 1e-12);

  const profile::UnitCosts k1 = table.costs(table.jobs[1], 0);
  EXPECT_DOUBLE_EQ(k1.step_s, 0.2);
  EXPECT_DOUBLE_EQ(k1.eval_s, 0.3);
  EXPECT_NEAR(k1.checkpoint_s, 0.3, 1e-12);
  EXPECT_NEAR(k1.start_s, 2.9, 1e-12);
  const profile::UnitCosts k2 = table.costs(table.jobs[1], 1);
  EXPECT_DOUBLE_EQ(k2.step_s, 0.10);  // job 1 has measured nothing: its correction is 1
  EXPECT_DOUBLE_EQ(k2.checkpoint_s, 1.0);
  EXPECT_DOUBLE_EQ(k2.start_s, 2.0);
}

// A running segment's progress: its steps so far price its configuration and correct the job's
// others; its start is not counted until the segment ends.
TEST(JobCosts, ProgressCorrectsTheJobsOtherConfigurations) {
  const Workload w = two_jobs();
  const PlanningInput in = planning(w);
  JobTable table(w, in, {}, {});
  JobState& js = table.jobs[1];
  js.config = 0;
  js.status = JobStatus::kRunning;
  Segment running;
  running.config = 0;
  running.start_s = 5.0;
  js.segments.push_back(running);
  Progress m;
  m.job = js.spec->id;
  // The first steps, whose first one pays the first touch of memory: too few to learn from.
  m.step = 4;
  m.times.steps_s = 0.9;
  m.times.steps = 4;
  table.record_progress(js, m);
  EXPECT_EQ(js.steps_done, 4);
  EXPECT_DOUBLE_EQ(js.correction, 1.0);
  EXPECT_DOUBLE_EQ(table.costs(js, 0).step_s, 0.10);
  m.step = 10;
  m.times.steps_s = 1.5;  // 0.15 s a step
  m.times.steps = 10;
  table.record_progress(js, m);
  EXPECT_EQ(js.steps_done, 10);
  EXPECT_DOUBLE_EQ(js.correction, 1.5);
  EXPECT_DOUBLE_EQ(table.costs(js, 0).step_s, 0.15);
  EXPECT_NEAR(table.costs(js, 1).step_s, 0.15, 1e-12);  // the profile's 0.1 x 1.5
  EXPECT_DOUBLE_EQ(table.costs(js, 0).start_s, 2.0);
  // The 90 steps left: evaluations at 25, 50, 75, 100 and checkpoints at 50, 100, final.h5.
  const profile::RunParts left = table.remaining_parts(js, 0, false);
  EXPECT_NEAR(left.steps_s, 90 * 0.15, 1e-9);
  EXPECT_DOUBLE_EQ(left.evals_s, 2.0);
  EXPECT_DOUBLE_EQ(left.checkpoints_s, 3.0);
}

}  // namespace
}  // namespace saturn::exec
