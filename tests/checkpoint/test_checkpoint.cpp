// Checkpoints on one process: the checksum, flat-range boxes, metadata round trip, file naming,
// `latest` and retention, corruption and truncation detection, model mismatch, inspect and the
// safetensors export.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/checkpoint/store.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/checkpoint/train_io.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

namespace saturn::ckpt {
namespace {

namespace fs = std::filesystem;
using namespace saturn::ckpt::testing;

std::string read_all(std::ifstream& in) {
  const auto here = in.tellg();
  in.seekg(0, std::ios::end);
  const auto end = in.tellg();
  in.seekg(here);
  std::string out(static_cast<std::size_t>(end - here), '\0');
  in.read(out.data(), static_cast<std::streamsize>(out.size()));
  return out;
}

TEST(Checksum, EverySingleElementChangeAndSwapIsSeen) {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.25f - 3.0f;
  const std::uint64_t base = hash_run(0, v.data(), v.size());
  for (std::size_t i = 0; i < v.size(); i += 37) {
    for (int bit : {0, 13, 31}) {
      auto w = v;
      std::uint32_t u;
      std::memcpy(&u, &w[i], 4);
      u ^= 1u << bit;
      std::memcpy(&w[i], &u, 4);
      EXPECT_NE(hash_run(0, w.data(), w.size()), base) << i << " bit " << bit;
    }
  }
  auto swapped = v;
  std::swap(swapped[3], swapped[700]);
  EXPECT_NE(hash_run(0, swapped.data(), swapped.size()), base);
  // Additive over pieces: any split gives the same sum.
  EXPECT_EQ(hash_run(0, v.data(), 400) + hash_run(400, v.data() + 400, 600), base);
}

TEST(Checksum, KnownValue) {
  // Pinned so that the algorithm (documented in docs/checkpoints.md, recomputed by the h5py
  // test) cannot drift: element 0 = 1.0f (bits 0x3f800000), element 1 = -2.0f (0xc0000000).
  const float v[2] = {1.0f, -2.0f};
  auto mix = [](std::uint64_t x) {
    x ^= x >> 32;
    x *= 0xD6E8FEB86659FD93ull;
    return x ^ (x >> 32);
  };
  const std::uint64_t want = mix(0x3f800000ull) + mix(0x9E3779B97F4A7C15ull + 0xc0000000ull);
  EXPECT_EQ(hash_run(0, v, 2), want);
  EXPECT_EQ(format_checksum(0xabcull), "0x0000000000000abc");
}

TEST(Checksum, BoxEqualsTheSameElementsAsRuns) {
  const std::vector<std::int64_t> shape{5, 7, 3};
  std::vector<float> all(105);
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<float>(i * i % 17);
  const Box b{{1, 2, 1}, {3, 4, 2}};
  std::vector<float> packed;
  std::uint64_t want = 0;
  for_each_element(shape, b, [&](std::int64_t flat, std::int64_t) {
    packed.push_back(all[static_cast<std::size_t>(flat)]);
    want += hash_run(static_cast<std::uint64_t>(flat), &all[static_cast<std::size_t>(flat)], 1);
  });
  EXPECT_EQ(hash_box(shape, b.start, b.count, packed.data()), want);
  EXPECT_EQ(hash_box(shape, {0, 0, 0}, shape, all.data()), hash_run(0, all.data(), all.size()));
}

TEST(Slices, FlatRangeBoxesTileEveryRangeInOrder) {
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{13}, {4, 5}, {3, 4, 5}, {2, 1, 3, 2}}) {
    const std::int64_t n = numel(shape);
    for (std::int64_t lo = 0; lo <= n; ++lo)
      for (std::int64_t hi = lo; hi <= n; ++hi) {
        const auto boxes = flat_range_boxes(shape, lo, hi);
        EXPECT_LE(boxes.size(), 2 * shape.size());
        std::int64_t next = lo;
        for (const Box& b : boxes)
          for_each_element(shape, b, [&](std::int64_t flat, std::int64_t) {
            EXPECT_EQ(flat, next) << "shape rank " << shape.size() << " [" << lo << "," << hi
                                  << ")";
            ++next;
          });
        EXPECT_EQ(next, hi);
      }
  }
}

