// Which configurations the profiler would try and which it offers the solver, decided from the
// analytic model alone (profile_from_store: no MPI, no trials, nominal calibration).
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "runtime/core/error.hpp"
#include "runtime/profile/profiler.hpp"
#include "runtime/workload/workload.hpp"

using namespace saturn;
using namespace saturn::profile;

namespace {

constexpr const char* kWorkload = R"(
name: pruning
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 64, steps: 100}
models:
  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 128}
  llama: {arch: llama, n_layer: 2, n_head: 4, d_model: 128, d_ff: 344}
jobs:
  - sweep: {model: [small, llama], lr: [1e-3, 3e-3], batch_size: [16]}
)";

ProfileResult plan(const std::string& spec, int trials = 1) {
  LoadOptions lo;
  lo.check_data_files = false;
  static const Workload w = parse_workload(kWorkload, "pruning.yaml", lo);
  ProfileRequest req;
  req.workload = &w;
  req.cluster = solver::parse_cluster_spec(spec);
  ProfileOptions opt;
  opt.trials_per_degree = trials;
  return profile_from_store(req, opt);
}

bool would_try(const ConfigRow& row) {
  return row.status == "estimate (trials off)";
}

}  // namespace

TEST(Pruning, OnlyTheBestFewFeasibleConfigurationsPerDeviceCountWouldBeTried) {
  for (int trials : {1, 2}) {
    const ProfileResult r = plan("1x4:16GiB", trials);
    EXPECT_TRUE(r.nominal_calibration);
    EXPECT_EQ(r.stats.signatures, 2);
    std::map<std::pair<std::string, int>, int> tries;
    int infeasible = 0, dominated = 0;
    for (const auto& row : r.rows) {
      if (!row.estimate.feasible) {
        ++infeasible;
        EXPECT_FALSE(would_try(row)) << row.config.label();
        EXPECT_FALSE(row.in_problem) << row.config.label();
        EXPECT_EQ(row.status.rfind("infeasible: ", 0), 0u) << row.status;
      }
      if (row.status.find("dominated") != std::string::npos) ++dominated;
      if (would_try(row)) ++tries[{row.signature, row.config.degree}];
    }
    EXPECT_GT(infeasible, 0);  // e.g. degree 3: 16 sequences do not split three ways
    EXPECT_GT(dominated, 0);   // memory matters (16 GiB devices): slower and bigger is out
    for (const auto& [key, n] : tries) EXPECT_LE(n, trials) << key.first << " @" << key.second;
    EXPECT_FALSE(tries.empty());
  }
}

TEST(Pruning, TheSolverGetsTheParetoFrontOfEachDeviceCount) {
  const ProfileResult r = plan("1x4:16GiB");
  ASSERT_EQ(r.jobs.size(), 4u);
  for (std::size_t j = 0; j < r.jobs.size(); ++j) {
    const auto& configs = r.jobs[j].configs;
    ASSERT_EQ(configs.size(), r.details[j].size());
    ASSERT_FALSE(configs.empty());
    for (std::size_t a = 0; a < configs.size(); ++a) {
      EXPECT_EQ(configs[a].source, "estimate");
      EXPECT_GT(configs[a].time_s, 0);
      EXPECT_EQ(configs[a].devices, r.details[j][a].degree);
      for (std::size_t b = 0; b < configs.size(); ++b) {
        if (a == b || configs[a].devices != configs[b].devices) continue;
        const bool dominates = configs[b].time_s <= configs[a].time_s &&
                               configs[b].memory_gib <= configs[a].memory_gib;
        EXPECT_FALSE(dominates) << configs[b].strategy << " dominates " << configs[a].strategy;
      }
    }
  }
  // Learning-rate variants: the same configurations and times.
  ASSERT_EQ(r.jobs[0].configs.size(), r.jobs[1].configs.size());
  for (std::size_t c = 0; c < r.jobs[0].configs.size(); ++c)
    EXPECT_DOUBLE_EQ(r.jobs[0].configs[c].time_s, r.jobs[1].configs[c].time_s);
}

TEST(Pruning, WholeNodeConfigurationsForMultiNodeClusters) {
  const ProfileResult r = plan("2x2");
  bool spans = false;
  for (const auto& job : r.jobs)
    for (const auto& c : job.configs) spans = spans || (c.nodes == 2 && c.devices == 4);
  EXPECT_TRUE(spans);
}

TEST(Pruning, AJobThatFitsNothingIsAnInputErrorWithReasons) {
  try {
    plan("1x4:0.001GiB");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fits no configuration"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
}
