#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/data/token_file.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/workload/config_json.hpp"
#include "runtime/workload/workload.hpp"
#include "tests/data/test_util.hpp"

namespace saturn {
namespace {

namespace fs = std::filesystem;
using saturn::testing::error_of;
using saturn::testing::TempDir;
using saturn::testing::write_file;

// The example of DESIGN.md's "Workload file (YAML)", verbatim.
const char* kDesignExample = R"(name: gpt-sweep
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 128
  steps: 2000                 # optimizer steps at the global batch size
  eval_every: 200             # val loss every N steps
  checkpoint_every: 500
  optimizer: {type: adamw, lr: 3e-4, betas: [0.9, 0.95], weight_decay: 0.1, grad_clip: 1.0}
  schedule: {warmup: 100, decay: cosine, min_lr_ratio: 0.1}
  seed: 1234
models:
  small:  {arch: gpt2, n_layer: 4, n_head: 4, d_model: 256}
  medium: {arch: gpt2, n_layer: 8, n_head: 8, d_model: 512}
  tiny-llama: {arch: llama, n_layer: 4, n_head: 4, d_model: 256, d_ff: 688}
jobs:
  - sweep: {model: [small, medium], lr: [3e-4, 1e-3, 3e-3], batch_size: [16, 32]}
  - {name: special, model: medium, lr: 1e-3, batch_size: 64, steps: 4000}
strategies: [ddp, fsdp, pipeline, tensor, offload]   # allowed; default: all
cluster: auto                    # or a --cluster SPEC string
solver: {backend: glpk, time_limit: 60, introspection: {interval: 600, threshold: 0.05}}
)";

// The preamble most tests share: 3 lines, then `models:` (line 4) with `small` on line 5.
const char* kHead = R"(data: {train: data/train.bin, val: data/val.bin}
defaults: {steps: 100}
models:
  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}
)";

class WorkloadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Real token files (bytes 0..99): the data is opened and checked against every job.
    std::vector<std::uint16_t> tokens(4096);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 100);
    fs::create_directories(dir_ / "data");
    data::write_llmc_tokens(dir_ / "data/train.bin", tokens);
    data::write_llmc_tokens(dir_ / "data/val.bin", tokens);
  }
  fs::path write(const std::string& yaml) {
    const fs::path p = dir_ / "w.yaml";
    write_file(p, yaml);
    return p;
  }
  Workload load(const std::string& yaml) { return load_workload(write(yaml)); }
  // The InputError message for this YAML; it must start with "FILE:LINE:COL: FIELD:".
  std::string error(const std::string& yaml, int line, int col, const std::string& field) {
    const fs::path p = write(yaml);
    const std::string msg = error_of<InputError>([&] { load_workload(p); });
    const std::string where =
        p.string() + ":" + std::to_string(line) + ":" + std::to_string(col) + ": " + field + ":";
    EXPECT_EQ(msg.rfind(where, 0), 0u) << "expected prefix: " << where << "\nmessage: " << msg;
    return msg;
  }
  TempDir dir_;
};

TEST_F(WorkloadTest, DesignExample) {
  const Workload w = load(kDesignExample);
  EXPECT_EQ(w.name, "gpt-sweep");
  EXPECT_EQ(w.source, dir_ / "w.yaml");
  EXPECT_EQ(w.train_data, dir_ / "data/train.bin");
  EXPECT_EQ(w.val_data, dir_ / "data/val.bin");
  ASSERT_EQ(w.jobs.size(), 13u);
  const std::vector<std::string> ids = {"small-lr3e-4-bs16",
                                        "small-lr3e-4-bs32",
                                        "small-lr1e-3-bs16",
                                        "small-lr1e-3-bs32",
                                        "small-lr3e-3-bs16",
                                        "small-lr3e-3-bs32",
                                        "medium-lr3e-4-bs16",
                                        "medium-lr3e-4-bs32",
                                        "medium-lr1e-3-bs16",
                                        "medium-lr1e-3-bs32",
                                        "medium-lr3e-3-bs16",
                                        "medium-lr3e-3-bs32",
                                        "special"};
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(w.jobs[i].id, ids[i]);

  const JobSpec& a = w.jobs[3];  // small-lr1e-3-bs32
  EXPECT_EQ(a.model_name, "small");
  EXPECT_EQ(a.model.arch, Arch::kGpt2);
  EXPECT_EQ(a.model.n_layer, 4);
  EXPECT_EQ(a.model.n_head, 4);
  EXPECT_EQ(a.model.d_model, 256);
  EXPECT_EQ(a.model.vocab_size, 256);
  EXPECT_EQ(a.model.max_seq_len, 128);
  EXPECT_DOUBLE_EQ(a.train.optimizer.lr, 1e-3);
  EXPECT_EQ(a.train.batch_size, 32);
  EXPECT_EQ(a.train.seq_len, 128);
  EXPECT_EQ(a.train.steps, 2000);
  EXPECT_EQ(a.train.eval_every, 200);
  EXPECT_EQ(a.train.checkpoint_every, 500);
  EXPECT_EQ(a.train.seed, 1234u);
  EXPECT_EQ(a.train.optimizer.type, "adamw");
  EXPECT_DOUBLE_EQ(a.train.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(a.train.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(a.train.optimizer.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(a.train.optimizer.grad_clip, 1.0);
  EXPECT_EQ(a.train.schedule.warmup, 100);
  EXPECT_EQ(a.train.schedule.decay, "cosine");
  EXPECT_DOUBLE_EQ(a.train.schedule.min_lr_ratio, 0.1);

  const JobSpec& s = find_job(w, "special");
  EXPECT_EQ(s.model_name, "medium");
  EXPECT_EQ(s.model.d_model, 512);
  EXPECT_EQ(s.train.batch_size, 64);
  EXPECT_EQ(s.train.steps, 4000);
  EXPECT_DOUBLE_EQ(s.train.optimizer.lr, 1e-3);
  EXPECT_EQ(s.train.schedule.warmup, 100);  // the rest from defaults

  EXPECT_EQ(w.strategies,
            (std::vector<std::string>{"ddp", "fsdp", "pipeline", "tensor", "offload"}));
  EXPECT_EQ(w.cluster, "auto");
  EXPECT_EQ(w.solver.backend, "glpk");
  EXPECT_DOUBLE_EQ(w.solver.time_limit_s, 60);
  EXPECT_DOUBLE_EQ(w.solver.introspection.interval_s, 600);
  EXPECT_DOUBLE_EQ(w.solver.introspection.threshold, 0.05);
}

TEST_F(WorkloadTest, DefaultsOfOptionalSections) {
  const Workload w = load(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 8}\n");
  EXPECT_EQ(w.name, "w");  // the file's stem
  EXPECT_EQ(w.strategies, known_strategies());
  EXPECT_EQ(w.cluster, "auto");
  EXPECT_EQ(w.solver.backend, "glpk");
  ASSERT_EQ(w.jobs.size(), 1u);
  const TrainConfig defaults;
  EXPECT_EQ(w.jobs[0].id, "small-lr" + compact_number(defaults.optimizer.lr) + "-bs8");
  EXPECT_EQ(w.jobs[0].train.seq_len, defaults.seq_len);
  EXPECT_EQ(w.jobs[0].train.steps, 100);
}

TEST_F(WorkloadTest, SweepOverOtherKeysExtendsIds) {
  const Workload w = load(std::string(kHead) +
                          "jobs:\n"
                          "  - sweep: {seed: [1, 2], batch_size: [8], model: small, lr: 0.001,\n"
                          "            steps: [50, 60], weight_decay: [0.0, 0.05]}\n");
  ASSERT_EQ(w.jobs.size(), 8u);
  // model, lr, batch_size first, then the other swept keys in a fixed order (seed, steps, wd);
  // the last key varies fastest.
  EXPECT_EQ(w.jobs[0].id, "small-lr1e-3-bs8-s1-steps50-wd0");
  EXPECT_EQ(w.jobs[1].id, "small-lr1e-3-bs8-s1-steps50-wd0.05");
  EXPECT_EQ(w.jobs[2].id, "small-lr1e-3-bs8-s1-steps60-wd0");
  EXPECT_EQ(w.jobs[7].id, "small-lr1e-3-bs8-s2-steps60-wd0.05");
  EXPECT_EQ(w.jobs[7].train.seed, 2u);
  EXPECT_EQ(w.jobs[7].train.steps, 60);
  EXPECT_DOUBLE_EQ(w.jobs[7].train.optimizer.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(w.jobs[7].train.optimizer.lr, 1e-3);
}

TEST_F(WorkloadTest, Reproducible) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults: {steps: 100, reproducible: true}\n"
      "models:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n"
      "jobs:\n"
      "  - {model: small, batch_size: 8}\n"
      "  - {name: loose, model: small, batch_size: 8, reproducible: false}\n"
      "  - sweep: {model: small, batch_size: [16], reproducible: [false, true]}\n");
  ASSERT_EQ(w.jobs.size(), 4u);
  EXPECT_TRUE(w.jobs[0].train.reproducible);
  EXPECT_FALSE(w.jobs[1].train.reproducible);
  EXPECT_EQ(w.jobs[2].id, "small-lr3e-4-bs16-repro0");
  EXPECT_FALSE(w.jobs[2].train.reproducible);
  EXPECT_EQ(w.jobs[3].id, "small-lr3e-4-bs16-repro1");
  EXPECT_TRUE(w.jobs[3].train.reproducible);
  EXPECT_FALSE(TrainConfig{}.reproducible);  // off unless asked for
  // Carried through the train_config JSON of checkpoints; files without the key read false.
  EXPECT_TRUE(train_config_from_json(nlohmann::json(w.jobs[0].train)).reproducible);
  EXPECT_FALSE(train_config_from_json(nlohmann::json{{"steps", 3}}).reproducible);
  EXPECT_CONTAINS(error_of<InputError>([] {
                    train_config_from_json(nlohmann::json{{"reproducible", 1}});
                  }),
                  "train_config.reproducible: expected true or false, got 1");
  // Only YAML's true and false: no quoted strings, numbers or YAML 1.1 yes/on.
  std::string msg =
      error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 8, reproducible: yes}\n", 6,
            49, "jobs[0].reproducible");
  EXPECT_CONTAINS(msg, "expected true or false, got 'yes'");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 8, reproducible: 1}\n", 6,
              49, "jobs[0].reproducible");
  EXPECT_CONTAINS(msg, "expected true or false, got '1'");
  msg = error(
      std::string(kHead) + "jobs:\n  - {model: small, batch_size: 8, reproducible: \"true\"}\n", 6,
      49, "jobs[0].reproducible");
  EXPECT_CONTAINS(msg, "expected true or false, got the quoted string \"true\"");
}

