#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/exec/early_stop.hpp"
#include "runtime/exec/job_table.hpp"
#include "runtime/exec/selection.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {
namespace {

std::string error_of_parse(const std::string& yaml) {
  LoadOptions no_data;
  no_data.check_data_files = false;
  try {
    parse_workload(yaml, "/tmp/w.yaml", no_data);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

Workload parse(const std::string& yaml) {
  LoadOptions no_data;
  no_data.check_data_files = false;
  return parse_workload(yaml, "/tmp/w.yaml", no_data);
}

const std::string kBase = R"(name: sel
data: {train: t.bin, val: v.bin}
defaults: {seq_len: 16, steps: 32, eval_every: 4, batch_size: 4}
models:
  m: {arch: gpt2, n_layer: 1, n_head: 1, d_model: 8}
jobs:
  - sweep: {model: m, lr: [1e-3, 2e-3, 3e-3, 4e-3]}
)";

// The base workload with `extra` appended (fmt: GCC 12 warns falsely on std::string's +).
std::string with(const char* extra) {
  return fmt::format("{}{}", kBase, extra);
}

TEST(SelectionWorkload, DefaultsAndRungs) {
  const Workload w = parse(with("selection: {method: successive-halving, max_rungs: 2}\n"));
  EXPECT_EQ(w.selection.method, "successive-halving");
  EXPECT_EQ(w.selection.metric, "val_loss");
  EXPECT_EQ(w.selection.min_steps, 4);  // the jobs' eval_every
  EXPECT_EQ(w.selection.reduction_factor, 3);
  EXPECT_EQ(w.selection.rung_steps(), (std::vector<std::int64_t>{4, 12}));
  EXPECT_FALSE(parse(kBase).selection.enabled());
}

TEST(SelectionWorkload, ErrorsWithLine) {
  const auto expect_error = [](const char* extra, const std::string& part) {
    const std::string msg = error_of_parse(with(extra));
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  // The default 3 rungs at 4, 12, 36: the last is past the jobs' 32 steps.
  expect_error("selection: {method: asha}\n",
               "/tmp/w.yaml:8:12: selection.min_steps: the last rung, step 36, is not below");
  expect_error("selection: {method: hyperband}\n",
               "/tmp/w.yaml:8:21: selection.method: unknown value 'hyperband'");
  expect_error("selection: {method: asha, min_steps: 6, max_rungs: 1}\n",
               "/tmp/w.yaml:8:38: selection.min_steps: rung step 6 is not a multiple of job");
  expect_error("selection: {method: asha, reduction_factor: 1}\n",
               "selection.reduction_factor: 1 is out of range (valid: 2..1000)");
  expect_error("selection: {metric: val_loss}\n", "selection.method: missing");
  expect_error("selection: {method: asha, metric: loss, max_rungs: 1}\n",
               "selection.metric: unknown value 'loss'");
  EXPECT_EQ(error_of_parse(with("selection: {method: asha, reduction_factor: 2}\n")), "");
}

SelectionSettings settings(const std::string& method) {
  SelectionSettings s;
  s.method = method;
  s.min_steps = 4;
  s.reduction_factor = 2;
  s.max_rungs = 3;
  return s;
}

std::vector<std::string> ids(int n) {
  std::vector<std::string> v;
  for (int i = 0; i < n; ++i) v.push_back(fmt::format("j{}", i));
  return v;
}

TEST(SuccessiveHalving, WaitsForTheRungThenKeepsTheBestHalf) {
  Selection s(settings("successive-halving"), ids(4));
  EXPECT_EQ(s.rung_steps(), (std::vector<std::int64_t>{4, 8, 16}));
  EXPECT_EQ(s.pause_step(0), 4);
  s.arrive(0, 3.0);
  s.arrive(1, 1.0);
  s.arrive(2, 2.0);
  EXPECT_TRUE(s.decide().empty());  // job 3 can still reach rung 0
  s.arrive(3, NAN);                 // missing: ranks last
  const auto d = s.decide();
  ASSERT_EQ(d.size(), 4u);
  int promoted = 0;
  for (const auto& x : d) {
    EXPECT_EQ(x.rung, 0);
    EXPECT_EQ(x.compared, 4);
    EXPECT_EQ(x.kept, 2);
    if (x.promoted) ++promoted;
    EXPECT_EQ(x.promoted, x.job == 1 || x.job == 2) << x.job;
  }
  EXPECT_EQ(promoted, 2);
  EXPECT_TRUE(s.stopped(0));
  EXPECT_TRUE(s.stopped(3));
  EXPECT_EQ(s.pause_step(1), 8);
  EXPECT_EQ(s.pause_step(0), 0);
  // Rung 1: a tie goes to the job earlier in the
  // workload; one of two goes on.
  s.arrive(2, 0.5);
  s.arrive(1, 0.5);
  const auto d1 = s.decide();
  ASSERT_EQ(d1.size(), 2u);
  EXPECT_TRUE(d1[0].promoted);
  EXPECT_EQ(d1[0].job, 1);
  EXPECT_FALSE(d1[1].promoted);
  EXPECT_EQ(d1[1].job, 2);
  // Rung 2 has one job: it goes on (at least one survives
  // every rung).
  s.arrive(1, 0.4);
  const auto d2 = s.decide();
  ASSERT_EQ(d2.size(), 1u);
  EXPECT_TRUE(d2[0].promoted);
  EXPECT_EQ(s.pause_step(1),
            0);  // past every rung: runs to its end
}

TEST(SuccessiveHalving, AFailedJobDoesNotHoldTheRung) {
  Selection s(settings("successive-halving"), ids(3));
  s.arrive(0, 1.0);
  s.arrive(1, 2.0);
  EXPECT_TRUE(s.decide().empty());
  s.withdraw(2);
  const auto d = s.decide();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].promoted);
  EXPECT_EQ(d[0].job, 0);
  EXPECT_FALSE(d[1].promoted);
}

TEST(Asha, PromotesWithoutWaitingForTheRung) {
  Selection s(settings("asha"), ids(4));
  s.arrive(0, 2.0);
  EXPECT_TRUE(s.decide().empty());  // floor(1/2) = 0 may go on yet
  s.arrive(1, 1.0);
  auto d = s.decide();  // floor(2/2) = 1: the best of the
                        // two, job 1, at once
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].job, 1);
  EXPECT_TRUE(d[0].promoted);
  EXPECT_TRUE(s.waiting(0));
  s.arrive(2, 3.0);
  EXPECT_TRUE(s.decide().empty());  // floor(3/2) = 1, taken
  s.arrive(3, 0.5);                 // rung complete: floor(4/2) = 2 ->
                                    // jobs 3 and 1 (1 already)
  d = s.decide();
  ASSERT_EQ(d.size(), 3u);
  for (const auto& x : d) EXPECT_EQ(x.promoted, x.job == 3) << x.job;
  EXPECT_TRUE(s.stopped(0));
  EXPECT_TRUE(s.stopped(2));
}

