// The trial runner on 2 or 4 ranks with tiny models: trials on disjoint rank groups, reuse from
// the store (a second run tries nothing), learning-rate variants sharing one profile, a trial
// that runs out of memory failing alone, pruning, and the trials' schedule.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/profile/profiler.hpp"
#include "runtime/profile/util.hpp"
#include "runtime/workload/workload.hpp"
#include "solver/baselines.hpp"

namespace fs = std::filesystem;
using namespace saturn;
using namespace saturn::profile;

namespace {

// Two jobs that differ only in learning rate (and one seed), so they share one shape.
constexpr const char* kWorkload = R"(
name: profile-test
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 32, steps: 20, eval_every: 10, eval_batches: 1}
models:
  tiny: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 64}
jobs:
  - sweep: {model: [tiny], lr: [1e-3, 3e-3], batch_size: [8]}
strategies: [ddp, fsdp, pipeline, tensor]
)";

Workload workload() {
  LoadOptions lo;
  lo.check_data_files = false;
  return parse_workload(kWorkload, "profile-test.yaml", lo);
}

ProfileOptions quick_options(const fs::path& store) {
  ProfileOptions o;
  o.store = store;
  o.trials_per_degree = 1;
  o.calibration.quick = true;
  o.calibration.repeats = 1;
  o.calibration.window_s = 0.003;
  o.trial.warmup_steps = 1;
  o.trial.measure_steps = 1;
  return o;
}

// A store path every rank agrees on, fresh for this test.
fs::path store_path(comm::Communicator& world, const std::string& name) {
  const char* dir = std::getenv("SATURN_BINARY_DIR");
  const fs::path p = fs::path(dir ? dir : fs::temp_directory_path().string()) /
                     fmt::format("test-profiler-np{}-{}.h5", world.size(), name);
  if (world.rank() == 0) fs::remove(p);
  world.barrier();
  return p;
}

std::map<std::string, double> times(const ProfileResult& r, std::size_t job) {
  std::map<std::string, double> out;
  for (const auto& c : r.jobs.at(job).configs)
    out[fmt::format("{}@{}", c.strategy, c.devices)] = c.time_s;
  return out;
}

class Profiler : public ::testing::Test {
 protected:
  void SetUp() override { world_ = comm::MpiCommunicator::world(); }
  std::unique_ptr<comm::MpiCommunicator> world_;
};

}  // namespace