// The canonical micro-batch depends on the batch only: at least 8 micro-batches of at most 8
// sequences, or the configured micro_batch_size.
TEST(CanonicalMicroBatch, FromTheBatchSizeOnly) {
  auto c = [](std::int64_t batch, std::int64_t micro) {
    TrainConfig t;
    t.batch_size = batch;
    t.micro_batch_size = micro;
    return canonical_micro_batch(t);
  };
  EXPECT_EQ(c(4, 0), 1);
  EXPECT_EQ(c(8, 0), 1);
  EXPECT_EQ(c(16, 0), 2);
  EXPECT_EQ(c(24, 0), 3);
  EXPECT_EQ(c(32, 0), 4);
  EXPECT_EQ(c(64, 0), 8);
  EXPECT_EQ(c(512, 0), 8);
  EXPECT_EQ(c(40, 0), 5);
  EXPECT_EQ(c(44, 0), 4);  // 5 does not divide 44
  EXPECT_EQ(c(32, 16), 16);
}

TEST_F(WorkloadTest, PerJobOverridesMergeWithDefaults) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  seq_len: 128\n"
      "  steps: 500\n"
      "  batch_size: 4\n"
      "  optimizer: {lr: 1e-3, betas: [0.8, 0.9], weight_decay: 0.1}\n"
      "  schedule: {warmup: 10, decay: cosine}\n"
      "models:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n"
      "  ll: {arch: llama, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 300, norm_eps: 1e-6}\n"
      "jobs:\n"
      "  - {model: small}\n"
      "  - name: custom\n"
      "    model: ll\n"
      "    seq_len: 64\n"
      "    micro_batch_size: 2\n"
      "    eval_batches: 3\n"
      "    optimizer: {weight_decay: 0.0, eps: 1e-6}\n"
      "    schedule: {decay: linear, min_lr_ratio: 0}\n"
      "    warmup: 20\n");
  ASSERT_EQ(w.jobs.size(), 2u);
  const JobSpec& d = w.jobs[0];
  EXPECT_EQ(d.id, "small-lr1e-3-bs4");
  EXPECT_EQ(d.train.batch_size, 4);
  EXPECT_EQ(d.model.max_seq_len, 128);
  const JobSpec& c = w.jobs[1];
  EXPECT_EQ(c.id, "custom");
  EXPECT_EQ(c.model.arch, Arch::kLlama);
  EXPECT_EQ(c.model.vocab_size, 300);
  EXPECT_FLOAT_EQ(c.model.norm_eps, 1e-6f);
  EXPECT_EQ(c.train.seq_len, 64);
  EXPECT_EQ(c.model.max_seq_len, 64);
  EXPECT_EQ(c.train.micro_batch_size, 2);
  EXPECT_EQ(c.train.eval_batches, 3);
  EXPECT_EQ(c.train.steps, 500);
  EXPECT_DOUBLE_EQ(c.train.optimizer.lr, 1e-3);    // kept from defaults
  EXPECT_DOUBLE_EQ(c.train.optimizer.beta1, 0.8);  // kept from defaults
  EXPECT_DOUBLE_EQ(c.train.optimizer.weight_decay, 0.0);
  EXPECT_DOUBLE_EQ(c.train.optimizer.eps, 1e-6);
  EXPECT_EQ(c.train.schedule.decay, "linear");
  EXPECT_DOUBLE_EQ(c.train.schedule.min_lr_ratio, 0.0);
  EXPECT_EQ(c.train.schedule.warmup, 20);
}

TEST_F(WorkloadTest, FindJob) {
  const Workload w = load(kDesignExample);
  EXPECT_EQ(find_job(w, "medium-lr1e-3-bs16").train.batch_size, 16);
  const std::string msg = error_of<InputError>([&] { find_job(w, "smal-lr1e-3-bs16"); });
  EXPECT_CONTAINS(msg, "unknown job 'smal-lr1e-3-bs16'");
  EXPECT_CONTAINS(msg, "did you mean 'small-lr1e-3-bs16'?");
  EXPECT_CONTAINS(msg, "special");
}

TEST_F(WorkloadTest, ExamplesInTheRepositoryParse) {
  const char* src = std::getenv("SATURN_SOURCE_DIR");
  if (!src) GTEST_SKIP() << "SATURN_SOURCE_DIR is not set (run through ctest)";
  LoadOptions no_data;
  no_data.check_data_files = false;  // examples/data/ is made by `saturn data prepare`
  const fs::path examples = fs::path(src) / "examples";
  const Workload sweep = load_workload(examples / "sweep.yaml", no_data);
  EXPECT_GE(sweep.jobs.size(), 2u);
  EXPECT_EQ(sweep.train_data, examples / "data/train.bin");
  EXPECT_EQ(sweep.val_data, examples / "data/val.bin");
  const Workload single = load_workload(examples / "single.yaml", no_data);
  EXPECT_EQ(single.jobs.size(), 1u);
  EXPECT_EQ(single.jobs[0].model.arch, Arch::kGpt2);
}

TEST_F(WorkloadTest, DataFilesMayBeLeftUnchecked) {
  LoadOptions no_data;
  no_data.check_data_files = false;
  const fs::path p = write(std::string(kHead) + "jobs: [{model: small, batch_size: 2}]\n");
  fs::remove(dir_ / "data/train.bin");
  EXPECT_NO_THROW(load_workload(p, no_data));
  EXPECT_THROW(load_workload(p), InputError);
}

TEST(CompactNumber, Forms) {
  EXPECT_EQ(compact_number(3e-4), "3e-4");
  EXPECT_EQ(compact_number(0.0003), "3e-4");
  EXPECT_EQ(compact_number(1e-3), "1e-3");
  EXPECT_EQ(compact_number(2.5e-3), "2.5e-3");
  EXPECT_EQ(compact_number(1e-5), "1e-5");
  EXPECT_EQ(compact_number(0.05), "0.05");
  EXPECT_EQ(compact_number(0.1), "0.1");
  EXPECT_EQ(compact_number(1.0), "1");
  EXPECT_EQ(compact_number(0.0), "0");
  EXPECT_EQ(default_job_id("small", 3e-4, 16), "small-lr3e-4-bs16");
}

TEST_F(WorkloadTest, JsonRoundTrip) {
  const Workload w = load(kDesignExample);
  for (const JobSpec& j : w.jobs) {
    const nlohmann::json text = nlohmann::json::parse(to_json(j).dump());
    const JobSpec back = job_spec_from_json(text);
    EXPECT_EQ(back.id, j.id);
    EXPECT_EQ(back.model_name, j.model_name);
    EXPECT_EQ(to_json(back), to_json(j));
    EXPECT_EQ(back.model.arch, j.model.arch);
    EXPECT_EQ(back.model.d_ff, j.model.d_ff);
    EXPECT_EQ(back.model.max_seq_len, j.model.max_seq_len);
    EXPECT_EQ(back.model.norm_eps, j.model.norm_eps);
    EXPECT_EQ(back.train.optimizer.lr, j.train.optimizer.lr);
    EXPECT_EQ(back.train.optimizer.beta2, j.train.optimizer.beta2);
    EXPECT_EQ(back.train.schedule.decay, j.train.schedule.decay);
    EXPECT_EQ(back.train.seed, j.train.seed);
  }
  // The ADL hooks: json j = cfg; j.get<T>().
  const nlohmann::json mj = w.jobs[0].model;
  EXPECT_EQ(mj.at("arch"), "gpt2");
  EXPECT_EQ(mj.get<ModelConfig>().n_layer, 4);
  // Missing keys take defaults; wrong types are errors naming the field.
  EXPECT_EQ(model_config_from_json(nlohmann::json::object()).d_model, ModelConfig{}.d_model);
  EXPECT_CONTAINS(error_of<InputError>([] {
                    model_config_from_json(nlohmann::json{{"n_head", "four"}});
                  }),
                  "model_config.n_head: expected a number");
  EXPECT_CONTAINS(error_of<InputError>([] {
                    model_config_from_json(nlohmann::json{{"arch", "gpt3"}});
                  }),
                  "model_config.arch: unknown arch 'gpt3'");
  EXPECT_CONTAINS(error_of<InputError>([] {
                    train_config_from_json(nlohmann::json{{"steps", 1.5}});
                  }),
                  "train_config.steps: expected an integer");
}