TEST(Selection, RestoreKeepsEveryDecision) {
  Selection a(settings("successive-halving"), ids(4));
  for (int j = 0; j < 4; ++j) a.arrive(j, 4.0 - j);
  a.decide();
  a.arrive(3, 0.1);
  Selection b(settings("successive-halving"), ids(4));
  b.restore(a.to_json(), "run_state.json");
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(b.stopped(j), a.stopped(j));
    EXPECT_EQ(b.waiting(j), a.waiting(j));
    EXPECT_EQ(b.pause_step(j), a.pause_step(j));
  }
  EXPECT_EQ(b.to_json(), a.to_json());
  SelectionSettings other = settings("asha");
  Selection c(other, ids(4));
  EXPECT_THROW(c.restore(a.to_json(), "run_state.json"), InputError);
}

// A failed job's withdrawal is a decision like the others: --resume keeps it, or the restored
// rule waits at its next rung for a job that will never come.
TEST(Selection, RestoreKeepsAWithdrawal) {
  Selection a(settings("successive-halving"), ids(3));
  a.withdraw(2);  // failed before its first rung
  a.arrive(0, 1.0);
  a.arrive(1, 2.0);
  ASSERT_EQ(a.decide().size(), 2u);  // rung 0 over jobs 0 and 1: job 0 goes on
  Selection b(settings("successive-halving"), ids(3));
  b.restore(a.to_json(), "run_state.json");
  EXPECT_TRUE(b.withdrawn(2));
  b.arrive(0, 0.5);  // rung 1: job 0 alone, with job 2 out of selection
  const auto d = b.decide();
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].promoted);
  EXPECT_EQ(d[0].job, 0);
}

