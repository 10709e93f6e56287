// Strategy contract beyond equivalence: infeasible configurations reported with their reason
// (and agreed by every rank before training), export -> import round trips of the canonical
// slices (parameters and AdamW moments) across strategies, stage balancing and knobs.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "parallel_util.hpp"
#include "runtime/model/cpu_model.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/pipeline.hpp"
#include "runtime/train/parallel_trainer.hpp"

namespace saturn::testing {
namespace {

using parallel::Estimate;
using parallel::StateKind;
using parallel::StrategySpec;

StrategySpec spec_for(Arch arch, int degree, std::vector<std::string> knobs = {}) {
  StrategySpec s;
  s.model = tiny_model(arch);
  s.train = tiny_train();
  s.degree = degree;
  s.knobs = parallel::parse_knobs(knobs);
  return s;
}

std::string reason(const std::string& strategy, const StrategySpec& s) {
  const Estimate e = parallel::make_strategy(strategy, s)->estimate();
  EXPECT_FALSE(e.feasible) << strategy << " unexpectedly feasible: " << e.layout;
  return e.reason;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Infeasible, ReportedWithTheReason) {
  // Heads not divisible by the tensor-parallel degree.
  StrategySpec s = spec_for(Arch::kGpt2, 4);
  s.model.n_head = 2;
  s.model.d_model = 32;
  EXPECT_TRUE(contains(reason("tensor", s), "n_head 2")) << reason("tensor", s);
  // The MLP width not divisible.
  s = spec_for(Arch::kLlama, 4);
  s.model.d_ff = 66;
  EXPECT_TRUE(contains(reason("tensor", s), "d_ff 66"));
  // Key/value heads not divisible (grouped-query attention: 4 query heads, 2 kv heads).
  s = spec_for(Arch::kLlama, 4);
  s.model.n_kv_head = 2;
  EXPECT_TRUE(contains(reason("tensor", s), "n_kv_head 2")) << reason("tensor", s);
  // More stages than layers.
  s = spec_for(Arch::kGpt2, 4);
  s.model.n_layer = 3;
  EXPECT_TRUE(contains(reason("pipeline", s), "only 3 layers"));
  // Out of memory by the estimate.
  s = spec_for(Arch::kGpt2, 2, {"device_capacity=64KiB"});
  for (const char* name : {"ddp", "fsdp", "pipeline", "tensor", "offload"})
    EXPECT_TRUE(contains(reason(name, s), "out of memory")) << name;
  s = spec_for(Arch::kGpt2, 1, {"host_capacity=64KiB"});
  EXPECT_TRUE(contains(reason("offload", s), "host memory"));
  // The batch does not split into equal replicas; micro-batches that do not divide it.
  s = spec_for(Arch::kGpt2, 4);
  s.train.batch_size = 6;
  EXPECT_TRUE(contains(reason("ddp", s), "batch_size 6"));
  s = spec_for(Arch::kGpt2, 2, {"micro_batches=3"});
  EXPECT_TRUE(contains(reason("pipeline", s), "micro_batches 3"));
  s = spec_for(Arch::kGpt2, 2, {"micro_batch_size=3"});
  EXPECT_TRUE(contains(reason("fsdp", s), "micro_batch_size 3"));
  // A hybrid needs a proper divisor of the degree.
  s = spec_for(Arch::kGpt2, 2);
  EXPECT_TRUE(contains(reason("ddp+tensor", s), "proper divisor"));
  EXPECT_TRUE(contains(reason("ddp+pipeline", s), "proper divisor"));
  // Unknown names never fall back to another strategy.
  EXPECT_THROW(parallel::make_strategy("zero4", s), InputError);
  EXPECT_THROW(parallel::parse_knobs({"schedule=interleaved"}), InputError);
  EXPECT_THROW(parallel::parse_knobs({"stagez=2"}), InputError);
}

TEST(Infeasible, EveryRankFailsAlikeBeforeTraining) {
  comm::Communicator& w = world();
  static SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  TrainJob job{"bad", tiny_model(Arch::kGpt2), tiny_train(), data.train(), data.val()};
  job.model.n_layer = 1;
  TrainOptions opt;
  opt.quiet = true;
  opt.job_dir = data.dir() / "never";
  ParallelOptions par;
  par.strategy = "pipeline";
  par.degree = w.size();
  bool prepared = false;
  par.prepare = [&] { prepared = true; };
  try {
    train_with_strategy(job, opt, par, w);
    FAIL() << "expected AgreedFailure";
  } catch (const comm::AgreedFailure& e) {
    EXPECT_EQ(e.exit_code(), kExitBadInput);
    EXPECT_TRUE(contains(e.what(), "infeasible")) << e.what();
    EXPECT_TRUE(contains(e.what(), "only 1 layers")) << e.what();
  }
  EXPECT_FALSE(prepared);
  EXPECT_FALSE(std::filesystem::exists(opt.job_dir));
  // A degree that is not the number of ranks.
  par.strategy = "ddp";
  par.degree = w.size() + 1;
  job.model.n_layer = 2;
  try {
    train_with_strategy(job, opt, par, w);
    FAIL() << "expected AgreedFailure";
  } catch (const comm::AgreedFailure& e) {
    EXPECT_EQ(e.exit_code(), kExitBadInput);
    EXPECT_TRUE(contains(e.what(), "must equal the number of ranks")) << e.what();
  }
  // A data file only one rank cannot read: still agreed, naming that rank.
  par.degree = w.size();
  job.train_data = w.rank() == 1 ? data.dir() / "missing.bin" : data.train();
  try {
    train_with_strategy(job, opt, par, w);
    FAIL() << "expected AgreedFailure";
  } catch (const comm::AgreedFailure& e) {
    EXPECT_EQ(e.origin_rank(), 1);
    EXPECT_TRUE(contains(e.what(), "missing.bin")) << e.what();
  }
}

// The strategies a degree supports, with knobs that exercise their slicing.
std::vector<std::pair<std::string, std::vector<std::string>>> all_strategies(int degree) {
  std::vector<std::pair<std::string, std::vector<std::string>>> v = {
      {"ddp", {}}, {"fsdp", {}}, {"pipeline", {}}, {"tensor", {}}, {"offload", {}}};
  if (degree >= 4) {
    v.push_back({"ddp+pipeline", {}});
    v.push_back({"ddp+tensor", {}});
  }
  return v;
}

// A canonical state: parameters and AdamW moments of a single device after 3 steps.
struct Canonical {
  std::vector<float> params, m, v;
  const std::vector<float>& of(StateKind k) const {
    return k == StateKind::kParams ? params : k == StateKind::kAdamM ? m : v;
  }
};

Canonical trained_state(Arch arch) {
  const ModelConfig c = tiny_model(arch);
  MemoryPool pool("cpu:0");
  CpuModel model(c, pool);
  model.init_weights(11);
  cpu::CpuDevice device(pool);
  AdamW opt(OptimizerConfig{}, model.layout(), 0, model.num_params(), device);
  const int B = 2, T = 16;
  const auto tok = pattern_tokens(B * T + 1, c.vocab_size, 3);
  std::vector<std::int32_t> in(tok.begin(), tok.end() - 1), tg(tok.begin() + 1, tok.end());
  for (int s = 0; s < 3; ++s) {
    model.zero_grads();
    model.forward(in.data(), tg.data(), B, T);
    model.backward(1.0f / (B * T));
    opt.step(model.params(), nullptr, model.grads(), 1e-3, 1.0f, s + 1);
  }
  Canonical k;
  k.params.assign(model.params(), model.params() + model.num_params());
  k.m.assign(opt.m(), opt.m() + model.num_params());
  k.v.assign(opt.v(), opt.v() + model.num_params());
  return k;
}

class RoundTrip : public ::testing::TestWithParam<Arch> {};

TEST_P(RoundTrip, ImportThenExportGivesBackTheCanonicalState) {
  comm::Communicator& w = world();
  const Arch arch = GetParam();
  const Canonical k = trained_state(arch);
  for (const auto& [name, knobs] : all_strategies(w.size())) {
    Harness h(w);
    auto s = parallel::make_strategy(name, spec_for(arch, w.size(), knobs));
    h.setup(*s);
    for (StateKind kind : {StateKind::kParams, StateKind::kAdamM, StateKind::kAdamV}) {
      StateSlices slices = s->export_state(kind);
      // Boxes lie inside their tensors, and each writer box is written by one rank only
      // (checked by the assembly below covering every element exactly as the reference).
      for (const auto& sl : slices)
        for (std::size_t d = 0; d < sl.shape.size(); ++d)
          ASSERT_LE(sl.start[d] + sl.count[d], sl.shape[d]) << name << " " << sl.name;
      parallel::fill_from_canonical(tiny_model(arch), k.of(kind), slices);
      s->import_state(kind, slices);
      const std::vector<float> back = canonical_everywhere(*s, tiny_model(arch), kind);
      EXPECT_EQ(back, k.of(kind)) << name << " " << parallel::state_kind_name(kind);
    }
  }
}

// Training continued across strategies through the canonical state equals uninterrupted
// training: FSDP for 5 steps, then tensor (or pipeline) for 5 more, against DDP on one rank for
// 10. Parameters, m and v all travel.
TEST_P(RoundTrip, TrainingContinuesAcrossStrategies) {
  comm::Communicator& w = world();
  const Arch arch = GetParam();
  const ModelConfig c = tiny_model(arch);
  data::TokenLoader loader(data::TokenArray::from_tokens([&] {
                             const auto t = pattern_tokens(8000, c.vocab_size, 5);
                             return std::vector<std::uint32_t>(t.begin(), t.end());
                           }()),
                           16, 9);
  std::vector<data::Batch> batches;
  for (int i = 0; i < 10; ++i) batches.push_back(loader.next_batch(8));

  comm::SelfCommunicator self;
  Harness h0(self, "ref");
  auto ref = parallel::make_strategy("ddp", spec_for(arch, 1));
  h0.setup(*ref);
  for (int i = 0; i < 10; ++i) ref->train_step(batches[static_cast<std::size_t>(i)], i);
  const std::vector<float> want =
      parallel::assemble_canonical(self, c, ref->export_state(StateKind::kParams));

  for (const std::string second : {"tensor", "pipeline"}) {
    Harness h1(w, "a"), h2(w, "b");
    auto a = parallel::make_strategy("fsdp", spec_for(arch, w.size()));
    h1.setup(*a);
    for (int i = 0; i < 5; ++i) a->train_step(batches[static_cast<std::size_t>(i)], i);
    auto b = parallel::make_strategy(second, spec_for(arch, w.size()));
    h2.setup(*b);
    for (StateKind kind : {StateKind::kParams, StateKind::kAdamM, StateKind::kAdamV}) {
      const std::vector<float> state = canonical_everywhere(*a, c, kind);
      StateSlices slices = b->export_state(kind);
      parallel::fill_from_canonical(c, state, slices);
      b->import_state(kind, slices);
    }
    for (int i = 5; i < 10; ++i) b->train_step(batches[static_cast<std::size_t>(i)], i);
    const std::vector<float> got = canonical_everywhere(*b, c, StateKind::kParams);
    const auto [d, name] = worst_tensor(c, got, want);
    EXPECT_LE(d, 1e-5) << "fsdp -> " << second << ": tensor " << name;
  }
}

INSTANTIATE_TEST_SUITE_P(BothArchs, RoundTrip, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

TEST(Slices, ReplicatedStateHasExactlyOneWriterAndFsdpCutsRowsIntoThreeBoxes) {
  comm::Communicator& w = world();
  Harness h(w);
  auto tp = parallel::make_strategy("tensor", spec_for(Arch::kGpt2, w.size()));
  h.setup(*tp);
  // Every replicated tensor: all ranks export it, one marks it writer, and copies agree.
  const auto slices = tp->export_state(StateKind::kParams);
  std::int32_t writers = 0;
  for (const auto& s : slices)
    if (s.name == "transformer.ln_f.weight" && s.writer) ++writers;
  w.allreduce(&writers, 1, comm::ReduceOp::kSum);
  EXPECT_EQ(writers, 1);

  Harness h2(w);
  auto fsdp = parallel::make_strategy("fsdp", spec_for(Arch::kLlama, w.size()));
  h2.setup(*fsdp);
  std::map<std::string, int> boxes;
  for (const auto& s : fsdp->export_state(StateKind::kParams)) {
    ++boxes[s.name];
    EXPECT_TRUE(s.writer);
  }
  int partial_rows = 0;
  for (const auto& [name, n] : boxes) {
    EXPECT_LE(n, 3) << name;
    if (n > 1) ++partial_rows;
  }
  // Shard boundaries fall mid-row somewhere (the layer groups are not multiples of a row).
  std::int32_t any = partial_rows > 0 ? 1 : 0;
  w.allreduce(&any, 1, comm::ReduceOp::kMax);
  EXPECT_EQ(any, 1);
}

TEST(Pipeline, StagesAreContiguousAndBalancedByCost) {
  ModelConfig c = tiny_model(Arch::kGpt2);
  c.n_layer = 8;
  EXPECT_EQ(parallel::PipelineStrategy::partition(c, 16, 4, false),
            (std::vector<int>{0, 2, 4, 6, 8}));
  // A large vocabulary makes the head as costly as a few blocks: the last stage gets fewer.
  c.vocab_size = 4096;
  const auto b = parallel::PipelineStrategy::partition(c, 16, 2, true);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 8);
  EXPECT_GT(b[1], 4);
}

TEST(Knobs, ParseAllKeys) {
  const auto k = parallel::parse_knobs(
      {"micro_batch_size=2", "micro_batches=4", "schedule=gpipe", "stages=2", "tensor_degree=2",
       "recompute=true", "bucket_bytes=1MiB", "overlap=off", "prefetch=0", "balance=no",
       "device_capacity=2GiB", "host_capacity=4GiB"});
  EXPECT_EQ(k.micro_batch_size, 2);
  EXPECT_EQ(k.micro_batches, 4);
  EXPECT_EQ(k.schedule, parallel::PipelineSchedule::kGpipe);
  EXPECT_TRUE(k.recompute);
  EXPECT_EQ(k.bucket_bytes, 1u << 20);
  EXPECT_FALSE(k.overlap);
  EXPECT_FALSE(k.prefetch);
  EXPECT_FALSE(k.balance);
  EXPECT_EQ(k.device_capacity, 2ull << 30);
}

}  // namespace
}  // namespace saturn::testing