// ---- Bad input: one test per class, each checking FILE:LINE:COL: FIELD and the message. ----

TEST_F(WorkloadTest, MalformedYaml) {
  const fs::path p = write("data: {train: a, val: b\nmodels: {}\n");
  const std::string msg = error_of<InputError>([&] { load_workload(p); });
  EXPECT_CONTAINS(msg, p.string() + ":2:");
  EXPECT_CONTAINS(msg, "malformed YAML");
}

TEST_F(WorkloadTest, MissingOrEmptyWorkloadFile) {
  EXPECT_CONTAINS(error_of<InputError>([&] { load_workload(dir_ / "nope.yaml"); }),
                  "nope.yaml: workload file does not exist");
  error("", 1, 1, "workload");
  EXPECT_CONTAINS(error("- a\n- b\n", 1, 1, "workload"), "expected a map");
}

TEST_F(WorkloadTest, UnknownKeys) {
  std::string msg =
      error(std::string(kHead) + "job:\n  - {model: small, batch_size: 1}\n", 5, 1, "job");
  EXPECT_CONTAINS(msg, "unknown key 'job'");
  EXPECT_CONTAINS(msg, "did you mean 'jobs'?");
  EXPECT_CONTAINS(msg, "valid keys here: name, data, defaults, models, jobs");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "models:\n"
      "  small: {arch: gpt2, nlayer: 2, n_head: 4, d_model: 64}\n"
      "jobs: [{model: small, batch_size: 1}]\n",
      3, 23, "models.small.nlayer");
  EXPECT_CONTAINS(msg, "did you mean 'n_layer'?");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 1, learning_rate: 1}\n",
              6, 35, "jobs[0].learning_rate");
  EXPECT_CONTAINS(msg, "unknown key 'learning_rate'");
  msg = error(std::string(kHead) + "jobs:\n  - sweep: {model: [small], lrs: [1, 2]}\n", 6, 29,
              "jobs[0].sweep.lrs");
  EXPECT_CONTAINS(msg, "did you mean 'lr'?");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults: {optimizer: {type: adamw, beta: [0.9, 0.9]}}\n"
      "models: {small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}}\n"
      "jobs: [{model: small, batch_size: 1}]\n",
      2, 37, "defaults.optimizer.beta");
  EXPECT_CONTAINS(msg, "did you mean 'betas'?");
}

TEST_F(WorkloadTest, SweepEntryHoldsOnlySweep) {
  const std::string msg =
      error(std::string(kHead) + "jobs:\n  - {sweep: {model: small, batch_size: [1]}, name: x}\n",
            6, 46, "jobs[0]");
  EXPECT_CONTAINS(msg, "a sweep entry holds only the key 'sweep', got 'name' beside it");
}

TEST_F(WorkloadTest, DuplicateKey) {
  const std::string msg =
      error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 1}\n" + "models: {}\n", 7,
            1, "models");
  EXPECT_CONTAINS(msg, "given twice (first at 3:1)");
}

TEST_F(WorkloadTest, WrongTypes) {
  std::string msg =
      error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 1, lr: fast}\n", 6, 39,
            "jobs[0].lr");
  EXPECT_CONTAINS(msg, "expected a number, got 'fast'");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 16.5}\n", 6, 32,
              "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "expected an integer, got '16.5'");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: \"16\"}\n", 6, 32,
              "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "expected an integer, got the quoted string \"16\"");
  msg = error(std::string(kHead) + "jobs: {model: small}\n", 5, 7, "jobs");
  EXPECT_CONTAINS(msg, "expected a list of jobs and sweeps, got a map");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 2, steps: }\n", 6, 35,
              "jobs[0].steps");
  EXPECT_CONTAINS(msg, "expected an integer, got nothing");
  msg = error(std::string(kHead) + "jobs:\n  - {model: small, batch_size: 2, optimizer: 3}\n", 6,
              46, "jobs[0].optimizer");
  EXPECT_CONTAINS(msg, "expected a map, got '3'");
}

TEST_F(WorkloadTest, ImpossibleTrainingValues) {
  const std::string jobs = std::string(kHead) + "jobs:\n";
  std::string msg =
      error(jobs + "  - {model: small, batch_size: 1, lr: -3e-4}\n", 6, 39, "jobs[0].lr");
  EXPECT_CONTAINS(msg, "-0.0003 is out of range (valid: a number in (0, 10])");
  msg = error(jobs + "  - sweep: {model: small, batch_size: [4], lr: [1e-3, 0]}\n", 6, 55,
              "jobs[0].sweep.lr[1]");
  EXPECT_CONTAINS(msg, "valid: a number in (0, 10]");
  msg = error(jobs + "  - {model: small, batch_size: 0}\n", 6, 32, "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "0 is out of range (valid: 1..1048576)");
  msg = error(jobs + "  - {model: small, batch_size: 1, steps: 0}\n", 6, 42, "jobs[0].steps");
  EXPECT_CONTAINS(msg, "valid: 1..1000000000");
  msg = error(jobs + "  - {model: small, batch_size: 2, micro_batch_size: 4}\n", 6, 53,
              "jobs[0].micro_batch_size");
  EXPECT_CONTAINS(msg, "micro_batch_size 4 exceeds batch_size 2");
  msg = error(jobs + "  - {model: small}\n", 6, 5, "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "missing");
}

TEST_F(WorkloadTest, BetasAndMinLrRatioRanges) {
  const std::string tail =
      "models: {small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}}\n"
      "jobs: [{model: small, batch_size: 1}]\n";
  std::string msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  optimizer: {betas: [0.9, 1.0]}\n" +
          tail,
      3, 28, "defaults.optimizer.betas[1]");
  EXPECT_CONTAINS(msg, "valid: a list [beta1, beta2] of numbers in [0, 1)");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  optimizer: {betas: [0.9]}\n" +
          tail,
      3, 22, "defaults.optimizer.betas");
  EXPECT_CONTAINS(msg, "expected a list [beta1, beta2]");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  schedule: {min_lr_ratio: 1.5}\n" +
          tail,
      3, 28, "defaults.schedule.min_lr_ratio");
  EXPECT_CONTAINS(msg, "1.5 is out of range (valid: 0 to 1)");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  schedule: {decay: cosin}\n" +
          tail,
      3, 21, "defaults.schedule.decay");
  EXPECT_CONTAINS(msg,
                  "unknown value 'cosin' (did you mean 'cosine'? valid: cosine, linear, "
                  "constant, hf_cosine, hf_linear)");
}

TEST_F(WorkloadTest, WarmupLongerThanSteps) {
  const std::string msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults:\n"
      "  steps: 50\n"
      "  schedule: {warmup: 100}\n"
      "models: {small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}}\n"
      "jobs:\n"
      "  - {model: small, batch_size: 1, steps: 200}\n"
      "  - {model: small, batch_size: 2}\n",
      4, 22, "defaults.schedule.warmup");
  EXPECT_CONTAINS(msg, "warmup 100 exceeds steps 50 of job 'small-lr3e-4-bs2' (valid: 0..50)");
}

TEST_F(WorkloadTest, ImpossibleModelShapes) {
  const std::string head = "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n";
  const std::string jobs = "jobs: [{model: small, batch_size: 1}]\n";
  std::string msg =
      error(head + "  small: {arch: gpt2, n_layer: 2, n_head: 3, d_model: 64}\n" + jobs, 3, 10,
            "models.small");
  EXPECT_CONTAINS(msg, "n_head (3) must divide d_model (64)");
  msg = error(head + "  small: {arch: gpt3, n_layer: 2, n_head: 4, d_model: 64}\n" + jobs, 3, 17,
              "models.small.arch");
  EXPECT_CONTAINS(msg, "unknown arch 'gpt3' (did you mean 'gpt2'? valid: gpt2, llama)");
  msg = error(head + "  small: {arch: gpt2, n_layer: 0, n_head: 4, d_model: 64}\n" + jobs, 3, 32,
              "models.small.n_layer");
  EXPECT_CONTAINS(msg, "valid: 1..256");
  msg = error(head + "  small: {arch: llama, n_layer: 1, n_head: 4, d_model: 4}\n" + jobs, 3, 10,
              "models.small");
  EXPECT_CONTAINS(msg, "even head dimension");
  msg = error(head + "  small: {arch: gpt2, n_layer: 2, n_head: 4}\n" + jobs, 3, 10,
              "models.small.d_model");
  EXPECT_CONTAINS(msg, "missing (required: arch, n_layer, n_head, d_model, or from:");
  msg = error(head + "  small/x: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" + jobs, 3, 3,
              "models");
  EXPECT_CONTAINS(msg, "not a plain name");
  // Grouped-query attention: key/value heads divide the query heads; gpt2 has none.
  msg = error(
      head + "  small: {arch: llama, n_layer: 1, n_head: 4, n_kv_head: 3, d_model: 64}\n" + jobs, 3,
      10, "models.small");
  EXPECT_CONTAINS(msg, "n_kv_head (3) must divide n_head (4)");
  msg = error(
      head + "  small: {arch: gpt2, n_layer: 1, n_head: 4, d_model: 64, n_kv_head: 2}\n" + jobs, 3,
      10, "models.small");
  EXPECT_CONTAINS(msg, "grouped-query attention is llama's");
  // gpt2's head is always tied; tie_embeddings takes YAML 1.2 booleans only.
  msg = error(head +
                  "  small: {arch: gpt2, n_layer: 1, n_head: 4, d_model: 64, tie_embeddings: "
                  "false}\n" +
                  jobs,
              3, 75, "models.small.tie_embeddings");
  EXPECT_CONTAINS(msg, "gpt2's head is always its token embedding");
  msg = error(head +
                  "  small: {arch: llama, n_layer: 1, n_head: 4, d_model: 64, tie_embeddings: "
                  "yes}\n" +
                  jobs,
              3, 76, "models.small.tie_embeddings");
  EXPECT_CONTAINS(msg, "expected true or false");
}