TEST_F(Profiler, TriesOnceReusesTheStoreAndSharesProfilesAcrossLearningRates) {
  const Workload w = workload();
  ASSERT_EQ(w.jobs.size(), 2u);
  ProfileRequest req;
  req.workload = &w;
  const fs::path store = store_path(*world_, "reuse");
  const ProfileOptions opt = quick_options(store);

  const ProfileResult first = profile_workload(req, *world_, opt);
  EXPECT_TRUE(first.stats.calibrated);
  EXPECT_EQ(first.stats.signatures, 1);  // both learning rates: one shape
  EXPECT_EQ(first.stats.jobs, 2);
  EXPECT_GT(first.stats.trials_run, 0);
  EXPECT_EQ(first.stats.trials_reused, 0);
  ASSERT_EQ(first.jobs.size(), 2u);
  EXPECT_EQ(times(first, 0), times(first, 1));  // same steps, same profile
  std::map<int, int> tried_per_degree;
  std::vector<double> ratios;
  for (const auto& row : first.rows) {
    EXPECT_EQ(row.jobs.size(), 2u);
    if (!row.tried_now) continue;
    EXPECT_TRUE(row.estimate.feasible) << row.config.label() << ": infeasible ones are not tried";
    ++tried_per_degree[row.config.degree];
    ASSERT_TRUE(row.measured && row.measured->feasible) << row.config.label();
    // The memory model mirrors the allocations.
    const double peak = static_cast<double>(row.measured->peak_device_bytes);
    EXPECT_NEAR(static_cast<double>(row.estimate.device_bytes), peak, 0.15 * peak)
        << row.config.label();
    EXPECT_GT(row.measured->step_s, 0);
    EXPECT_GT(row.measured->setup_s, 0) << row.config.label();
    // A group's synchronisation beside computing ranks (a checkpoint's collectives) is timed
    // where the node has such ranks; one rank waits for no one, a whole node has no neighbours.
    if (row.config.degree > 1 && row.config.degree < world_->size()) {
      EXPECT_GT(row.measured->sync_s, 0) << row.config.label();
    } else {
      EXPECT_EQ(row.measured->sync_s, 0) << row.config.label();
    }
    ratios.push_back(row.estimate.step_s / row.measured->step_s);
  }
  // The time model is of the right order on any machine (the median over the trials: one
  // trial of a few steps can lose a whole scheduler slice on a loaded node).
  ASSERT_FALSE(ratios.empty());
  EXPECT_GT(median(ratios), 0.1);
  EXPECT_LT(median(ratios), 10.0);
  for (const auto& [degree, n] : tried_per_degree)
    EXPECT_LE(n, opt.trials_per_degree) << "degree " << degree;
  // Every rank returns the same result.
  for (const auto& job : first.jobs)
    for (const auto& c : job.configs) {
      double t = c.time_s, lo = t, hi = t;
      world_->allreduce(&lo, 1, comm::ReduceOp::kMin);
      world_->allreduce(&hi, 1, comm::ReduceOp::kMax);
      EXPECT_EQ(lo, hi);
    }

  const ProfileResult second = profile_workload(req, *world_, opt);
  EXPECT_FALSE(second.stats.calibrated);
  EXPECT_EQ(second.stats.trials_run, 0);
  EXPECT_EQ(second.stats.trials_reused, first.stats.trials_run);
  for (std::size_t j = 0; j < first.jobs.size(); ++j)
    for (const auto& [label, t] : times(first, j)) {
      const auto& c = first.jobs[j].configs;
      const bool measured = std::any_of(c.begin(), c.end(), [&](const solver::Config& x) {
        return fmt::format("{}@{}", x.strategy, x.devices) == label && x.source == "trial";
      });
      if (measured) {
        EXPECT_DOUBLE_EQ(times(second, j).at(label), t) << label;
      }
    }

  // Planning elsewhere from the store alone gives the measured configurations their times.
  ProfileOptions plan_opt;
  plan_opt.store = store;
  const ProfileResult planned = profile_from_store(req, plan_opt);
  EXPECT_FALSE(planned.nominal_calibration);
  EXPECT_EQ(planned.hardware.id(), first.hardware.id());
  int from_trials = 0;
  for (const auto& c : planned.jobs.at(0).configs) {
    if (c.source != "trial") continue;
    ++from_trials;
    EXPECT_DOUBLE_EQ(c.time_s, times(second, 0).at(fmt::format("{}@{}", c.strategy, c.devices)));
  }
  EXPECT_GT(from_trials, 0);
}