TEST(Slices, FlatRangeSlicesOfTheLayoutPointIntoTheShard) {
  const ParameterLayout layout(small_model(Arch::kGpt2));
  std::vector<float> flat(layout.total());
  for (std::size_t i = 0; i < flat.size(); ++i) flat[i] = static_cast<float>(i);
  const std::size_t lo = 1000, hi = 3000;
  const StateSlices s = flat_range_slices(layout, lo, hi, flat.data() + lo);
  std::int64_t total = 0;
  for (const auto& sl : s) {
    const auto& t = layout.find(sl.name);
    for_each_element(sl.shape, Box{sl.start, sl.count}, [&](std::int64_t f, std::int64_t pos) {
      EXPECT_EQ(sl.data[pos], static_cast<float>(t.offset + static_cast<std::size_t>(f)));
    });
    total += sl.elements();
  }
  EXPECT_EQ(total, static_cast<std::int64_t>(hi - lo));
}

TEST(Store, StepFileNames) {
  EXPECT_EQ(step_file_name(500), "step-00000500.h5");
  EXPECT_EQ(step_file_name(123456789), "step-123456789.h5");
  EXPECT_EQ(parse_step_file_name("step-00000500.h5"), 500);
  EXPECT_EQ(parse_step_file_name("step-123456789.h5"), 123456789);
  EXPECT_FALSE(parse_step_file_name("step-00000500.h5.tmp"));
  EXPECT_FALSE(parse_step_file_name("latest"));
  EXPECT_FALSE(parse_step_file_name("step-abc.h5"));
}

class OneProcess : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = shared_temp_dir(MPI_COMM_SELF, "unit"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(OneProcess, MetadataRoundTrips) {
  ModelConfig model = small_model(Arch::kLlama);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
  fill_known(w, 1);
  CheckpointMeta meta = meta_for(model, 42, 1);
  meta.schedule_step = 40;
  meta.train.optimizer.lr = 1.5e-3;
  meta.train.checkpoint_every = 7;
  write_checkpoint(MPI_COMM_SELF, dir_ / "m.h5", meta, w.view());
  const CheckpointMeta r = read_meta(MPI_COMM_SELF, dir_ / "m.h5");
  EXPECT_EQ(r.job_id, meta.job_id);
  EXPECT_EQ(r.step, 42);
  EXPECT_EQ(r.schedule_step, 40);
  EXPECT_EQ(r.schedule_position(), 40);
  EXPECT_EQ(r.tokens_seen, meta.tokens_seen);
  EXPECT_EQ(r.model.arch, Arch::kLlama);
  EXPECT_EQ(r.model.d_ff, 40);
  EXPECT_EQ(r.model.vocab_size, 37);
  EXPECT_EQ(r.train.optimizer.lr, 1.5e-3);
  EXPECT_EQ(r.train.checkpoint_every, 7);
  EXPECT_EQ(r.strategy, "test");
  EXPECT_EQ(r.data_position, "1:42");
  EXPECT_EQ(r.rng_state, meta.rng_state);
  EXPECT_EQ(r.created_utc.size(), 20u);  // 2026-01-02T03:04:05Z
  EXPECT_EQ(r.created_utc.back(), 'Z');
}

TEST_F(OneProcess, LatestMovesLastAndRetentionKeepsK) {
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  SaveOptions opt;
  opt.keep_last = 2;
  // A leftover of an interrupted write: never listed, removed by the next save.
  fs::create_directories(checkpoints_dir(dir_));
  std::ofstream(checkpoints_dir(dir_) / "step-00000099.h5.tmp") << "partial";
  for (int step = 1; step <= 4; ++step) {
    OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
    fill_known(w, step);
    const fs::path f =
        save_step_checkpoint(MPI_COMM_SELF, dir_, meta_for(model, step * 10, 1), w.view(), opt);
    EXPECT_EQ(f.filename(), step_file_name(step * 10));
    EXPECT_EQ(read_latest(dir_), step_file_name(step * 10));
  }
  const auto files = list_checkpoints(dir_);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].filename(), step_file_name(40));
  EXPECT_EQ(files[1].filename(), step_file_name(30));
  EXPECT_FALSE(fs::exists(checkpoints_dir(dir_) / "step-00000099.h5.tmp"));
  EXPECT_FALSE(fs::exists(checkpoints_dir(dir_) / "latest.tmp"));
  OwnedState r = make_state(layout, Decomp::kRows, 0, 1);
  const auto loaded = load_newest_valid(MPI_COMM_SELF, dir_, r.view());
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->meta.step, 40);
  EXPECT_EQ(count_mismatches(r, 4), 0);
  // final.h5: same format, `latest` untouched.
  save_final_checkpoint(MPI_COMM_SELF, dir_, meta_for(model, 45, 1), r.view());
  EXPECT_TRUE(fs::exists(final_path(dir_)));
  EXPECT_EQ(read_latest(dir_), step_file_name(40));
  EXPECT_TRUE(inspect_checkpoint(final_path(dir_)).all_ok());
}