TEST_F(WorkloadTest, GroupedQueryAttentionAndTiedHead) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  g: {arch: llama, n_layer: 2, n_head: 4, n_kv_head: 2, d_model: 32, tie_embeddings: "
      "true}\n"
      "  u: {arch: llama, n_layer: 2, n_head: 4, d_model: 32}\n"
      "jobs: [{model: g, batch_size: 1}, {model: u, batch_size: 1}]\n");
  ASSERT_EQ(w.jobs.size(), 2u);
  EXPECT_EQ(w.jobs[0].model.kv_heads(), 2);
  EXPECT_TRUE(w.jobs[0].model.tied());
  EXPECT_EQ(w.jobs[1].model.kv_heads(), 4);  // absent: n_head
  EXPECT_FALSE(w.jobs[1].model.tied());
  // Both survive the JSON of checkpoint metadata; a file without them (written before they
  // existed) means n_head key/value heads and an untied llama.
  const ModelConfig back = model_config_from_json(to_json(w.jobs[0].model));
  EXPECT_EQ(back.kv_heads(), 2);
  EXPECT_TRUE(back.tie_embeddings);
  nlohmann::json old = to_json(w.jobs[0].model);
  old.erase("n_kv_head");
  old.erase("tie_embeddings");
  const ModelConfig legacy = model_config_from_json(old);
  EXPECT_EQ(legacy.kv_heads(), 4);
  EXPECT_FALSE(legacy.tied());
  EXPECT_CONTAINS(
      error_of<InputError>([] {
        model_config_from_json(nlohmann::json{{"arch", "gpt2"}, {"tie_embeddings", false}});
      }),
      "model_config.tie_embeddings: false");
}

// `lora:` (issue 31): on a model, overridden field by field in defaults, jobs and sweeps; swept by
// dotted names into job ids; bad values named at their place; through the job JSON and back.
TEST_F(WorkloadTest, LoraSettings) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults: {lora: {alpha: 16}}\n"
      "models:\n"
      "  m: {arch: llama, n_layer: 2, n_head: 4, d_model: 32, lora: {rank: 4, targets: [q, v]}}\n"
      "  g: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 32}\n"
      "jobs:\n"
      "  - sweep: {model: m, batch_size: 4, lora.rank: [8, 32], lora.targets: [[qkv], [o]]}\n"
      "  - {name: full, model: m, batch_size: 4, lora: {rank: 0}}\n"
      "  - {name: gl, model: g, batch_size: 4, lora: {rank: 2, targets: [all-linear], "
      "use_rslora: true}}\n"
      "  - {name: plain, model: m, batch_size: 4}\n");
  ASSERT_EQ(w.jobs.size(), 7u);
  EXPECT_EQ(w.jobs[0].id, "m-lr3e-4-bs4-r8-tqkv");
  EXPECT_EQ(w.jobs[3].id, "m-lr3e-4-bs4-r32-to");
  const LoraConfig& l0 = w.jobs[0].model.lora;
  EXPECT_EQ(l0.rank, 8);
  EXPECT_EQ(l0.alpha, 16);
  EXPECT_EQ(l0.targets, parse_lora_targets({"q", "k", "v"}, Arch::kLlama));
  EXPECT_FALSE(w.jobs[4].model.lora.enabled());  // rank 0: the full fine-tune
  const LoraConfig& lg = w.jobs[5].model.lora;
  EXPECT_EQ(lg.targets, all_lora_targets(Arch::kGpt2));
  EXPECT_TRUE(lg.use_rslora);
  // The model's own lora, with the defaults' alpha.
  EXPECT_EQ(w.jobs[6].model.lora.rank, 4);
  EXPECT_EQ(w.jobs[6].model.lora.alpha, 16);
  const ModelConfig back = model_config_from_json(to_json(w.jobs[5].model));
  EXPECT_EQ(back.lora, lg);

  const std::string head =
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  g: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 32}\njobs:\n";
  EXPECT_CONTAINS(error(head + "  - {model: g, batch_size: 4, lora: {rank: 4, targets: [q]}}\n", 5,
                        56, "jobs[0].lora.targets"),
                  "c_attn: target qkv");
  EXPECT_CONTAINS(error(head + "  - {model: g, batch_size: 4, lora: {rank: 4, targets: [fc], "
                               "dropout: 0.1}}\n",
                        5, 71, "jobs[0].lora.dropout"),
                  "not supported");
  EXPECT_CONTAINS(error(head + "  - {model: g, batch_size: 4, lora: {rank: 4}}\n", 5, 44,
                        "jobs[0].lora.rank (lora.targets)"),
                  "which linears");
  EXPECT_CONTAINS(error(head + "  - {model: g, batch_size: 4, lora: {rank: 9999, targets: [fc]}}\n",
                        5, 44, "jobs[0].lora.rank"),
                  "out of range");
  EXPECT_CONTAINS(error("export: peft\n" + head +
                            "  - {model: g, batch_size: 4, lora: {rank: 4, targets: [fc]}}\n",
                        1, 9, "export"),
                  "starts from random weights");
  EXPECT_CONTAINS(error(head + "  - sweep: {model: g, batch_size: 4, lora: [{rank: 4}]}\n", 5, 45,
                        "jobs[0].sweep.lora"),
                  "cannot be swept as a whole");
}

// The llama switches a workload may set (issue 30): biases, a sliding window (Gemma 2: on even
// layers only), rotary scaling, and Gemma 2's post-norms, score scale and soft-caps; they reach
// the model, survive checkpoint metadata's JSON, and bad values name their key.
TEST_F(WorkloadTest, LlamaVariantKeys) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  v: {arch: llama, n_layer: 2, n_head: 4, d_model: 32, qkv_bias: true, o_bias: true,\n"
      "      sliding_window: 8, alternate_window: true, post_norms: true,\n"
      "      query_pre_attn_scalar: 20, attn_softcap: 50, final_softcap: 30,\n"
      "      rope_scaling: {type: llama3, factor: 8}}\n"
      "jobs: [{model: v, batch_size: 1}]\n");
  ASSERT_EQ(w.jobs.size(), 1u);
  const ModelConfig& m = w.jobs[0].model;
  EXPECT_TRUE(m.qkv_bias && m.o_bias && !m.mlp_bias);
  EXPECT_TRUE(m.alternate_window && m.post_norms);
  EXPECT_EQ(m.window(0), 8);
  EXPECT_EQ(m.window(1), 0);
  EXPECT_EQ(m.attention(1).softcap, 50.0f);
  EXPECT_FLOAT_EQ(m.attention(0).scale, 1.0f / std::sqrt(20.0f));
  EXPECT_EQ(m.final_softcap, 30.0f);
  EXPECT_EQ(m.rope_scaling, RopeScalingKind::kLlama3);
  const ModelConfig back = model_config_from_json(to_json(m));
  EXPECT_EQ(to_json(back), to_json(m));
  // The post-norms are parameters of their own, under Gemma 2's names.
  const ParameterLayout layout(m);
  EXPECT_NO_THROW(layout.find("model.layers.1.post_feedforward_layernorm.weight"));
  EXPECT_NO_THROW(layout.find("model.layers.1.pre_feedforward_layernorm.weight"));
  EXPECT_EQ(static_cast<std::int64_t>(layout.total()), m.num_parameters());

  const std::string head =
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  v: {arch: llama, n_layer: 2, n_head: 4, d_model: 32, ";
  const std::string tail = "}\njobs: [{model: v, batch_size: 1}]\n";
  EXPECT_CONTAINS(error(head + "attn_softcap: -1" + tail, 3, 70, "models.v.attn_softcap"),
                  "out of range");
  EXPECT_CONTAINS(error(head + "post_norms: 1" + tail, 3, 68, "models.v.post_norms"),
                  "expected true or false");
  EXPECT_CONTAINS(error(head + "alternate_window: true" + tail, 3, 6, "models.v"),
                  "needs a sliding_window > 0");
  EXPECT_CONTAINS(error("data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
                        "  g: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 32, final_softcap: 30}\n"
                        "jobs: [{model: g, batch_size: 1}]\n",
                        3, 70, "models.g.final_softcap"),
                  "llama key");
  // With `export: hf`, a combination no Hugging Face class expresses is refused when the
  // workload loads (Gemma 2's alternating window without Gemma's GeGLU), not after training.
  EXPECT_CONTAINS(error("export: hf\n" + head + "sliding_window: 8, alternate_window: true" + tail,
                        4, 3, "models.v"),
                  "cannot be exported as Gemma2ForCausalLM");
}

