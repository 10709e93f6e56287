#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
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
  b.restore(a.to_json());
  for (int j = 0; j < 4; ++j) {
    EXPECT_EQ(b.stopped(j), a.stopped(j));
    EXPECT_EQ(b.waiting(j), a.waiting(j));
    EXPECT_EQ(b.pause_step(j), a.pause_step(j));
  }
  EXPECT_EQ(b.to_json(), a.to_json());
  SelectionSettings other = settings("asha");
  Selection c(other, ids(4));
  EXPECT_THROW(c.restore(a.to_json()), InputError);
}

}  // namespace
}  // namespace saturn::exec
