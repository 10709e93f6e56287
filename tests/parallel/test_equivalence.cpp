// Every strategy at the world's degree (2 or 4; hybrids on 4) reproduces single-device training
// of the tiny gpt2 and llama models (and a llama with grouped-query attention and a tied head, and
// one with biases, a sliding window and llama3 rotary scaling; and llama on instruction data,
// whose loss is the mean over the trained targets of a loss mask; and gpt2 and llama_variants on
// packed instruction records that do not see each other): the
// losses of 20 steps (and the val losses) within 1e-5 relative, and every final parameter tensor
// within 1e-5 relative, where relative means max|x - ref| / max|ref| over the tensor (per step for
// losses).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "parallel_util.hpp"
#include "runtime/train/parallel_trainer.hpp"

namespace saturn::testing {
namespace {

constexpr double kTolerance = 1e-5;

struct Case {
  std::string strategy;
  std::vector<std::string> knobs;
  int min_ranks = 2;  // hybrids need a 2-D grid
  std::string label;
};

// "<model>_masked": the model on instruction data (a loss mask beside the token files), where
// the loss is the mean over the trained targets of the global batch (docs/engine.md).
// "<model>_packed": the same data with its record starts, trained with packing: {cross_attention:
// false} (each record attends only to itself, its positions restarting at 0).
bool masked(const std::string& model) {
  return model.ends_with("_masked");
}
bool packed(const std::string& model) {
  return model.ends_with("_packed");
}
std::string base_model(const std::string& model) {
  return masked(model) || packed(model) ? model.substr(0, model.size() - 7) : model;
}
const SharedData& data_for(const std::string& model) {
  static SharedData plain(tiny_model(Arch::kGpt2).vocab_size);
  static SharedData instruct(tiny_model(Arch::kGpt2).vocab_size, true);
  static SharedData records(tiny_model(Arch::kGpt2).vocab_size, true, true);
  return packed(model) ? records : masked(model) ? instruct : plain;
}
TrainConfig train_for(const std::string& model) {
  TrainConfig t = tiny_train();
  t.packing.cross_attention = !packed(model);
  return t;
}

const TrainResult& reference(const std::string& model, const SharedData& data) {
  static std::map<std::string, TrainResult> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  TrainJob job{"ref", tiny_model_named(base_model(model)), train_for(model), data.train(),
               data.val()};
  TrainOptions opt;
  opt.quiet = true;
  return cache.emplace(model, train_single_device(job, opt)).first->second;
}

class Equivalence : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(Equivalence, MatchesOneDevice) {
  const auto& [model, c] = GetParam();
  comm::Communicator& w = world();
  if (w.size() < c.min_ranks) GTEST_SKIP() << c.strategy << " needs " << c.min_ranks << " ranks";
  const SharedData& data = data_for(model);
  const TrainResult& ref = reference(model, data);

  TrainJob job{"eq", tiny_model_named(base_model(model)), train_for(model), data.train(),
               data.val()};
  TrainOptions opt;
  opt.quiet = true;
  ParallelOptions par;
  par.strategy = c.strategy;
  par.degree = w.size();
  par.knobs = parallel::parse_knobs(c.knobs);
  par.gather_final_params = true;
  const TrainResult got = train_with_strategy(job, opt, par, w);