TEST_F(WorkloadTest, UnknownModelReferenced) {
  std::string msg = error(std::string(kHead) + "jobs:\n  - {model: smal, batch_size: 1}\n", 6, 13,
                          "jobs[0].model");
  EXPECT_CONTAINS(msg, "unknown model 'smal' (did you mean 'small'? defined in models: small)");
  msg = error(std::string(kHead) + "jobs:\n  - sweep: {model: [small, big], batch_size: [1]}\n", 6,
              28, "jobs[0].sweep.model[1]");
  EXPECT_CONTAINS(msg, "unknown model 'big'");
  msg = error(std::string(kHead) + "jobs:\n  - sweep: {batch_size: [1]}\n", 6, 12,
              "jobs[0].sweep.model");
  EXPECT_CONTAINS(msg, "missing");
}

TEST_F(WorkloadTest, EmptyJobsAndMissingSections) {
  std::string msg = error(std::string(kHead) + "jobs: []\n", 5, 7, "jobs");
  EXPECT_CONTAINS(msg, "the list is empty");
  msg = error(std::string(kHead) + "jobs:\n  - sweep: {model: [], batch_size: [1]}\n", 6, 20,
              "jobs[0].sweep.model");
  EXPECT_CONTAINS(msg, "the list is empty");
  msg = error("data: {train: data/train.bin, val: data/val.bin}\njobs: []\n", 1, 1, "models");
  EXPECT_CONTAINS(msg, "missing");
  msg = error("data: {train: data/train.bin}\n", 1, 7, "data.val");
  EXPECT_CONTAINS(msg, "missing");
}

TEST_F(WorkloadTest, DuplicateJobIds) {
  const std::string msg = error(std::string(kHead) +
                                    "jobs:\n"
                                    "  - sweep: {model: small, lr: [1e-3, 3e-4], batch_size: 8}\n"
                                    "  - {model: small, lr: 0.0003, batch_size: 8, steps: 20}\n",
                                7, 5, "jobs[1]");
  EXPECT_CONTAINS(msg,
                  "job id 'small-lr3e-4-bs8' is produced twice, by jobs[0].sweep at 6:12 "
                  "and by jobs[1] at 7:5");
  EXPECT_CONTAINS(msg, "give one of them a `name:`");
  // An explicit name resolves it.
  EXPECT_NO_THROW(load(std::string(kHead) +
                       "jobs:\n"
                       "  - sweep: {model: small, lr: [1e-3, 3e-4], batch_size: 8}\n"
                       "  - {name: long, model: small, lr: 0.0003, batch_size: 8, steps: 20}\n"));
}

TEST_F(WorkloadTest, MissingDataFile) {
  const std::string msg =
      error("data:\n  train: data/train.bin\n  val: data/nope.bin\n", 3, 8, "data.val");
  EXPECT_CONTAINS(msg, (dir_ / "data/nope.bin").string());
  EXPECT_CONTAINS(msg, "does not exist");
}

TEST_F(WorkloadTest, StrategiesClusterSolver) {
  const std::string jobs = "jobs: [{model: small, batch_size: 1}]\n";
  const Workload w = load(std::string(kHead) + jobs +
                          "strategies: [fsdp, ddp+pipeline, ddp+tensor]\n"
                          "cluster: 2x8:80GiB\n"
                          "solver: {backend: cbc, time_limit: 5.5}\n");
  EXPECT_EQ(w.strategies, (std::vector<std::string>{"fsdp", "ddp+pipeline", "ddp+tensor"}));
  EXPECT_EQ(w.cluster, "2x8:80GiB");
  EXPECT_EQ(w.solver.backend, "cbc");
  EXPECT_DOUBLE_EQ(w.solver.time_limit_s, 5.5);
  std::string msg =
      error(std::string(kHead) + jobs + "strategies: [ddp, fdsp]\n", 6, 19, "strategies[1]");
  EXPECT_CONTAINS(msg, "unknown strategy 'fdsp' (did you mean 'fsdp'? valid: ddp, fsdp, ");
  msg = error(std::string(kHead) + jobs + "strategies: [ddp, ddp]\n", 6, 19, "strategies[1]");
  EXPECT_CONTAINS(msg, "listed twice");
  msg = error(std::string(kHead) + jobs + "solver: {backend: gurobi}\n", 6, 19, "solver.backend");
  EXPECT_CONTAINS(msg, "valid: glpk, cbc");
  msg = error(std::string(kHead) + jobs + "solver: {introspection: {threshold: 2}}\n", 6, 37,
              "solver.introspection.threshold");
  EXPECT_CONTAINS(msg, "out of range");
}

TEST_F(WorkloadTest, SettingGivenTwiceInOneJob) {
  const std::string msg =
      error(std::string(kHead) +
                "jobs:\n  - {model: small, batch_size: 1, lr: 1e-3, optimizer: {lr: 2e-3}}\n",
            6, 61, "jobs[0].optimizer.lr");
  EXPECT_CONTAINS(msg, "optimizer.lr is given twice in this entry (also as jobs[0].lr)");
}

// ---- Limits (issue 15): every number has a range, every string a length and UTF-8, the sweep
// a size checked before expansion, the data its contents; all before any rank trains. ----

TEST_F(WorkloadTest, NumbersPastTheirLimitsAreRefused) {
  struct Case {
    std::string text;  // a job's extra settings, or a model's when it starts with "m:"
    std::string field;
    std::string valid;
  };
  const std::vector<Case> cases = {
      {"batch_size: 1000000000", "batch_size", "valid: 1..1048576"},
      {"eval_batches: 1000000000", "eval_batches", "valid: 1..100000"},
      {"eval_batches: 4611686018427387904", "eval_batches", "valid: 1..100000"},
      {"steps: 4611686018427387904", "steps", "valid: 1..1000000000"},
      {"seq_len: 1000000", "seq_len", "valid: 1..65536"},
      {"checkpoint_every: 10000000000", "checkpoint_every", "valid: 1..1000000000"},
      {"lr: 1e300", "lr", "valid: a number in (0, 10]"},
      {"optimizer: {eps: 5}", "optimizer.eps", "valid: a number in (0, 1]"},
      {"optimizer: {grad_clip: 1e9}", "optimizer.grad_clip", "valid: a number in [0, 1e6]"},
      {"m:n_layer: 1000000, n_head: 4, d_model: 64", "n_layer", "valid: 1..256"},
      {"m:n_layer: 2, n_head: 4, d_model: 1000000", "d_model", "valid: 1..65536"},
      {"m:n_layer: 2, n_head: 4, d_model: 64, d_ff: 10000000", "d_ff", "valid: 1..262144"},
      {"m:n_layer: 2, n_head: 4, d_model: 64, vocab_size: 1000000000", "vocab_size",
       "valid: 2..16777216"},
      {"m:n_layer: 2, n_head: 4, d_model: 64, norm_eps: 2", "norm_eps",
       "valid: a number in (0, 1]"},
  };
  for (const Case& c : cases) {
    const bool model = c.text.rfind("m:", 0) == 0;
    const bool batch = c.text.rfind("batch_size", 0) == 0;
    const std::string yaml =
        "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
        "  small: {arch: gpt2, " +
        (model ? c.text.substr(2) : "n_layer: 2, n_head: 4, d_model: 64") +
        "}\njobs: [{model: small" + (batch ? "" : ", batch_size: 2") +
        (model ? "" : ", " + c.text) + "}]\n";
    const fs::path p = write(yaml);
    const std::string msg = error_of<InputError>([&] { load_workload(p); });
    EXPECT_EQ(msg.rfind(p.string() + ":", 0), 0u) << c.text << ": " << msg;
    EXPECT_CONTAINS(msg, c.field);
    EXPECT_CONTAINS(msg, c.valid);
  }
}

TEST_F(WorkloadTest, ProductsOfSettingsHaveLimitsToo) {
  const std::string head =
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\njobs:\n";
  std::string msg = error(head + "  - {model: small, batch_size: 1048576, seq_len: 1024}\n", 5, 32,
                          "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "tokens per step");
  EXPECT_CONTAINS(msg, "at most 16777216");
  msg = error(head + "  - {model: small, batch_size: 64, seq_len: 65536, eval_batches: 100}\n", 5,
              66, "jobs[0].eval_batches");
  EXPECT_CONTAINS(msg, "validation tokens per evaluation");
  msg = error(head + "  - {model: small, batch_size: 4096, seq_len: 4096, steps: 1000000000}\n", 5,
              60, "jobs[0].steps");
  EXPECT_CONTAINS(msg, "tokens for job");
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  big: {arch: gpt2, n_layer: 256, n_head: 64, d_model: 65536}\n"
      "jobs: [{model: big, batch_size: 1}]\n",
      4, 8, "jobs[0]");
  EXPECT_CONTAINS(msg, "parameters");
}

TEST_F(WorkloadTest, ClusterSpecIsCheckedWithItsLocation) {
  const std::string jobs = "jobs: [{model: small, batch_size: 1}]\n";
  for (const char* spec : {"0x0", ".inf", "2x8:1e400GiB", "100000x8", "1x2000", "128x1024"}) {
    const std::string msg =
        error(std::string(kHead) + jobs + "cluster: " + spec + "\n", 6, 10, "cluster");
    EXPECT_CONTAINS(msg, "cluster spec");
  }
  EXPECT_EQ(load(std::string(kHead) + jobs + "cluster: 64x1024:80GiB\n").cluster, "64x1024:80GiB");
}