TEST_F(Profiler, TrialOutOfMemoryMarksOnlyThatConfiguration) {
  const Workload w = workload();
  ProfileRequest req;
  req.workload = &w;
  ProfileOptions opt = quick_options(store_path(*world_, "oom"));
  // Try every configuration: which ones pruning keeps depends on timings, and this test needs
  // both a replica that does not fit and a sharded one that does to be tried, on any load.
  opt.trials_per_degree = 1000;
  opt.trial_window = 1e9;
  opt.dominance_margin = 1e9;
  // A device smaller than one whole replica but larger than a sharded one: ddp on one rank
  // must fail, fsdp over every rank must fit. The estimate does not know the limit (the
  // cluster states no memory), so both are tried for real.
  const Calibration cal = nominal_calibration();
  const JobSpec& job = w.jobs.front();
  const auto whole =
      estimate_cost(job.model, job.train, ConfigSpec{"ddp", {}, 1, 1}, cal).device_bytes;
  const auto sharded =
      estimate_cost(job.model, job.train, ConfigSpec{"fsdp", {}, world_->size(), 1}, cal)
          .device_bytes;
  ASSERT_LT(sharded, whole);
  opt.trial.resources.device_bytes = (whole + sharded) / 2;

  const ProfileResult r = profile_workload(req, *world_, opt);
  int failed = 0, fine = 0;
  for (const auto& row : r.rows) {
    if (!row.tried_now) continue;
    ASSERT_TRUE(row.measured);
    if (row.estimate.device_bytes > opt.trial.resources.device_bytes) {
      EXPECT_FALSE(row.measured->feasible) << row.config.label();
      EXPECT_NE(row.measured->reason.find("out of memory"), std::string::npos)
          << row.measured->reason;
      EXPECT_FALSE(row.in_problem) << row.config.label();
      ++failed;
    } else if (row.estimate.device_bytes < opt.trial.resources.device_bytes * 9 / 10) {
      EXPECT_TRUE(row.measured->feasible) << row.config.label() << ": " << row.measured->reason;
      ++fine;
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(fine, 0);
  EXPECT_EQ(r.stats.trials_failed, failed);
  for (const auto& job_configs : r.details)
    for (const auto& d : job_configs)
      if (d.measured) {
        EXPECT_TRUE(d.measured->feasible);
      }

  // With no limit the next run tries the failed ones again (they may fit now).
  ProfileOptions again = opt;
  again.trial.resources.device_bytes = 0;
  const ProfileResult r2 = profile_workload(req, *world_, again);
  EXPECT_EQ(r2.stats.trials_run, failed);
  EXPECT_EQ(r2.stats.trials_failed, 0);
}

TEST_F(Profiler, ProbesAreKeptWithTheCalibrationAndNotRepeated) {
  const Workload w = workload();
  ProfileRequest req;
  req.workload = &w;
  int calls = 0;  // this rank's calls of the write probe
  const WriteRates fake{1e-3, 5e8, 2e-4};
  req.measure_checkpoint_writes = [&] {
    ++calls;
    return fake;
  };
  req.checkpoint_file_system = "fs-test";
  const ProfileOptions opt = quick_options(store_path(*world_, "probes"));
  const auto calls_on_all_ranks = [&] {
    int n = calls;
    world_->allreduce(&n, 1, comm::ReduceOp::kSum);
    return n;
  };

  const ProfileResult first = profile_workload(req, *world_, opt);
  EXPECT_EQ(calls_on_all_ranks(), 1);
  EXPECT_DOUBLE_EQ(first.checkpoint_writes.bytes_per_s, fake.bytes_per_s);
  ASSERT_EQ(first.calibration.checkpoint_writes.count("fs-test"), 1u);
  EXPECT_DOUBLE_EQ(first.calibration.checkpoint_writes.at("fs-test").latency_s, fake.latency_s);
  for (const auto& row : first.rows)
    if (row.tried_now && row.config.degree > 1 && row.config.degree < world_->size()) {
      ASSERT_EQ(first.calibration.contended_sync_s.count(row.config.degree), 1u);
      EXPECT_DOUBLE_EQ(first.calibration.contended_sync_s.at(row.config.degree),
                       row.measured->sync_s);
    }

  // The next run on this hardware (its calibration from the store) prices checkpoints on that
  // file system without probing; another file system is probed once.
  const ProfileResult second = profile_workload(req, *world_, opt);
  EXPECT_EQ(calls_on_all_ranks(), 1);
  EXPECT_DOUBLE_EQ(second.checkpoint_writes.bytes_per_s, fake.bytes_per_s);
  EXPECT_DOUBLE_EQ(second.checkpoint_writes.dataset_s, fake.dataset_s);
  req.checkpoint_file_system = "fs-other";
  const ProfileResult third = profile_workload(req, *world_, opt);
  EXPECT_EQ(calls_on_all_ranks(), 2);
  EXPECT_EQ(third.calibration.checkpoint_writes.size(), 2u);

  // A synchronisation wait known already is what the trials report, not probed again.
  if (world_->size() > 2) {
    const JobSpec& job = w.jobs.front();
    TrialRequest t{job.model, job.train, ConfigSpec{"ddp", {}, 2, 1}};
    TrialOptions o = opt.trial;
    o.contended_sync_s[2] = 0.125;
    RankTopology one;
    one.nodes.emplace_back();
    for (int r = 0; r < world_->size(); ++r) one.nodes[0].push_back(r);
    TrialRunStats stats;
    const auto m = run_trials({t}, one, *world_, o, &stats);
    ASSERT_TRUE(m.at(0).feasible) << m.at(0).reason;
    EXPECT_DOUBLE_EQ(m.at(0).sync_s, 0.125);
    EXPECT_DOUBLE_EQ(stats.contended_sync_s.at(2), 0.125);
  }
}

namespace {

// Schedule items of these degrees (one node unless `nodes`) and expected seconds.
std::vector<ScheduleItem> items_of(const std::vector<std::pair<int, double>>& degree_seconds,
                                   int nodes = 1) {
  std::vector<ScheduleItem> t;
  for (const auto& [degree, seconds] : degree_seconds)
    t.push_back({ConfigSpec{"ddp", {}, degree, nodes}, seconds, false});
  return t;
}

// No rank runs two items at once, and each item has its degree in distinct ranks.
void expect_no_rank_overlap(const std::vector<ScheduleItem>& t, const std::vector<Placement>& s) {
  for (const auto& p : s) {
    EXPECT_EQ(static_cast<int>(p.ranks.size()), t[p.item].config.degree);
    EXPECT_EQ(std::set<int>(p.ranks.begin(), p.ranks.end()).size(), p.ranks.size());
    for (const auto& q : s) {
      if (&p == &q || q.start_s >= p.end_s - 1e-9 || p.start_s >= q.end_s - 1e-9) continue;
      for (int r : p.ranks)
        EXPECT_EQ(std::count(q.ranks.begin(), q.ranks.end(), r), 0)
            << "rank " << r << " runs items " << p.item << " and " << q.item << " at once";
    }
  }
}

double span(const std::vector<Placement>& s) {
  double end = 0;
  for (const auto& p : s) end = std::max(end, p.end_s);
  return end;
}

}  // namespace

TEST(TrialPlacement, ExpectedTrialLengthFromTheEstimates) {
  TrialRequest t;
  t.config = ConfigSpec{"ddp", {}, 1, 1};
  t.est_step_s = 0.25;
  t.est_eval_s = 0.1;
  const TrialOptions o;  // set-up (a step) + 1 warm-up + 1 timed step + one evaluation
  EXPECT_DOUBLE_EQ(expected_trial_s(t, o), 0.85);
  TrialOptions window = o;  // steps shorter than the timed window: as many as fill it
  window.min_timed_s = 1.0;
  EXPECT_DOUBLE_EQ(expected_trial_s(t, window), (1 + 1 + 4) * 0.25 + 0.1);
  TrialOptions capped;
  capped.time_limit_s = 0.2;
  EXPECT_DOUBLE_EQ(expected_trial_s(t, capped), 0.2);
}

TEST(TrialPlacement, ListSchedulesEachSizeByExpectedLength) {
  RankTopology one;
  one.nodes = {{0, 1, 2, 3}};
  // A whole-node trial, two 2-rank trials, six 1-rank trials: one stage per size, widest first.
  const auto t = items_of(
      {{1, 1.0}, {2, 0.5}, {1, 0.5}, {2, 0.4}, {1, 0.5}, {4, 0.3}, {1, 0.5}, {1, 0.25}, {1, 0.25}});
  const auto s = schedule_trials(t, one, false);
  // Every stage has all ranks busy from its start: no replicas (the gaps at their ends are
  // left to ballast).
  ASSERT_EQ(s.size(), t.size());
  expect_no_rank_overlap(t, s);
  for (std::size_t k = 1; k < s.size(); ++k) {
    EXPECT_LE(s[k - 1].start_s, s[k].start_s);
    EXPECT_LE(s[k - 1].stage, s[k].stage);
  }
  EXPECT_EQ(s.front().item, 5u);
  EXPECT_EQ(s.front().ranks, (std::vector<int>{0, 1, 2, 3}));
  for (const auto& p : s) {
    // Stages do not overlap: 4 ranks [0, 0.3), 2 ranks [0.3, 0.8), 1 rank from 0.8.
    const int degree = t[p.item].config.degree;
    EXPECT_EQ(p.stage, degree == 4 ? 0 : degree == 2 ? 1 : 2);
    if (degree == 2) {
      EXPECT_NEAR(p.start_s, 0.3, 1e-9);
    }
    if (degree == 1) {
      EXPECT_GE(p.start_s, 0.8 - 1e-9);
    }
  }
  // The 1-rank stage: the long trial on one rank, the 0.5 s ones on the other three, the two
  // short ones after them on two ranks: 1.0 s, where rounds of four would take 1.0 + 0.25.
  EXPECT_NEAR(span(s), 0.3 + 0.5 + 1.0, 1e-9);

  // Serialized: one after another, nothing beside anything.
  const auto ser = schedule_trials(t, one, true);
  ASSERT_EQ(ser.size(), t.size());
  for (std::size_t k = 1; k < ser.size(); ++k) EXPECT_GE(ser[k].start_s, ser[k - 1].end_s - 1e-9);
  EXPECT_NEAR(span(ser), 4.2, 1e-9);
}

TEST(TrialPlacement, ProbesRunTogetherAfterTheTrials) {
  RankTopology one;
  one.nodes = {{0, 1, 2, 3}};
  // Two 2-rank trials, one 1-rank trial, a 2-rank probe and a 1-rank one: the probes start
  // together when the single-rank trial has ended.
  auto t = items_of({{2, 0.5}, {2, 0.5}, {1, 1.0}, {2, 0.1}, {1, 0.2}});
  t[3].probe = t[4].probe = true;
  const auto s = schedule_trials(t, one, false);
  expect_no_rank_overlap(t, s);
  // The single-rank trial's stage leaves three ranks idle: three replicas of it; probes have none.
  ASSERT_EQ(s.size(), 8u);
  int replicas = 0;
  for (const auto& p : s) {
    if (t[p.item].probe) {
      EXPECT_FALSE(p.replica);
      EXPECT_EQ(p.stage, 2);
      EXPECT_NEAR(p.start_s, 1.5, 1e-9);
    }
    if (p.replica) {
      ++replicas;
      EXPECT_EQ(p.item, 2u);
      EXPECT_EQ(p.stage, 1);
      EXPECT_NEAR(p.start_s, 0.5, 1e-9);
    }
  }
  EXPECT_EQ(replicas, 3);
  EXPECT_NEAR(span(s), 1.7, 1e-9);
}

TEST(TrialPlacement, RanksIdleFromAStagesStartRunReplicas) {
  RankTopology one;
  one.nodes = {{0, 1, 2, 3, 4}};
  // Two 2-rank trials (1 s, 0.4 s), then one 1-rank trial. The fifth rank cannot hold a 2-rank
  // replica, and the 0.4 s trial's ranks, free from 0.4 s, get none (a gap at a stage's end is
  // left to ballast); the 1-rank stage's four idle ranks each run a replica.
  const auto t = items_of({{2, 1.0}, {2, 0.4}, {1, 0.3}});
  const auto s = schedule_trials(t, one, false);
  expect_no_rank_overlap(t, s);
  std::map<std::size_t, int> runs;
  for (const auto& p : s) {
    ++runs[p.item];
    if (p.replica) {
      EXPECT_EQ(p.item, 2u);
      EXPECT_NEAR(p.start_s, 1.0, 1e-9);
      EXPECT_EQ(p.stage, 1);
    }
  }
  EXPECT_EQ(runs[0], 1);
  EXPECT_EQ(runs[1], 1);
  EXPECT_EQ(runs[2], 5);
  EXPECT_NEAR(span(s), 1.3, 1e-9);
  // Serialized: no replicas.
  EXPECT_EQ(schedule_trials(t, one, true).size(), 3u);
}

TEST(TrialPlacement, MultiNodeTrialsTakeWholeNodesAndBadFitsThrow) {
  RankTopology two;
  two.nodes = {{0, 1}, {2, 3}};
  const auto m = items_of({{4, 1.0}, {2, 0.5}}, 2);
  auto mixed = m;
  mixed[1].config.nodes = 1;
  const auto s = schedule_trials(mixed, two, false);
  ASSERT_EQ(s.size(), 3u);  // the 2-rank trial on one node, its replica on the other
  EXPECT_EQ(s[0].ranks, (std::vector<int>{0, 1, 2, 3}));
  for (std::size_t k = 1; k < 3; ++k) {
    EXPECT_EQ(s[k].item, 1u);
    EXPECT_EQ(s[k].ranks.size(), 2u);
    EXPECT_NEAR(s[k].start_s, 1.0, 1e-9);
  }
  EXPECT_EQ(s[1].replica + s[2].replica, 1);
  const auto big = items_of({{3, 1.0}});
  EXPECT_FALSE(two.fits(big[0].config));
  EXPECT_THROW(schedule_trials(big, two, false), Error);
}

TEST_F(Profiler, TrialTimeLimitKeepsTheStepsMeasuredSoFar) {
  const Workload w = workload();
  const JobSpec& job = w.jobs.front();
  const TrialRequest trial{job.model, job.train, ConfigSpec{"ddp", {}, world_->size(), 1}};
  TrialOptions o;
  o.measure_steps = 3;

  // No limit: every timed step, no remark.
  o.warmup_steps = 1;
  o.time_limit_s = 0;
  o.min_timed_s = 0;
  Measurement m = run_one_trial(trial, *world_, o);
  ASSERT_TRUE(m.feasible) << m.reason;
  EXPECT_EQ(m.steps, 3);
  EXPECT_TRUE(m.reason.empty()) << m.reason;

  // Steps too short for the timed window: more of them, up to the cap.
  o.min_timed_s = 1e6;
  o.max_timed_steps = 5;
  m = run_one_trial(trial, *world_, o);
  ASSERT_TRUE(m.feasible) << m.reason;
  EXPECT_EQ(m.steps, 5);
  o.min_timed_s = 0;

  // Over the limit after the first timed step: that step is the measurement.
  o.warmup_steps = 0;
  o.time_limit_s = 1e-9;
  m = run_one_trial(trial, *world_, o);
  ASSERT_TRUE(m.feasible) << m.reason;
  EXPECT_EQ(m.steps, 1);
  EXPECT_GT(m.step_s, 0);
  EXPECT_NE(m.reason.find("after 1 of 3 timed steps"), std::string::npos) << m.reason;
  // ... or stopped while the timed window added steps beyond those asked for.
  TrialOptions window = o;
  window.measure_steps = 1;
  window.min_timed_s = 1e6;
  m = run_one_trial(trial, *world_, window);
  EXPECT_EQ(m.steps, 1);
  EXPECT_NE(m.reason.find("after 1 timed step(s) of up to 5"), std::string::npos) << m.reason;

  // Over the limit during warm-up: the warm-up step stands in, and the reason says so.
  o.warmup_steps = 2;
  m = run_one_trial(trial, *world_, o);
  ASSERT_TRUE(m.feasible) << m.reason;
  EXPECT_EQ(m.steps, 1);
  EXPECT_GT(m.step_s, 0);
  EXPECT_NE(m.reason.find("during warm-up"), std::string::npos) << m.reason;
}

// Current practice (the paper's baseline) runs every job with the hand-picked strategy on the
// whole node: that configuration is tried and offered even where pruning would not try it
// (here: nothing else of that size may be tried) or the Pareto front would drop it.
TEST_F(Profiler, CurrentPracticeConfigurationIsTriedAndOffered) {
  const Workload w = workload();
  ProfileRequest req;
  req.workload = &w;
  ProfileOptions opt = quick_options(store_path(*world_, "current-practice"));
  opt.trials_per_degree = 0;  // prune every other configuration
  opt.current_practice = "fsdp";
  const int n = world_->size();
  const ProfileResult r = profile_workload(req, *world_, opt);
  int tried = 0;
  for (const auto& row : r.rows) {
    const bool cp = row.config.strategy == "fsdp" && row.config.knobs.empty() &&
                    row.config.degree == n && row.config.nodes == 1;
    if (!cp) {
      EXPECT_FALSE(row.tried_now) << row.config.label() << "@" << row.config.degree;
      continue;
    }
    ++tried;
    EXPECT_TRUE(row.tried_now);
    EXPECT_TRUE(row.in_problem);
    EXPECT_NE(row.status.find("current practice"), std::string::npos) << row.status;
  }
  EXPECT_EQ(tried, 1);  // one shape
  for (const auto& job : r.jobs) {
    const bool offered = std::any_of(job.configs.begin(), job.configs.end(), [&](const auto& c) {
      return c.strategy == "fsdp" && c.devices == n && c.source == "trial";
    });
    EXPECT_TRUE(offered) << job.id;
  }
  // And the baseline runs it.
  solver::Problem p;
  p.cluster = solver::parse_cluster_spec(fmt::format("1x{}", n));
  p.jobs = r.jobs;
  const solver::Plan plan = solver::baseline_plan(p, solver::Baseline::current_practice);
  for (std::size_t j = 0; j < p.jobs.size(); ++j)
    EXPECT_EQ(p.jobs[j].configs.at(static_cast<std::size_t>(plan.jobs[j].config)).strategy, "fsdp");
}