// A malformed saved state is an input error naming the file and the field.
TEST(Selection, RestoreNamesTheFileAndTheField) {
  Selection a(settings("successive-halving"), ids(4));
  for (int j = 0; j < 4; ++j) a.arrive(j, 4.0 - j);
  a.decide();
  const auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json state = a.to_json();
    edit(state);
    Selection b(settings("successive-halving"), ids(4));
    try {
      b.restore(state, "/r/run_state.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const auto expect = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find("/r/run_state.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expect(error_of([](nlohmann::json& s) { s["jobs"]["j1"]["level"] = "x"; }),
         "selection.jobs.j1.level must be an integer 0");
  expect(error_of([](nlohmann::json& s) { s["jobs"]["j1"]["level"] = 7; }),
         "selection.jobs.j1.level");
  expect(error_of([](nlohmann::json& s) { s["jobs"]["j0"].erase("stopped"); }),
         "selection.jobs.j0.stopped is missing");
  expect(error_of([](nlohmann::json& s) { s["jobs"]["j0"]["metrics"] = {"a"}; }),
         "selection.jobs.j0.metrics must be an array of numbers or null");
  expect(error_of([](nlohmann::json& s) { s["jobs"]["j0"]["metrics"] = nlohmann::json::array(); }),
         "selection.jobs.j0 is inconsistent");
  expect(error_of([](nlohmann::json& s) { s["jobs"] = 3; }), "selection.jobs must be an object");
  expect(error_of([](nlohmann::json& s) { s["rungs"] = "8"; }), "selection.rungs must be");
  expect(error_of([](nlohmann::json& s) { s["jobs"]["nope"] = s["jobs"]["j0"]; }), "no job 'nope'");
  EXPECT_EQ(error_of([](nlohmann::json&) {}), "");
}

// The coordinator's table: a job promoted at a rung is not dispatched on the devices of the
// plan before its rung; a plan must place it first.
TEST(JobTable, APromotedJobWaitsForAPlanThatPlacesIt) {
  const Workload w = parse(kBase);
  JobTable t(w, PlanningInput{}, {}, {});
  JobState& js = t.jobs[0];
  js.status = JobStatus::kPending;
  JobTable::place(js, 0, {0, 1}, 0, 10);
  EXPECT_TRUE(JobTable::dispatchable(js));
  js.held = true;  // waits at its rung, its plan entry stale
  EXPECT_FALSE(JobTable::dispatchable(js));
  JobTable::promote(js, 12);
  EXPECT_EQ(js.pause_step, 12);
  EXPECT_FALSE(JobTable::dispatchable(js));  // old devices, old start: not yet
  JobTable::place(js, 1, {2}, 20, 30);
  EXPECT_TRUE(JobTable::dispatchable(js));
  EXPECT_EQ(js.devices, std::vector<int>{2});
}

// The progress ETA counts only jobs that will still run: stopped, cancelled, failed, finished
// jobs and jobs held at a rung keep planned ends that no longer happen.
TEST(JobTable, EtaCountsOnlyJobsThatStillRun) {
  const Workload w = parse(kBase);
  JobTable t(w, PlanningInput{}, {}, {});
  const JobStatus statuses[] = {JobStatus::kRunning, JobStatus::kStopped, JobStatus::kCancelled,
                                JobStatus::kPending};
  const double ends[] = {50, 500, 400, 300};
  for (std::size_t j = 0; j < 4; ++j) {
    t.jobs[j].status = statuses[j];
    t.jobs[j].planned_end_s = ends[j];
  }
  t.jobs[3].held = true;
  EXPECT_DOUBLE_EQ(t.eta_s(10), 40);
  t.jobs[3].held = false;  // promoted and placed: it will run
  EXPECT_DOUBLE_EQ(t.eta_s(10), 290);
  for (auto& js : t.jobs) js.status = JobStatus::kFinished;
  EXPECT_DOUBLE_EQ(t.eta_s(10), 0);
}

// ---- early_stop ----

TEST(EarlyStopWorkload, PerJobAndInDefaults) {
  const Workload w = parse(
      "name: es\n"
      "data: {train: t.bin, val: v.bin}\n"
      "defaults: {seq_len: 16, steps: 32, eval_every: 4, batch_size: 4, early_stop: {diverged: "
      "true}}\n"
      "models:\n  m: {arch: gpt2, n_layer: 1, n_head: 1, d_model: 8}\n"
      "jobs:\n"
      "  - {model: m, lr: 1e-3}\n"
      "  - {model: m, lr: 2e-3, early_stop: {patience: 3}}\n"
      "  - {model: m, lr: 3e-3, early_stop: {diverged: false}}\n");
  EXPECT_TRUE(w.jobs[0].train.early_stop.diverged);
  EXPECT_EQ(w.jobs[0].train.early_stop.patience, 0);
  EXPECT_TRUE(w.jobs[1].train.early_stop.diverged);  // defaults', plus its own patience
  EXPECT_EQ(w.jobs[1].train.early_stop.patience, 3);
  EXPECT_FALSE(w.jobs[2].train.early_stop.enabled());
  EXPECT_FALSE(parse(kBase).jobs[0].train.early_stop.enabled());
}

TEST(EarlyStopWorkload, ErrorsWithLineAndValidValues) {
  const auto expect_error = [](const char* extra_defaults, const std::string& part) {
    const std::string yaml = fmt::format(
        "name: es\ndata: {{train: t.bin, val: v.bin}}\n"
        "defaults: {{seq_len: 16, steps: 32, batch_size: 4, {}}}\n"
        "models:\n  m: {{arch: gpt2, n_layer: 1, n_head: 1, d_model: 8}}\n"
        "jobs:\n  - {{model: m, lr: 1e-3}}\n",
        extra_defaults);
    const std::string msg = error_of_parse(yaml);
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  };
  expect_error("eval_every: 4, early_stop: {diverged: yes}",
               "/tmp/w.yaml:3:89: defaults.early_stop.diverged: expected true or false");
  expect_error("eval_every: 4, early_stop: {patience: -1}",
               "defaults.early_stop.patience: -1 is out of range (valid: an integer 1..");
  expect_error("eval_every: 4, early_stop: {patiense: 2}",
               "defaults.early_stop.patiense: unknown key");
  expect_error("eval_every: 4, early_stop: {patiense: 2}", "patience");  // the suggestion
  expect_error("early_stop: {patience: 2}",
               "defaults.early_stop.patience: patience 2 counts evaluations, but job");
}

TEST(EarlyStopRule, DivergedOnNonFiniteOrPastTwiceTheFirstLoss) {
  EarlyStopConfig c;
  c.diverged = true;
  EarlyStopRule r(c);
  EXPECT_FALSE(r.observe(1, 5.0, std::nullopt));  // the first loss: 5, limit 10
  EXPECT_FALSE(r.observe(2, 9.9, std::nullopt));
  EXPECT_FALSE(r.observe(3, 10.0, 10.0));  // not above the limit
  const auto hit = r.observe(4, 10.5, std::nullopt);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->rule, "diverged");
  EXPECT_EQ(hit->step, 4);
  EXPECT_EQ(hit->metric, "loss");
  EXPECT_DOUBLE_EQ(hit->reference, 10.0);
  EXPECT_FALSE(r.observe(5, 100.0, std::nullopt));  // fired once: says nothing more

  EarlyStopRule v(c);
  v.observe(1, 5.0, std::nullopt);
  const auto val_hit = v.observe(2, 4.0, NAN);
  ASSERT_TRUE(val_hit);
  EXPECT_EQ(val_hit->metric, "val_loss");
  EXPECT_TRUE(std::isnan(val_hit->value));
  const EarlyStopHit back = EarlyStopHit::from_json(val_hit->to_json());  // NaN as "nan"
  EXPECT_TRUE(std::isnan(back.value));
  EXPECT_EQ(back.describe(), val_hit->describe());

  EarlyStopRule inf(c);
  const auto inf_hit = inf.observe(1, INFINITY, std::nullopt);
  ASSERT_TRUE(inf_hit);
  EXPECT_EQ(inf_hit->metric, "loss");

  EarlyStopConfig off;
  EarlyStopRule none(off);
  EXPECT_FALSE(none.observe(1, NAN, NAN));
}

TEST(EarlyStopRule, PatienceCountsEvaluationsWithoutANewBest) {
  EarlyStopConfig c;
  c.patience = 2;
  EarlyStopRule r(c);
  EXPECT_FALSE(r.observe(4, 5, 3.0));           // best 3.0
  EXPECT_FALSE(r.observe(5, 5, std::nullopt));  // not an evaluation
  EXPECT_FALSE(r.observe(8, 5, 3.0));           // equal is no improvement: 1
  EXPECT_FALSE(r.observe(12, 5, 2.5));          // new best: 0
  EXPECT_FALSE(r.observe(16, 5, 2.6));          // 1
  const auto hit = r.observe(20, 5, 2.7);       // 2: stop
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->rule, "patience");
  EXPECT_EQ(hit->step, 20);
  EXPECT_DOUBLE_EQ(hit->value, 2.7);
  EXPECT_DOUBLE_EQ(hit->reference, 2.5);
  EXPECT_EQ(hit->best_step, 12);
  EXPECT_FALSE(EarlyStopRule(c).observe(4, 1e9, 1.0));  // patience alone ignores divergence
}