TEST_F(WorkloadTest, SweepSizeIsLimitedBeforeExpansion) {
  // 1000 x 1000 x 1000 jobs: refused from the list sizes, at once.
  std::string lrs, sizes, seeds;
  for (int i = 1; i <= 1000; ++i) {
    lrs += fmt::format("{}{}e-6", i > 1 ? ", " : "", i);
    sizes += fmt::format("{}{}", i > 1 ? ", " : "", i);
    seeds += fmt::format("{}{}", i > 1 ? ", " : "", i);
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg = error(std::string(kHead) + "jobs:\n  - sweep: {model: small, lr: [" + lrs +
                              "], batch_size: [" + sizes + "], seed: [" + seeds + "]}\n",
                          6, 12, "jobs[0].sweep");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_CONTAINS(msg, "more than 10000 jobs (this sweep: 1000 x 1000 x 1000)");
  // 10001 jobs over two entries: the second pushes the total past the limit.
  std::string a, b;
  for (int i = 1; i <= 100; ++i) a += fmt::format("{}{}", i > 1 ? ", " : "", i);
  msg = error(std::string(kHead) + "jobs:\n  - sweep: {model: small, batch_size: [" + a +
                  "], seed: [" + a + "]}\n  - {name: one-more, model: small, batch_size: 1}\n",
              7, 5, "jobs[1]");
  EXPECT_CONTAINS(msg, "valid: at most 10000 jobs");
  EXPECT_EQ(load(std::string(kHead) + "jobs:\n  - sweep: {model: small, batch_size: [" + a +
                 "], seed: [" + a + "]}\n")
                .jobs.size(),
            10000u);
}

TEST_F(WorkloadTest, StringsHaveALengthAndUtf8) {
  const std::string jobs_named = "jobs: [{model: small, batch_size: 1, name: ";
  std::string msg = error(std::string(kHead) + jobs_named + std::string(300, 'j') + "}]\n", 5, 44,
                          "jobs[0].name");
  EXPECT_CONTAINS(msg, "not a plain name (valid: at most 100 letters");
  msg = error(std::string(kHead) + jobs_named + "ab\xff}]\n", 5, 44, "jobs[0].name");
  EXPECT_CONTAINS(msg, "not valid UTF-8");
  // Raw invalid UTF-8 bytes in the workload's name and in a data path.
  msg =
      error(std::string("name: run\xc3\x28x\n") + kHead + "jobs: [{model: small, batch_size: 1}]\n",
            1, 7, "name");
  EXPECT_CONTAINS(msg, "not valid UTF-8");
  EXPECT_CONTAINS(msg, "\\xc3");
  msg = error("data: {train: \"data/train\\0.bin\", val: data/val.bin}\n", 1, 15, "data.train");
  EXPECT_CONTAINS(msg, "not valid UTF-8");
  msg = error("data: {train: " + std::string(5000, 'd') + ", val: data/val.bin}\n", 1, 15,
              "data.train");
  EXPECT_CONTAINS(msg, "5000 bytes long (valid: at most 4096)");
  // A generated id longer than a directory name may be.
  msg = error("data: {train: data/train.bin, val: data/val.bin}\nmodels:\n  " +
                  std::string(100, 'm') + ": {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" +
                  "jobs:\n  - sweep: {model: " + std::string(100, 'm') +
                  ", batch_size: 1, lr: 1.23456789012345e-4, seed: [1234567890123456789, 2], "
                  "steps: [1000, 2000], seq_len: [64, 8], warmup: [1000, 0], eval_every: [10, "
                  "20], eval_batches: [1, 2], checkpoint_every: [100000, 2], weight_decay: "
                  "[0.123456789012345, 0]}\n",
              5, 12, "jobs[0].sweep");
  EXPECT_CONTAINS(msg, "valid: at most 200 letters");
  // An unknown key that is not UTF-8: quoted, in the field path too.
  msg = error(std::string(kHead) + "jobs: [{model: small, batch_size: 1}]\nk\xff: 1\n", 6, 1,
              "k\\xff");
  EXPECT_CONTAINS(msg, "unknown key 'k\\xff'");
  EXPECT_EQ(msg.find('\xff'), std::string::npos);
  // A big workload file.
  msg = error_of<InputError>([&] { load_workload(write(std::string(5 << 20, '#'))); });
  EXPECT_CONTAINS(msg, "valid: at most 4194304");
}

TEST_F(WorkloadTest, WorkloadNameIsAPlainName) {
  for (const char* name : {"/abs/path", "../../x", "a/b", ".hidden", "x y"}) {
    const std::string msg = error(
        std::string("name: \"") + name + "\"\n" + kHead + "jobs: [{model: small, batch_size: 1}]\n",
        1, 7, "name");
    EXPECT_CONTAINS(msg, "not a plain name");
    EXPECT_CONTAINS(msg, "runs/NAME");
  }
  // Without name: the file's stem, which must be plain too.
  const fs::path odd = dir_ / "my sweep.yaml";
  write_file(odd, std::string(kHead) + "jobs: [{model: small, batch_size: 1}]\n");
  EXPECT_CONTAINS(error_of<InputError>([&] { load_workload(odd); }),
                  "the file name 'my sweep' is not a plain name to use instead (valid: `name:`");
  EXPECT_EQ(
      load(std::string("name: ok.name-1_+\n") + kHead + "jobs: [{model: small, batch_size: 1}]\n")
          .name,
      "ok.name-1_+");
}

TEST_F(WorkloadTest, DataIsCheckedAgainstEveryJobWhenLoaded) {
  const std::string jobs = "jobs: [{model: small, batch_size: 1, seq_len: 16}]\n";
  // Not a token file at all.
  std::string msg = error(
      "data: {train: /etc/passwd, val: data/val.bin}\nmodels:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" +
          jobs,
      1, 15, "data.train");
  EXPECT_CONTAINS(msg, "/etc/passwd");
  // Tokens up to 99 and a model with 64: names the file, the token, the job and the model.
  msg = error(
      "data: {train: data/train.bin, val: data/val.bin}\nmodels:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64, vocab_size: 64}\n" +
          jobs,
      1, 15, "data.train");
  EXPECT_CONTAINS(msg, (dir_ / "data/train.bin").string());
  EXPECT_CONTAINS(msg, "token 64 (first at position 64; the largest is 99)");
  EXPECT_CONTAINS(msg, "vocab_size 64");
  EXPECT_CONTAINS(msg, "valid: vocab_size > 99 in models.small");
  // Too short for a job's seq_len (the val file here).
  data::write_llmc_tokens(dir_ / "data/short.bin", std::vector<std::uint16_t>(16, 1));
  msg = error(
      "data: {train: data/train.bin, val: data/short.bin}\nmodels:\n"
      "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" +
          jobs,
      1, 36, "data.val");
  EXPECT_CONTAINS(msg, "has 16 tokens; job 'small-lr3e-4-bs1' (seq_len 16) needs at least 17");
  // Unchecked contents when asked (e.g. a rank other than the one that checks).
  LoadOptions no_contents;
  no_contents.check_data_contents = false;
  EXPECT_NO_THROW(
      load_workload(write("data: {train: /etc/passwd, val: data/val.bin}\nmodels:\n"
                          "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" +
                          jobs),
                    no_contents));
}

// Instruction data: a loss mask beside each token file, one byte per token, on both splits.
TEST_F(WorkloadTest, LossMasksAreCheckedWhenLoaded) {
  const std::string text = std::string(kHead) + "jobs: [{model: small, batch_size: 1}]\n";
  const auto tokens = data::TokenArray::open(dir_ / "data/train.bin").size();
  data::write_loss_mask(dir_ / "data/train.mask", std::vector<std::uint8_t>(tokens - 1, 1));
  std::string msg = error(text, 1, 15, "data.train");
  EXPECT_CONTAINS(msg, fmt::format("holds {} bytes, not one per token ({})", tokens - 1, tokens));
  data::write_loss_mask(dir_ / "data/train.mask", std::vector<std::uint8_t>(tokens, 1));
  msg = error(text, 1, 36, "data.val");
  EXPECT_CONTAINS(msg, "has a loss mask beside it and");
  data::write_loss_mask(dir_ / "data/val.mask", std::vector<std::uint8_t>(tokens, 0));
  EXPECT_NO_THROW(load(text));
}

// Packing without cross-attention: `packing: {cross_attention: false}` in defaults, a job or a
// sweep (as packing.cross_attention), which needs valid record starts beside both data files.
TEST_F(WorkloadTest, PackingWithoutCrossAttention) {
  const std::uint64_t tokens = data::TokenArray::open(dir_ / "data/train.bin").size();
  const std::string text =
      std::string(kHead) +
      "jobs:\n"
      "  - {model: small, batch_size: 1}\n"
      "  - {name: packed, model: small, batch_size: 1, packing: {cross_attention: false}}\n"
      "  - sweep: {model: small, batch_size: [2], packing.cross_attention: [true, false]}\n";
  // No record starts: the error names the data entry, the job and the file.
  std::string msg = error(text, 1, 15, "data.train");
  EXPECT_CONTAINS(msg,
                  "job 'packed' has packing: {cross_attention: false}, which needs the "
                  "record boundaries " +
                      (dir_ / "data/train.records").string());
  EXPECT_CONTAINS(msg, "prepare the data with `saturn data prepare --format jsonl`");
  data::write_record_starts(dir_ / "data/train.records", std::vector<std::uint64_t>{0, 100});
  msg = error(text, 1, 36, "data.val");
  EXPECT_CONTAINS(msg, (dir_ / "data/val.records").string());
  // Starts that do not fit the tokens.
  data::write_record_starts(dir_ / "data/val.records", std::vector<std::uint64_t>{0, tokens});
  msg = error(text, 1, 36, "data.val");
  EXPECT_CONTAINS(msg, fmt::format("record 1 starts at token {}, but the token file has {} tokens",
                                   tokens, tokens));
  EXPECT_CONTAINS(msg, "needed by job 'packed'");
  data::write_record_starts(dir_ / "data/val.records", std::vector<std::uint64_t>{0, 50});
  const Workload w = load(text);
  ASSERT_EQ(w.jobs.size(), 4u);
  EXPECT_TRUE(w.jobs[0].train.packing.cross_attention);  // the default: as text
  EXPECT_FALSE(w.jobs[1].train.packing.cross_attention);
  EXPECT_EQ(w.jobs[2].id, "small-lr3e-4-bs2-xattn1");
  EXPECT_TRUE(w.jobs[2].train.packing.cross_attention);
  EXPECT_EQ(w.jobs[3].id, "small-lr3e-4-bs2-xattn0");
  EXPECT_FALSE(w.jobs[3].train.packing.cross_attention);
  EXPECT_FALSE(load("data: {train: data/train.bin, val: data/val.bin}\n"
                    "defaults: {packing: {cross_attention: false}}\nmodels:\n"
                    "  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n"
                    "jobs: [{model: small, batch_size: 1}]\n")
                   .jobs[0]
                   .train.packing.cross_attention);
  // The train_config JSON: written only when off (other files stay as they were); absent: true.
  const nlohmann::json packed = w.jobs[1].train;
  EXPECT_EQ(packed.at("packing"), (nlohmann::json{{"cross_attention", false}}));
  EXPECT_FALSE(nlohmann::json(w.jobs[0].train).contains("packing"));
  EXPECT_FALSE(train_config_from_json(packed).packing.cross_attention);
  EXPECT_TRUE(train_config_from_json(nlohmann::json{{"steps", 3}}).packing.cross_attention);
  // A load that checks the files but not their contents still needs the record starts.
  fs::remove(dir_ / "data/val.records");
  LoadOptions files_only;
  files_only.check_data_contents = false;
  EXPECT_CONTAINS(error_of<InputError>([&] { load_workload(write(text), files_only); }),
                  "data.val: job 'packed' has packing");
  LoadOptions no_files;
  no_files.check_data_files = false;
  EXPECT_NO_THROW(load_workload(write(text), no_files));
  // Jobs that keep cross-attention need none.
  EXPECT_NO_THROW(load(std::string(kHead) + "jobs: [{model: small, batch_size: 1}]\n"));
  // Unknown keys with their place and the valid ones; YAML's booleans only; no whole-map sweep.
  msg = error(std::string(kHead) +
                  "jobs:\n  - {model: small, batch_size: 1, packing: {cross_attn: false}}\n",
              6, 45, "jobs[0].packing.cross_attn");
  EXPECT_CONTAINS(msg, "unknown key 'cross_attn' (valid keys here: cross_attention)");
  msg = error(std::string(kHead) +
                  "jobs:\n  - {model: small, batch_size: 1, packing: {cross_attention: no}}\n",
              6, 62, "jobs[0].packing.cross_attention");
  EXPECT_CONTAINS(msg, "expected true or false, got 'no'");
  msg = error_of<InputError>([&] {
    load(std::string(kHead) +
         "jobs:\n  - sweep: {model: small, batch_size: 1, packing: [{cross_attention: false}]}\n");
  });
  EXPECT_CONTAINS(msg,
                  "packing cannot be swept as a whole (valid: a map of fixed values; sweep "
                  "packing.cross_attention instead)");
}

TEST_F(WorkloadTest, JobsKnowWhereTheyAreDefined) {
  const Workload w = load(std::string(kHead) +
                          "jobs:\n  - {model: small, batch_size: 1}\n"
                          "  - sweep: {model: small, batch_size: [2]}\n");
  EXPECT_EQ(w.jobs[0].where, (dir_ / "w.yaml").string() + ":6:5: jobs[0]");
  EXPECT_EQ(w.jobs[1].where, (dir_ / "w.yaml").string() + ":7:12: jobs[1].sweep");
}

// A Hugging Face model directory as `saturn ckpt export --format hf` writes it (zero weights:
// the parser reads only config.json and the safetensors headers).
void write_hf_model(const fs::path& dir, const ModelConfig& m) {
  fs::create_directories(dir);
  const ParameterLayout layout(m);
  hf::SafetensorsWriter::Declared declared;
  for (const auto& t : layout.tensors()) declared.emplace_back(t.name, t.shape);
  hf::SafetensorsWriter w(dir / "model.safetensors", declared, {{"format", "pt"}});
  for (const auto& t : layout.tensors()) {
    const std::vector<float> zeros(t.numel, 0.0f);
    w.write(t.name, zeros.data(), zeros.size());
  }
  w.finish();
  write_file(dir / "config.json", hf::config_json(m).dump(2));
}

ModelConfig hf_llama() {
  ModelConfig m;
  m.arch = Arch::kLlama;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 32;
  m.d_ff = 48;
  m.vocab_size = 100;
  m.max_seq_len = 64;
  m.rope_theta = 50000.0f;
  return m;
}

const char* kFromHead = R"(data: {train: data/train.bin, val: data/val.bin}
defaults: {steps: 10, seq_len: 32}
models:
)";

