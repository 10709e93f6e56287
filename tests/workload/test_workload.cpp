#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "runtime/core/error.hpp"
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
    write_file(dir_ / "data/train.bin", "x");
    write_file(dir_ / "data/val.bin", "x");
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
  EXPECT_CONTAINS(msg, "-0.0003 is out of range (valid: a number > 0)");
  msg = error(jobs + "  - sweep: {model: small, batch_size: [4], lr: [1e-3, 0]}\n", 6, 55,
              "jobs[0].sweep.lr[1]");
  EXPECT_CONTAINS(msg, "valid: a number > 0");
  msg = error(jobs + "  - {model: small, batch_size: 0}\n", 6, 32, "jobs[0].batch_size");
  EXPECT_CONTAINS(msg, "0 is out of range (valid: an integer >= 1)");
  msg = error(jobs + "  - {model: small, batch_size: 1, steps: 0}\n", 6, 42, "jobs[0].steps");
  EXPECT_CONTAINS(msg, "valid: an integer >= 1");
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
                  "constant)");
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
  EXPECT_CONTAINS(msg, "valid: an integer >= 1");
  msg = error(head + "  small: {arch: llama, n_layer: 1, n_head: 4, d_model: 4}\n" + jobs, 3, 10,
              "models.small");
  EXPECT_CONTAINS(msg, "even head dimension");
  msg = error(head + "  small: {arch: gpt2, n_layer: 2, n_head: 4}\n" + jobs, 3, 10,
              "models.small.d_model");
  EXPECT_CONTAINS(msg, "missing (required: arch, n_layer, n_head, d_model)");
  msg = error(head + "  small/x: {arch: gpt2, n_layer: 2, n_head: 4, d_model: 64}\n" + jobs, 3, 3,
              "models");
  EXPECT_CONTAINS(msg, "not a plain name");
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

}  // namespace
}  // namespace saturn