TEST_F(OneProcess, NoCheckpointsIsNotAnError) {
  const ParameterLayout layout(small_model(Arch::kGpt2));
  OwnedState r = make_state(layout, Decomp::kRoot, 0, 1);
  EXPECT_FALSE(load_newest_valid(MPI_COMM_SELF, dir_ / "nothing", r.view()));
}

TEST_F(OneProcess, CorruptionIsNamedByFileAndDataset) {
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kReplicas, 0, 1);
  fill_known(w, 5);
  const fs::path f = dir_ / "c.h5";
  write_checkpoint(MPI_COMM_SELF, f, meta_for(model, 5, 1), w.view());
  EXPECT_TRUE(inspect_checkpoint(f).all_ok());
  const std::string ds = "/model/transformer.h.0.attn.c_attn.weight";
  flip_byte(f, dataset_offset(f, ds) + 4 * 77 + 2);
  // Found by the collective read (tiled) ...
  OwnedState r = make_state(layout, Decomp::kFlat, 0, 1);
  try {
    read_checkpoint(MPI_COMM_SELF, f, r.view());
    ADD_FAILURE() << "corruption not detected";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.file(), f);
    EXPECT_EQ(e.dataset(), ds);
    EXPECT_NE(std::string(e.what()).find("checksum mismatch"), std::string::npos) << e.what();
  }
  // ... by inspect ...
  const CheckpointInfo info = inspect_checkpoint(f);
  EXPECT_FALSE(info.all_ok());
  for (const auto& d : info.datasets) EXPECT_EQ(d.ok, d.path != ds) << d.path;
  EXPECT_NE(format_inspection(f, info).find("FAILED (1 of"), std::string::npos);
  // ... and by the export, which leaves no output behind.
  try {
    export_safetensors(f, dir_ / "c.safetensors");
    ADD_FAILURE() << "export of a corrupt checkpoint succeeded";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(e.dataset(), ds);
  }
  EXPECT_FALSE(fs::exists(dir_ / "c.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "c.safetensors.tmp"));
}

TEST_F(OneProcess, TruncatedAndForeignFilesAreReported) {
  const ModelConfig model = small_model(Arch::kLlama);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
  fill_known(w, 5);
  const fs::path f = dir_ / "t.h5";
  write_checkpoint(MPI_COMM_SELF, f, meta_for(model, 5, 1), w.view());
  fs::resize_file(f, fs::file_size(f) - 1000);
  try {
    read_meta(MPI_COMM_SELF, f);
    ADD_FAILURE() << "truncation not detected";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(f.string()), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::ofstream(dir_ / "text.h5") << "not hdf5 at all";
  EXPECT_THROW(read_meta(MPI_COMM_SELF, dir_ / "text.h5"), CheckpointError);
  // An HDF5 file of someone else: "not a Saturn checkpoint".
  const hid_t other =
      H5Fcreate((dir_ / "other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  H5Fclose(other);
  try {
    read_meta(MPI_COMM_SELF, dir_ / "other.h5");
    ADD_FAILURE();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("not a Saturn checkpoint"), std::string::npos);
  }
}

TEST_F(OneProcess, CheckpointsThatAreAllCorruptAreAnErrorNotAFreshStart) {
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
  fill_known(w, 1);
  const fs::path f = save_step_checkpoint(MPI_COMM_SELF, dir_, meta_for(model, 1, 1), w.view());
  flip_byte(f, dataset_offset(f, "/model/transformer.wpe.weight") + 3);
  OwnedState r = make_state(layout, Decomp::kRoot, 0, 1);
  try {
    load_newest_valid(MPI_COMM_SELF, dir_, r.view());
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no valid checkpoint"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/model/transformer.wpe.weight"), std::string::npos);
  }
}

TEST_F(OneProcess, AnotherModelIsAnInputErrorNotAFallback) {
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
  fill_known(w, 1);
  save_step_checkpoint(MPI_COMM_SELF, dir_, meta_for(model, 1, 1), w.view());
  ModelConfig other = model;
  other.d_model = 32;
  const ParameterLayout other_layout(other);
  OwnedState r = make_state(other_layout, Decomp::kRoot, 0, 1);
  ReadOptions opt;
  opt.expect_model = other;
  EXPECT_THROW(load_newest_valid(MPI_COMM_SELF, dir_, r.view(), opt), InputError);
  // A llama whose only difference is a switch (q/k/v biases): the message names both models'
  // switches and the first tensor that differs.
  const ModelConfig llama = small_model(Arch::kLlama);
  const ParameterLayout llama_layout(llama);
  OwnedState lw = make_state(llama_layout, Decomp::kRoot, 0, 1);
  fill_known(lw, 2);
  const fs::path f = dir_ / "llama.h5";
  write_checkpoint(MPI_COMM_SELF, f, meta_for(llama, 1, 1), lw.view());
  ModelConfig biased = llama;
  biased.qkv_bias = true;
  const ParameterLayout biased_layout(biased);
  OwnedState br = make_state(biased_layout, Decomp::kRoot, 0, 1);
  ReadOptions bopt;
  bopt.expect_model = biased;
  try {
    read_checkpoint(MPI_COMM_SELF, f, br.view(), bopt);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("q/k/v biases"), std::string::npos) << msg;
    EXPECT_NE(msg.find("model.layers.0.self_attn.q_proj.bias"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head_dim"), std::string::npos) << msg;
  }
  // The same tensors computing another function (a sliding window): refused, naming the field.
  ModelConfig windowed = llama;
  windowed.sliding_window = 8;
  ReadOptions wopt;
  wopt.expect_model = windowed;
  OwnedState wr = make_state(llama_layout, Decomp::kRoot, 0, 1);
  try {
    read_checkpoint(MPI_COMM_SELF, f, wr.view(), wopt);
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window = 0, this job's has 8"), std::string::npos)
        << e.what();
  }
}

TEST_F(OneProcess, SafetensorsExportHasTheContractsNamesAndValues) {
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  OwnedState w = make_state(layout, Decomp::kRoot, 0, 1);
  fill_known(w, 9);
  const fs::path f = dir_ / "e.h5";
  write_checkpoint(MPI_COMM_SELF, f, meta_for(model, 9, 1), w.view());
  const fs::path out = dir_ / "e.safetensors";
  EXPECT_EQ(export_safetensors(f, out), layout.tensors().size());
  std::ifstream in(out, std::ios::binary);
  std::uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, '\0');
  in.read(header.data(), static_cast<std::streamsize>(len));
  EXPECT_EQ((8 + len) % 8, 0u);
  const auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["__metadata__"]["step"], "9");
  EXPECT_EQ(j["__metadata__"]["format"], "pt");
  EXPECT_EQ(j.size(), layout.tensors().size() + 1);
  const std::string data = read_all(in);
  for (std::size_t ti = 0; ti < layout.tensors().size(); ++ti) {
    const auto& t = layout.tensors()[ti];
    ASSERT_TRUE(j.contains(t.name)) << t.name;
    EXPECT_EQ(j[t.name]["dtype"], "F32");
    EXPECT_EQ(j[t.name]["shape"].get<std::vector<std::int64_t>>(), t.shape);
    const auto off = j[t.name]["data_offsets"].get<std::vector<std::uint64_t>>();
    ASSERT_EQ(off[1] - off[0], t.numel * 4);
    for (std::size_t i = 0; i < t.numel; i += 7) {
      float v;
      std::memcpy(&v, data.data() + off[0] + i * 4, 4);
      EXPECT_EQ(v, known_value(0, static_cast<int>(ti), static_cast<std::int64_t>(i), 9));
    }
  }
}