// Every `from:` model is kept by name, also one no job uses yet (a job `saturn submit` adds may):
// run_state.json records them all so that a resume from the run's copy finds them.
TEST_F(WorkloadTest, PretrainedDirsListEveryFromModel) {
  write_hf_model(dir_ / "hf/llama", hf_llama());
  const Workload w = load(std::string(kFromHead) +
                          "  m: {from: hf/llama}\n"
                          "  spare: {from: hf/llama}\n"
                          "  plain: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}\n"
                          "jobs:\n  - {model: m, batch_size: 4}\n");
  ASSERT_EQ(w.pretrained_dirs.size(), 2u);
  EXPECT_EQ(w.pretrained_dirs.at("m"), dir_ / "hf/llama");
  EXPECT_EQ(w.pretrained_dirs.at("spare"), dir_ / "hf/llama");
}

TEST_F(WorkloadTest, ModelFromAHuggingFaceDirectory) {
  write_hf_model(dir_ / "hf/llama", hf_llama());
  const Workload w = load(std::string(kFromHead) +
                          "  m: {from: hf/llama, n_head: 4, d_ff: 48, rope_theta: 50000}\n"
                          "jobs:\n  - {model: m, batch_size: 4}\nexport: hf\n");
  ASSERT_EQ(w.jobs.size(), 1u);
  const JobSpec& j = w.jobs[0];
  EXPECT_EQ(j.init_from, dir_ / "hf/llama");
  EXPECT_EQ(j.model.arch, Arch::kLlama);
  EXPECT_EQ(j.model.n_layer, 2);
  EXPECT_EQ(j.model.d_ff, 48);
  EXPECT_EQ(j.model.vocab_size, 100);
  EXPECT_EQ(j.model.rope_theta, 50000.0f);
  EXPECT_EQ(j.model.max_seq_len, 64);  // the model's positions (the job trains 32 of them)
  EXPECT_EQ(j.train.seq_len, 32);
  EXPECT_EQ(w.export_format, "hf");
}

TEST_F(WorkloadTest, ModelFromErrorsNameFileLineFieldAndBothValues) {
  write_hf_model(dir_ / "hf/llama", hf_llama());
  const std::string jobs = "jobs:\n  - {model: m, batch_size: 4}\n";
  std::string msg = error(std::string(kFromHead) + "  m: {from: hf/llama, n_head: 8}\n" + jobs, 4,
                          31, "models.m.n_head");
  EXPECT_CONTAINS(msg, "8 disagrees with num_attention_heads = 4 in");
  EXPECT_CONTAINS(msg, "hf/llama/config.json");
  msg = error(std::string(kFromHead) + "  m: {from: hf/llama, arch: gpt2}\n" + jobs, 4, 29,
              "models.m.arch");
  EXPECT_CONTAINS(msg, "gpt2 disagrees with architectures = llama");
  msg = error(std::string(kFromHead) + "  m: {from: hf/nowhere}\n" + jobs, 4, 13, "models.m.from");
  EXPECT_CONTAINS(msg, "is not a directory");
  // Key/value heads that do not divide the query heads: refused at `from`, naming the field.
  ModelConfig bad_kv = hf_llama();
  write_hf_model(dir_ / "hf/kv3", bad_kv);
  auto cfg = hf::config_json(bad_kv);
  cfg["num_key_value_heads"] = 3;
  write_file(dir_ / "hf/kv3/config.json", cfg.dump());
  msg = error(std::string(kFromHead) + "  m: {from: hf/kv3}\n" + jobs, 4, 13, "models.m.from");
  EXPECT_CONTAINS(msg, "num_key_value_heads: 3 does not divide num_attention_heads 4");
  // Grouped-query attention and a tied head are config.json's: keys beside `from` must agree.
  ModelConfig gqa = hf_llama();
  gqa.n_kv_head = 2;
  gqa.tie_embeddings = true;
  write_hf_model(dir_ / "hf/gqa", gqa);
  msg = error(std::string(kFromHead) + "  m: {from: hf/gqa, n_kv_head: 4}\n" + jobs, 4, 32,
              "models.m.n_kv_head");
  EXPECT_CONTAINS(msg, "4 disagrees with num_key_value_heads = 2");
  msg = error(std::string(kFromHead) + "  m: {from: hf/gqa, tie_embeddings: false}\n" + jobs, 4, 37,
              "models.m.tie_embeddings");
  EXPECT_CONTAINS(msg, "false disagrees with tie_word_embeddings = true");
  const Workload ok = load(std::string(kFromHead) +
                           "  m: {from: hf/gqa, n_kv_head: 2, tie_embeddings: true}\n" + jobs);
  EXPECT_EQ(ok.jobs[0].model.kv_heads(), 2);
  EXPECT_TRUE(ok.jobs[0].model.tie_embeddings);
  // A job longer than the model's positions: at the seq_len that made it so.
  msg = error(std::string(kFromHead) + "  m: {from: hf/llama}\n" +
                  "jobs:\n  - {model: m, batch_size: 4, seq_len: 65}\n",
              6, 40, "jobs[0].seq_len");
  EXPECT_CONTAINS(msg, "exceeds the 64 positions of model 'm' (max_position_embeddings");
  msg = error(std::string(kFromHead) + "  m: {from: hf/llama}\n" + jobs + "export: onnx\n", 7, 9,
              "export");
}

