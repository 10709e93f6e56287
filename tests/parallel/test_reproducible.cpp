// Reproducible mode (train.reproducible: true): every strategy at every degree ends with weights
// and AdamW moments bit-identical to the single-device trainer's, and so does a job that moves
// between configurations through checkpoints. Run at 2 and 4 ranks (degree-1 configurations on
// one-rank sub-communicators). The learning rate is high, there is no warm-up and eps is 1e-8,
// so Adam turns any last-bit difference of a gradient into a visible one.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "parallel_util.hpp"
#include "runtime/backend/cpu/ops.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/train_io.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/core/error.hpp"
#include "runtime/train/parallel_trainer.hpp"

namespace saturn::testing {
namespace {

TrainConfig repro_train() {
  TrainConfig t;
  t.batch_size = 16;  // canonical micro-batch 2: 8 micro-batches, split 8/4/2 ways below
  t.seq_len = 16;
  t.steps = 6;
  t.eval_every = 0;
  t.eval_batches = 1;
  t.seed = 11;
  t.reproducible = true;
  t.optimizer.lr = 3e-3;
  t.optimizer.eps = 1e-8;
  t.optimizer.weight_decay = 0.1;
  t.optimizer.grad_clip = 0.5;  // active: the clip factor depends on the exact norm
  t.schedule.warmup = 0;
  t.schedule.decay = "constant";
  return t;
}

// The whole canonical state (parameters, m, v) of a final.h5, read on this rank alone.
struct State {
  std::vector<float> p, m, v;
};

State read_final(const ModelConfig& model, const std::filesystem::path& file) {
  const ParameterLayout layout(model);
  State s;
  s.p.resize(layout.total());
  s.m.resize(layout.total());
  s.v.resize(layout.total());
  ckpt::read_checkpoint(MPI_COMM_SELF, file,
                        ckpt::single_device_view(layout, s.p.data(), s.m.data(), s.v.data()));
  return s;
}

// Bit-identical, or the number of differing elements and the largest difference, per part.
void expect_identical(const ModelConfig& model, const State& got, const State& ref,
                      const std::string& what) {
  const ParameterLayout layout(model);
  const std::pair<const char*, std::pair<const std::vector<float>*, const std::vector<float>*>>
      parts[] = {{"params", {&got.p, &ref.p}}, {"m", {&got.m, &ref.m}}, {"v", {&got.v, &ref.v}}};
  for (const auto& [name, ab] : parts) {
    const auto& a = *ab.first;
    const auto& b = *ab.second;
    ASSERT_EQ(a.size(), b.size());
    if (std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0) continue;
    std::size_t differ = 0;
    double worst = 0;
    std::string where;
    for (const auto& t : layout.tensors())
      for (std::size_t i = t.offset; i < t.offset + t.numel; ++i)
        if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
          ++differ;
          const double d = std::abs(static_cast<double>(a[i]) - b[i]);
          if (d >= worst) {
            worst = d;
            where = fmt::format("{}[{}]", t.name, i - t.offset);
          }
        }
    ADD_FAILURE() << what << ": " << name << " differ in " << differ << " of " << a.size()
                  << " elements, largest |difference| " << worst << " at " << where;
  }
}

std::filesystem::path run_root() {
  const char* dir = std::getenv("SATURN_BINARY_DIR");
  const char* core = std::getenv("OPENBLAS_CORETYPE");  // a second ctest entry may run alongside
  return std::filesystem::path(dir ? dir : "/tmp") /
         fmt::format("test-reproducible-np{}{}", world().size(),
                     core ? std::string("-") + core : std::string());
}

// Single-device reference on rank 0, cached per tiny model (tiny_model_named: gpt2, llama,
// llama_gqa_tied); every rank gets its final.h5 path.
std::filesystem::path reference(const std::string& name, const SharedData& data) {
  static std::map<std::string, std::filesystem::path> cache;
  if (auto it = cache.find(name); it != cache.end()) return it->second;
  const std::filesystem::path dir = run_root() / fmt::format("ref-{}", name);
  if (world().rank() == 0) {
    std::filesystem::remove_all(dir);
    TrainJob job{"ref", tiny_model_named(name), repro_train(), data.train(), data.val()};
    TrainOptions opt;
    opt.quiet = true;
    opt.job_dir = dir;
    train_single_device(job, opt);
  }
  world().barrier();
  return cache.emplace(name, dir / "final.h5").first->second;
}

struct Config {
  std::string strategy;
  int degree = 0;  // 0: the world's size
  std::vector<std::string> knobs;
  std::string label;
};

// Runs `fn(comm)` on ranks [0, n) of the world, on a communicator of their own.
void on_first_ranks(int n, const std::function<void(comm::Communicator&)>& fn) {
  std::unique_ptr<comm::Communicator> sub = world().split(world().rank() < n ? 0 : -1, 0);
  if (sub) fn(*sub);
  world().barrier();
}

class Reproducible : public ::testing::TestWithParam<std::tuple<std::string, Config>> {};

TEST_P(Reproducible, BitIdenticalToOneDevice) {
  const auto& [name, c] = GetParam();
  static SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  const int degree = c.degree > 0 ? c.degree : world().size();
  if (degree > world().size()) GTEST_SKIP() << "needs " << degree << " ranks";
  const std::filesystem::path ref = reference(name, data);
  const std::filesystem::path dir = run_root() / fmt::format("{}-{}", name, c.label);
  if (world().rank() == 0) std::filesystem::remove_all(dir);
  world().barrier();
  on_first_ranks(degree, [&](comm::Communicator& comm) {
    TrainJob job{"rep", tiny_model_named(name), repro_train(), data.train(), data.val()};
    TrainOptions opt;
    opt.quiet = true;
    opt.job_dir = dir;
    ParallelOptions par;
    par.strategy = c.strategy;
    par.degree = degree;
    par.knobs = parallel::parse_knobs(c.knobs);
    train_with_strategy(job, opt, par, comm);
  });
  if (world().rank() == 0) {
    const ModelConfig model = tiny_model_named(name);
    expect_identical(model, read_final(model, dir / "final.h5"), read_final(model, ref),
                     fmt::format("{} {} x{}", name, c.label, degree));
  }
}

const std::vector<Config> kConfigs = {
    {"ddp", 1, {}, "ddp_x1"},
    {"ddp", 2, {}, "ddp_x2"},
    {"ddp", 4, {}, "ddp_x4"},
    {"fsdp", 2, {}, "fsdp_x2"},
    {"fsdp", 4, {"prefetch=false", "overlap=false", "recompute=true"}, "fsdp_x4_plain"},
    {"offload", 1, {}, "offload_x1"},
    {"offload", 2, {}, "offload_x2"},
    {"pipeline", 1, {}, "pipeline_x1"},
    {"pipeline", 2, {}, "pipeline_x2_1f1b"},
    {"pipeline", 2, {"schedule=gpipe"}, "pipeline_x2_gpipe"},
    {"pipeline", 4, {"balance=false"}, "pipeline_x4_1f1b"},
    {"ddp+pipeline", 4, {}, "ddp_pipeline_x4"},
    {"ddp+pipeline", 4, {"schedule=gpipe"}, "ddp_pipeline_x4_gpipe"},
    {"zero2", 1, {}, "zero2_x1"},
    {"zero2", 2, {}, "zero2_x2"},
    {"zero2", 4, {"recompute=true"}, "zero2_x4_recompute"},
};

// A tied LLaMA's embedding takes two gradient terms (classifier, embedding) as GPT-2's does,
// and its key/value heads sum their query heads' gradients: bit-identical too.
INSTANTIATE_TEST_SUITE_P(Strategies, Reproducible,
                         ::testing::Combine(::testing::Values("gpt2", "llama", "llama_gqa_tied"),
                                            ::testing::ValuesIn(kConfigs)),
                         [](const auto& p) {
                           return std::get<0>(p.param) + "_" + std::get<1>(p.param).label;
                         });

// A job moved between configurations through checkpoints (stop at a step boundary, resume under
// another strategy and degree) ends as an uninterrupted single-device run.
TEST(ReproducibleResume, ChangedConfigurationsEndBitIdentical) {
  static SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  const int n = world().size();
  for (const Arch arch : {Arch::kGpt2, Arch::kLlama}) {
    const std::filesystem::path ref = reference(arch_name(arch), data);
    const std::filesystem::path dir = run_root() / fmt::format("resume-{}", arch_name(arch));
    if (world().rank() == 0) std::filesystem::remove_all(dir);
    world().barrier();
    const TrainJob job{"moved", tiny_model(arch), repro_train(), data.train(), data.val()};
    // ddp on every rank for 2 steps, fsdp on 2 ranks for 2 more, one device for the rest.
    auto leg = [&](const std::string& strategy, int degree, std::int64_t stop_at) {
      on_first_ranks(degree, [&](comm::Communicator& comm) {
        TrainOptions opt;
        opt.quiet = true;
        opt.job_dir = dir;
        opt.resume = true;
        ParallelOptions par;
        par.strategy = strategy;
        par.degree = degree;
        par.step_requests = [stop_at](const StepRecord& r) {
          return StepRequests{.stop = r.step == stop_at};
        };
        const TrainResult r = train_with_strategy(job, opt, par, comm);
        EXPECT_TRUE(r.stopped) << strategy;
        EXPECT_EQ(r.steps_done, stop_at) << strategy;
      });
    };
    leg("ddp", n, 2);
    leg("fsdp", 2, 4);
    if (world().rank() == 0) {
      TrainOptions opt;
      opt.quiet = true;
      opt.job_dir = dir;
      opt.resume = true;
      const TrainResult r = train_single_device(job, opt);
      EXPECT_EQ(r.steps.size(), 2u);
      const ModelConfig model = tiny_model(arch);
      expect_identical(model, read_final(model, dir / "final.h5"), read_final(model, ref),
                       fmt::format("{} ddp x{} -> fsdp x2 -> single", arch_name(arch), n));
    }
    world().barrier();
  }
}

// A reproducible job's bits do not depend on the CPU threads per rank (`saturn run` derives them
// from cores / ranks, so a resume on another rank count, or ranks of one job on different
// nodes, change them): its GEMMs run over a fixed grid of output tiles. Uninterrupted at 1 and
// at 3 threads, cut at 1 thread and resumed at 3, and ddp on every rank at 3 threads all end
// bit-identical. The model is wide enough that OpenBLAS would thread its products (it does not
// below about 2.6e5 multiply-adds) and the tile grid has several tiles.
TEST(ReproducibleThreads, ResultsDoNotDependOnTheThreadCount) {
  ModelConfig model = tiny_model(Arch::kLlama);
  model.d_model = 128;
  model.n_head = 4;
  model.d_ff = 352;
  model.n_layer = 2;
  model.vocab_size = 320;  // the classifier's 320 columns: several tiles, and ragged ones
  static SharedData data(model.vocab_size);
  TrainConfig tc = repro_train();
  tc.seq_len = 64;  // canonical micro-batch 2: 128 rows per product
  tc.checkpoint_every = 3;
  model.max_seq_len = tc.seq_len;
  const TrainJob job{"threads", model, tc, data.train(), data.val()};
  const std::filesystem::path whole1 = run_root() / "threads-whole1";
  const std::filesystem::path whole3 = run_root() / "threads-whole3";
  const std::filesystem::path cut = run_root() / "threads-cut";
  const std::filesystem::path ddp3 = run_root() / "threads-ddp3";
  const int ambient = cpu::compute_threads();
  if (world().rank() == 0) {
    for (const auto& d : {whole1, whole3, cut, ddp3}) std::filesystem::remove_all(d);
    TrainOptions opt;
    opt.quiet = true;
    cpu::set_compute_threads(1);
    opt.job_dir = whole1;
    train_single_device(job, opt);
    opt.job_dir = cut;
    opt.max_steps = 3;
    train_single_device(job, opt);
    // The checkpoint still records the threads that wrote it (informational, readable).
    EXPECT_EQ(
        ckpt::read_meta(MPI_COMM_SELF, cut / "checkpoints" / "step-00000003.h5").compute_threads,
        1);
    cpu::set_compute_threads(3);
    opt.max_steps = -1;
    opt.resume = true;
    EXPECT_EQ(train_single_device(job, opt).steps.size(), 3u);
    EXPECT_EQ(cpu::compute_threads(), 3);  // the run's own count: nothing is restored
    opt.resume = false;
    opt.job_dir = whole3;
    train_single_device(job, opt);
    const State ref = read_final(model, whole1 / "final.h5");
    expect_identical(model, read_final(model, whole3 / "final.h5"), ref, "1 vs 3 threads");
    expect_identical(model, read_final(model, cut / "final.h5"), ref,
                     "cut at 1 thread, resumed at 3");
  }
  world().barrier();
  cpu::set_compute_threads(3);
  TrainOptions opt;
  opt.quiet = true;
  opt.job_dir = ddp3;
  ParallelOptions par;
  par.strategy = "ddp";
  par.degree = world().size();
  train_with_strategy(job, opt, par, world());
  cpu::set_compute_threads(ambient);
  if (world().rank() == 0)
    expect_identical(model, read_final(model, ddp3 / "final.h5"),
                     read_final(model, whole1 / "final.h5"),
                     fmt::format("ddp x{} at 3 threads vs one device at 1", world().size()));
  world().barrier();
}

// Tensor parallelism changes the forward's arithmetic: never offered to a reproducible job, and
// asking for it is an error with the reason (no fallback to another strategy). A degree whose
// rows per replica the canonical micro-batch does not divide is infeasible too.
TEST(ReproducibleFeasibility, TensorParallelismAndUnevenSplitsAreRefused) {
  auto estimate = [](const std::string& name, int degree, std::vector<std::string> knobs) {
    parallel::StrategySpec spec;
    spec.model = tiny_model(Arch::kLlama);
    spec.train = repro_train();
    spec.degree = degree;
    spec.knobs = parallel::parse_knobs(knobs);
    return parallel::make_strategy(name, spec)->estimate();
  };
  for (const auto& [name, degree] : std::vector<std::pair<std::string, int>>{
           {"tensor", 1}, {"tensor", 2}, {"tensor", 4}, {"ddp+tensor", 4}}) {
    const parallel::Estimate e = estimate(name, degree, {});
    EXPECT_FALSE(e.feasible) << name << " x" << degree;
    EXPECT_NE(e.reason.find("not available to a reproducible job"), std::string::npos) << e.reason;
  }
  // batch 16 in canonical micro-batches of 2: 8 micro-batches, so ddp x16 leaves one row a rank.
  parallel::Estimate e = estimate("ddp", 16, {});
  EXPECT_FALSE(e.feasible);
  EXPECT_NE(e.reason.find("canonical micro-batches of 2 sequences"), std::string::npos) << e.reason;
  e = estimate("fsdp", 2, {"micro_batch_size=4"});
  EXPECT_FALSE(e.feasible);
  EXPECT_NE(e.reason.find("differs from the canonical micro-batch of 2"), std::string::npos)
      << e.reason;
  e = estimate("pipeline", 2, {"micro_batches=4"});
  EXPECT_FALSE(e.feasible);
  EXPECT_NE(e.reason.find("differs from the 8 canonical micro-batches"), std::string::npos)
      << e.reason;
  // The same strategies are fine for the job when it is not reproducible.
  parallel::StrategySpec loose;
  loose.model = tiny_model(Arch::kLlama);
  loose.train = repro_train();
  loose.train.reproducible = false;
  loose.degree = 2;
  EXPECT_TRUE(parallel::make_strategy("tensor", loose)->estimate().feasible);

  // `saturn train --strategy tensor` on a reproducible job: an agreed input error, no training.
  static SharedData data(tiny_model(Arch::kGpt2).vocab_size);
  TrainJob job{"tp", tiny_model(Arch::kGpt2), repro_train(), data.train(), data.val()};
  TrainOptions opt;
  opt.quiet = true;
  opt.job_dir = run_root() / "never";
  ParallelOptions par;
  par.strategy = "tensor";
  par.degree = world().size();
  try {
    train_with_strategy(job, opt, par, world());
    FAIL() << "expected AgreedFailure";
  } catch (const comm::AgreedFailure& f) {
    EXPECT_EQ(f.exit_code(), kExitBadInput);
    EXPECT_NE(std::string(f.what()).find("tensor parallelism"), std::string::npos) << f.what();
  }
  EXPECT_FALSE(std::filesystem::exists(opt.job_dir));
}

}  // namespace
}  // namespace saturn::testing