// Earlier segments' steps (metrics.jsonl) carry patience and the first loss across a re-plan,
// a rung or --resume; lines at or past the segment's first step do not count, and a step
// written twice counts once (its later line).
TEST(EarlyStopRule, ReplaysMetricsOfEarlierSegments) {
  EarlyStopConfig c;
  c.patience = 2;
  c.diverged = true;
  EarlyStopRule r(c);
  r.replay(
      "{\"step\": 1, \"loss\": 4.0}\n"
      "{\"step\": 4, \"loss\": 3.0, \"val_loss\": 2.0}\n"
      "{\"step\": 8, \"loss\": 3.0, \"val_loss\": 9.0}\n"
      "{\"step\": 8, \"loss\": 3.0, \"val_loss\": 2.5}\n"
      "{\"step\": 12, \"loss\": 3.0, \"val_loss\": 1.0}\n"
      "{\"step\": 13, \"lo",
      12);
  // Best 2.0 (step 4), one evaluation without a better one (step 8: 2.5): the next stops.
  const auto hit = r.observe(12, 3.0, 2.1);
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->rule, "patience");
  EXPECT_EQ(hit->best_step, 4);
  EarlyStopRule d(c);
  d.replay("{\"step\": 1, \"loss\": 4.0}\n", 5);
  const auto div = d.observe(5, 8.5, std::nullopt);  // above 2 x step 1's 4.0
  ASSERT_TRUE(div);
  EXPECT_EQ(div->rule, "diverged");
}

}  // namespace
}  // namespace saturn::exec