// `saturn submit`: a submission's jobs join the batch; every mistake names the submission's
// file, line and field, and nothing of a refused one is added.
class SubmissionTest : public WorkloadTest {
 protected:
  Workload batch() {
    // kHead's 4 lines with a default batch size.
    return load(
        "data: {train: data/train.bin, val: data/val.bin}\n"
        "defaults: {steps: 100, batch_size: 4}\n"
        "models:\n  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n"
        "jobs:\n  - {name: one, model: small}\n");
  }
  Submission sub(const std::string& name, const std::string& yaml) {
    const fs::path p = dir_ / name;
    write_file(p, yaml);
    return {p, yaml};
  }
  // The message for the last of `subs`; it must start with "FILE:LINE:COL: FIELD:".
  std::string refused(const std::vector<Submission>& subs, int line, int col,
                      const std::string& field) {
    const Workload w = batch();
    const std::string msg = error_of<InputError>([&] { add_submissions(w, subs); });
    const std::string where = subs.back().source.string() + ":" + std::to_string(line) + ":" +
                              std::to_string(col) + ": " + field + ":";
    EXPECT_EQ(msg.rfind(where, 0), 0u) << "expected prefix: " << where << "\nmessage: " << msg;
    return msg;
  }
};

TEST_F(SubmissionTest, JobsJoinWithTheBatchsModelsDefaultsAndData) {
  const Workload w = batch();
  const Submission s = sub("more.yaml",
                           "models:\n  big: {arch: llama, n_layer: 2, n_head: 4, d_model: 64}\n"
                           "defaults: {batch_size: 8}\n"
                           "jobs:\n  - {name: two, model: small, lr: 1e-3}\n"
                           "  - {sweep: {model: big, lr: [1e-3, 2e-3]}}\n");
  const Workload all = add_submissions(w, {s});
  ASSERT_EQ(all.jobs.size(), 4u);
  EXPECT_EQ(all.jobs[0].id, "one");
  EXPECT_EQ(all.jobs[1].id, "two");
  EXPECT_EQ(all.jobs[1].train.steps, 100);      // the batch's defaults...
  EXPECT_EQ(all.jobs[1].train.batch_size, 8);   // ...under the submission's
  EXPECT_EQ(all.jobs[2].id, "big-lr1e-3-bs8");  // its own model
  EXPECT_TRUE(all.jobs[1].train_data.empty());  // the batch's data
  EXPECT_EQ(all.jobs[1].where.rfind(s.source.string() + ":5:5: jobs[0]", 0), 0u)
      << all.jobs[1].where;
  // Jobs of submissions the batch already holds are made again, not twice.
  const Workload again = add_submissions(all, {s});
  EXPECT_EQ(again.jobs.size(), 4u);
}

// The batch's own jobs are counted when it is loaded (own_jobs) and submissions parse against
// the text it was loaded from: editing or removing the workload file afterwards (a resumed
// `saturn sbatch` names the user's file) changes neither which jobs are the batch's nor the
// defaults and models its submissions take.
TEST_F(SubmissionTest, TheBatchIsTheTextItWasLoadedFrom) {
  const Workload w = batch();
  EXPECT_EQ(w.own_jobs, 1u);
  const Submission s = sub("more.yaml", "jobs:\n  - {name: two, model: small, lr: 1e-3}\n");
  const Workload all = add_submissions(w, {s});
  ASSERT_EQ(all.own_jobs, 1u);
  ASSERT_EQ(all.jobs.size(), 2u);
  // The file now holds three jobs, other defaults and no model 'small'.
  write(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults: {steps: 7, batch_size: 2}\n"
      "models:\n  tiny: {arch: gpt2, n_layer: 1, n_head: 4, d_model: 64}\n"
      "jobs:\n  - {name: x, model: tiny}\n  - {name: y, model: tiny}\n"
      "  - {name: z, model: tiny}\n");
  const Workload again = add_submissions(all, {s});
  ASSERT_EQ(again.jobs.size(), 2u);
  EXPECT_EQ(again.jobs[0].id, "one");
  EXPECT_EQ(again.jobs[1].id, "two");
  EXPECT_EQ(again.jobs[1].train.steps, 100);  // the loaded batch's defaults, not the file's 7
  EXPECT_EQ(again.jobs[1].train.batch_size, 4);
  fs::remove(dir_ / "w.yaml");
  EXPECT_EQ(add_submissions(all, {s}).jobs.size(), 2u);
  // A Workload not made by load_workload has no text to parse submissions against: an error
  // that says so, not a guess.
  Workload hand = w;
  hand.source_text.clear();
  EXPECT_NE(error_of<Error>([&] { add_submissions(hand, {s}); }).find("its text and own jobs"),
            std::string::npos);
}

TEST_F(SubmissionTest, OwnData) {
  const Submission s = sub("more.yaml",
                           "data: {train: data/train.bin, val: data/val.bin}\n"
                           "jobs:\n  - {name: two, model: small, batch_size: 4}\n");
  const Workload all = add_submissions(batch(), {s});
  EXPECT_EQ(all.jobs[1].train_data, fs::absolute(dir_ / "data/train.bin").lexically_normal());
  const std::string msg = refused(
      {sub("nodata.yaml", "data: {train: nope.bin, val: data/val.bin}\njobs: [{model: small}]\n")},
      1, 15, "data.train");
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST_F(SubmissionTest, Mistakes) {
  std::string msg =
      refused({sub("dup.yaml", "jobs:\n  - {name: one, model: small}\n")}, 2, 5, "jobs[0]");
  EXPECT_NE(msg.find("job id 'one' is already in the batch (jobs[0] at 6:5 of "), std::string::npos)
      << msg;
  // Against earlier submissions too.
  const Submission first = sub("first.yaml", "jobs:\n  - {name: two, model: small}\n");
  msg = refused({first, sub("second.yaml",
                            "jobs:\n  - {name: three, model: small}\n"
                            "  - {name: two, model: small}\n")},
                3, 5, "jobs[1]");
  EXPECT_NE(msg.find("first.yaml"), std::string::npos) << msg;
  msg = error_of<InputError>(
      [&] { add_submissions(batch(), {sub("bad.yaml", "jobs:\n  - {name: x, model: small\n")}); });
  EXPECT_NE(msg.find("bad.yaml:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed YAML"), std::string::npos) << msg;
  msg = refused({sub("key.yaml", "jobs:\n  - {name: x, model: small, lrr: 1}\n")}, 2, 29,
                "jobs[0].lrr");
  EXPECT_NE(msg.find("unknown key 'lrr'"), std::string::npos) << msg;
  refused({sub("top.yaml", "strategies: [ddp]\njobs: [{model: small}]\n")}, 1, 1, "strategies");
  msg = refused({sub("model.yaml", "jobs:\n  - {name: x, model: huge}\n")}, 2, 22, "jobs[0].model");
  EXPECT_NE(msg.find("unknown model 'huge'"), std::string::npos) << msg;
  msg = refused({sub("same.yaml",
                     "models:\n  small: {arch: gpt2, n_layer: 1, n_head: 4, "
                     "d_model: 64}\njobs: [{model: small}]\n")},
                2, 3, "models.small");
  EXPECT_NE(msg.find("already the batch's"), std::string::npos) << msg;
  refused({sub("empty.yaml", "")}, 1, 1, "submission");
  refused({sub("nojobs.yaml", "defaults: {steps: 5}\n")}, 1, 1, "jobs");
}

TEST_F(SubmissionTest, SelectingBatchTakesNone) {
  const Workload w = load(
      "data: {train: data/train.bin, val: data/val.bin}\n"
      "defaults: {steps: 100, eval_every: 10}\n"
      "models:\n  small: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n"
      "jobs:\n  - {name: one, model: small, batch_size: 4}\n"
      "selection: {method: asha, min_steps: 10, reduction_factor: 2}\n");
  const std::string msg = error_of<InputError>(
      [&] { add_submissions(w, {sub("s.yaml", "jobs:\n  - {name: two, model: small}\n")}); });
  EXPECT_NE(msg.find("adding jobs to a selecting batch is not supported"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace saturn