  ASSERT_EQ(got.steps.size(), ref.steps.size());
  double worst_loss = 0, worst_val = 0;
  for (std::size_t i = 0; i < ref.steps.size(); ++i) {
    const auto& a = got.steps[i];
    const auto& b = ref.steps[i];
    worst_loss = std::max(worst_loss, std::abs(a.loss - b.loss) / std::abs(b.loss));
    ASSERT_EQ(a.has_val, b.has_val) << "step " << b.step;
    if (b.has_val) worst_val = std::max(worst_val, std::abs(a.val_loss - b.val_loss) / b.val_loss);
    EXPECT_NEAR(a.lr, b.lr, 1e-12) << "step " << b.step;
    EXPECT_NEAR(a.grad_norm, b.grad_norm, kTolerance * b.grad_norm) << "step " << b.step;
  }
  EXPECT_LE(worst_loss, kTolerance);
  EXPECT_LE(worst_val, kTolerance);
  if (w.rank() == 0) {
    ASSERT_EQ(got.final_params.size(), ref.final_params.size());
    const auto [d, name] = worst_tensor(job.model, got.final_params, ref.final_params);
    EXPECT_LE(d, kTolerance) << "tensor " << name;
    if (d > kTolerance) {  // the elements that differ most, for diagnosis
      const ParamTensor& t = ParameterLayout(job.model).find(name);
      int shown = 0;
      for (std::size_t i = 0; i < t.numel && shown < 5; ++i) {
        const float a = got.final_params[t.offset + i], b = ref.final_params[t.offset + i];
        if (std::abs(a - b) > kTolerance * 1e-2) {
          ADD_FAILURE() << name << "[" << i << "]: " << a << " vs " << b;
          ++shown;
        }
      }
    }
    RecordProperty("max_rel_loss_diff", std::to_string(worst_loss));
    RecordProperty("max_rel_param_diff", std::to_string(d));
    std::printf("[ equivalence ] %s %s: max rel loss diff %.2e, max rel param diff %.2e (%s)\n",
                model.c_str(), c.label.c_str(), worst_loss, d, name.c_str());
  }
}

const std::vector<Case> kCases = {
    {"ddp", {}, 2, "ddp"},
    {"ddp", {"bucket_bytes=16KiB"}, 2, "ddp_buckets16k"},
    {"ddp", {"overlap=false"}, 2, "ddp_blocking"},
    {"fsdp", {}, 2, "fsdp"},
    {"fsdp", {"prefetch=false", "overlap=false", "recompute=true"}, 2, "fsdp_plain_recompute"},
    {"pipeline", {}, 2, "pipeline_1f1b"},
    {"pipeline", {"schedule=gpipe"}, 2, "pipeline_gpipe"},
    {"pipeline",
     {"micro_batches=2", "recompute=true", "balance=false"},
     2,
     "pipeline_1f1b_m2_recompute"},
    {"tensor", {}, 2, "tensor"},
    {"tensor", {"recompute=true", "micro_batch_size=2"}, 2, "tensor_recompute"},
    {"offload", {}, 2, "offload"},
    {"offload", {"overlap=false", "micro_batch_size=1"}, 2, "offload_blocking"},
    {"ddp+pipeline", {}, 4, "ddp_pipeline"},
    {"ddp+pipeline", {"schedule=gpipe", "stages=4"}, 4, "ddp_pipeline_gpipe_p4"},
    {"ddp+tensor", {}, 4, "ddp_tensor"},
    {"zero2", {}, 2, "zero2"},
    {"zero2", {"recompute=true", "micro_batch_size=1"}, 2, "zero2_recompute_m1"},
};

INSTANTIATE_TEST_SUITE_P(
    Strategies, Equivalence,
    ::testing::Combine(::testing::Values("gpt2", "llama", "llama_gqa_tied", "llama_variants",
                                         "gemma", "gemma2", "llama_masked", "gpt2_packed",
                                         "llama_variants_packed"),
                       ::testing::ValuesIn(kCases)),
    [](const auto& p) { return std::get<0>(p.param) + "_" + std::get<1>(p.param).label; });

// A stop (signal, re-plan) that arrives after the last step must not leave a finished job
// without final.h5: `saturn run --resume` would find no step left to run and no final weights.
// One before the last step stops there, with a checkpoint.
TEST(Stop, AfterTheLastStepFinishesTheJob) {
  comm::Communicator& w = world();
  static SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  const char* dir = std::getenv("SATURN_BINARY_DIR");
  const std::filesystem::path run =
      std::filesystem::path(dir ? dir : "/tmp") / fmt::format("test-stop-np{}", w.size());
  if (w.rank() == 0) std::filesystem::remove_all(run);
  w.barrier();
  TrainConfig tc = tiny_train();
  tc.steps = 4;
  tc.checkpoint_every = 0;
  for (const std::int64_t stop_at : {tc.steps, tc.steps - 1}) {
    const std::string id = fmt::format("stop-at-{}", stop_at);
    TrainJob job{id, tiny_model(Arch::kGpt2), tc, data.train(), data.val()};
    TrainOptions opt;
    opt.quiet = true;
    opt.job_dir = run / id;
    ParallelOptions par;
    par.strategy = "ddp";
    par.degree = w.size();
    par.step_requests = [stop_at](const StepRecord& r) {
      return StepRequests{.stop = r.step == stop_at};
    };
    const TrainResult got = train_with_strategy(job, opt, par, w);
    const bool last = stop_at == tc.steps;
    EXPECT_EQ(got.stopped, !last) << id;
    EXPECT_EQ(got.steps_done, stop_at) << id;
    EXPECT_EQ(std::filesystem::exists(opt.job_dir / "final.h5"), last) << id;
    if (!last) {
      EXPECT_TRUE(std::filesystem::exists(opt.job_dir / "checkpoints" / "latest")) << id;
    }
  }
}

}  // namespace
}  // namespace saturn::testing