TEST_F(OneProcess, SingleDeviceViewAndTrainPoint) {
  ModelConfig model = small_model(Arch::kLlama);
  const ParameterLayout layout(model);
  std::vector<float> p(layout.total()), m(layout.total()), v(layout.total());
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (auto* b : {&p, &m, &v})
    for (auto& x : *b) x = dist(gen);
  JobCheckpointing job;
  job.job_id = "j";
  job.model = model;
  job.train.batch_size = 4;
  job.train.seq_len = 11;
  job.train.checkpoint_every = 5;
  job.job_dir = dir_ / "jobs" / "j";
  EXPECT_FALSE(checkpoint_due(job.train, 4));
  EXPECT_TRUE(checkpoint_due(job.train, 10));
  // 10 steps of 4 sequences: 40, i.e. epoch 2, index 6 of a 17-sequence epoch (positions that
  // contradict the step are not valid).
  TrainPoint pt{10, {2, 6}, ""};
  const auto self = comm::MpiCommunicator::borrow(MPI_COMM_SELF);
  save_training_checkpoint(*self, job, pt,
                           single_device_view(layout, p.data(), m.data(), v.data()));
  std::vector<float> p2(p.size()), m2(m.size()), v2(v.size());
  const auto back =
      resume_training(*self, job, single_device_view(layout, p2.data(), m2.data(), v2.data()));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->step, 10);
  EXPECT_EQ(back->position, (data::LoaderPosition{2, 6}));
  EXPECT_EQ(back->rng_state, "{\"seed\":1234}");
  EXPECT_EQ(std::memcmp(p.data(), p2.data(), p.size() * 4), 0);
  EXPECT_EQ(std::memcmp(m.data(), m2.data(), m.size() * 4), 0);
  EXPECT_EQ(std::memcmp(v.data(), v2.data(), v.size() * 4), 0);
  EXPECT_EQ(read_meta(MPI_COMM_SELF, checkpoints_dir(job.job_dir) / step_file_name(10)).tokens_seen,
            10 * 4 * 11);
}

TEST_F(OneProcess, MetricsAreTruncatedToTheResumedStep) {
  const fs::path f = dir_ / "metrics.jsonl";
  std::ofstream(f) << "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n{\"step\":3,\"loss\":1}\n";
  truncate_metrics(f, 2);
  std::ifstream in(f);
  const std::string all = read_all(in);
  EXPECT_EQ(all, "{\"step\":1,\"loss\":3}\n{\"step\":2,\"loss\":2}\n");
}

}  // namespace
}  // namespace saturn::ckpt
