// Collective checkpoints on 1, 2 and 4 ranks: every decomposition written, read back under every
// other decomposition (resharding), bit for bit; sub-communicators writing their own files at
// once; failures agreed by all ranks (no hang) and reported by file and dataset.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <fstream>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/store.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

namespace saturn::ckpt {
namespace {

namespace fs = std::filesystem;
using namespace saturn::ckpt::testing;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// True on every rank iff true on all ranks (rank-consistent assertions).
bool all_ranks(bool ok, MPI_Comm comm = MPI_COMM_WORLD) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm);
  return all == 1;
}

class Resharding : public ::testing::TestWithParam<Arch> {};

TEST_P(Resharding, EveryDecompositionReadsBackUnderEveryOther) {
  const int P = world_size(), me = world_rank();
  const ModelConfig model = small_model(GetParam());
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "reshard");
  int gen = 0;
  for (Decomp w : all_decomps()) {
    ++gen;
    OwnedState written = make_state(layout, w, me, P);
    fill_known(written, gen);
    const fs::path file = dir / fmt::format("{}.h5", decomp_name(w));
    write_checkpoint(MPI_COMM_WORLD, file, meta_for(model, gen, P), written.view());
    ASSERT_TRUE(fs::exists(file));
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
    for (Decomp r : all_decomps()) {
      OwnedState read = make_state(layout, r, me, P);
      const CheckpointMeta meta = read_checkpoint(MPI_COMM_WORLD, file, read.view());
      EXPECT_EQ(meta.step, gen);
      EXPECT_EQ(meta.devices, P);
      EXPECT_EQ(meta.data_position, "1:" + std::to_string(gen));
      EXPECT_TRUE(all_ranks(count_mismatches(read, gen) == 0))
          << "written as " << decomp_name(w) << ", read as " << decomp_name(r);
    }
  }
  if (me == 0) fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Archs, Resharding, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& p) { return std::string(arch_name(p.param)); });

TEST(CheckpointMpi, WeightsOnlyAndPartialReads) {
  const int P = world_size(), me = world_rank();
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "partial");
  OwnedState w = make_state(layout, Decomp::kFlat, me, P, /*with_optimizer=*/false);
  fill_known(w, 3);
  write_checkpoint(MPI_COMM_WORLD, dir / "w.h5", meta_for(model, 3, P), w.view());
  // Only rank 0 reads, and only one tensor's rows: the rest is verified by the split pass.
  OwnedState r;
  if (me == 0) {
    OwnedState all = make_state(layout, Decomp::kRows, 0, 2, false);
    r.kinds[0].storage.push_back(std::move(all.kinds[0].storage[0]));
    r.kinds[0].slices.push_back(all.kinds[0].slices[0]);
    r.kinds[0].slices[0].data = r.kinds[0].storage[0].data();
    r.kinds[0].tensor_of.push_back(0);
  }
  read_checkpoint(MPI_COMM_WORLD, dir / "w.h5", r.view());
  EXPECT_EQ(count_mismatches(r, 3), 0);
  // Asking for optimizer state from a weights-only file is a clear error on every rank.
  OwnedState wants_m = make_state(layout, Decomp::kRows, me, P, true);
  std::string msg;
  try {
    read_checkpoint(MPI_COMM_WORLD, dir / "w.h5", wants_m.view());
  } catch (const CheckpointError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(all_ranks(msg.find("weights only") != std::string::npos)) << msg;
  if (me == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, SubCommunicatorsWriteTheirOwnFilesAtOnce) {
  const int P = world_size(), me = world_rank();
  const int color = P >= 2 ? me % 2 : 0;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, color, me, &sub);
  int sp = 0, sr = 0;
  MPI_Comm_size(sub, &sp);
  MPI_Comm_rank(sub, &sr);
  const ModelConfig model = small_model(color == 0 ? Arch::kGpt2 : Arch::kLlama);
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "subcomm");
  OwnedState w = make_state(layout, Decomp::kMixed, sr, sp);
  fill_known(w, 10 + color);
  const fs::path job = dir / fmt::format("job{}", color);
  save_step_checkpoint(sub, job, meta_for(model, 5, sp), w.view());
  OwnedState r = make_state(layout, Decomp::kRows, sr, sp);
  const auto loaded = load_newest_valid(sub, job, r.view());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->meta.step, 5);
  EXPECT_TRUE(all_ranks(count_mismatches(r, 10 + color) == 0, sub));
  MPI_Comm_free(&sub);
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, BadSlicesFailOnEveryRankWithoutWriting) {
  const int P = world_size(), me = world_rank();
  const ModelConfig model = small_model(Arch::kLlama);
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "bad");
  // The last rank drops one slice: part of a tensor is held by nobody.
  OwnedState w = make_state(layout, Decomp::kRows, me, P);
  if (me == P - 1) w.kinds[1].slices.erase(w.kinds[1].slices.begin() + 2);
  std::string msg;
  try {
    write_checkpoint(MPI_COMM_WORLD, dir / "x.h5", meta_for(model, 1, P), w.view());
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_TRUE(all_ranks(msg.find("/optimizer/m/") != std::string::npos &&
                        msg.find("cover") != std::string::npos))
      << msg;
  EXPECT_FALSE(fs::exists(dir / "x.h5"));
  EXPECT_FALSE(fs::exists(dir / "x.h5.tmp"));
  // Overlapping (not identical) boxes from two ranks are refused too.
  if (P >= 2) {
    OwnedState o = make_state(layout, Decomp::kRows, me, P);
    if (me == 1) {
      o.kinds[0].slices[0].start[0] = 1;  // overlaps rank 0's block, not identical to it
    }
    msg.clear();
    try {
      write_checkpoint(MPI_COMM_WORLD, dir / "y.h5", meta_for(model, 1, P), o.view());
    } catch (const Error& e) {
      msg = e.what();
    }
    EXPECT_TRUE(all_ranks(msg.find("overlap") != std::string::npos)) << msg;
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, CorruptOrTruncatedNewestFallsBackOnEveryRank) {
  const int P = world_size(), me = world_rank();
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "fallback");
  for (int step : {10, 20, 30}) {
    OwnedState w = make_state(layout, Decomp::kFlat, me, P);
    fill_known(w, step);
    save_step_checkpoint(MPI_COMM_WORLD, dir, meta_for(model, step, P), w.view());
  }
  const fs::path ck = checkpoints_dir(dir);
  const std::string target = "/optimizer/v/transformer.h.1.mlp.c_fc.weight";
  if (me == 0) {
    // Newest: one flipped bit in a dataset's data. Second newest: truncated.
    flip_byte(ck / step_file_name(30), dataset_offset(ck / step_file_name(30), target) + 101);
    fs::resize_file(ck / step_file_name(20), fs::file_size(ck / step_file_name(20)) / 2);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  OwnedState r = make_state(layout, Decomp::kCols, me, P);
  const auto loaded = load_newest_valid(MPI_COMM_WORLD, dir, r.view());
  ASSERT_TRUE(all_ranks(loaded.has_value()));
  EXPECT_EQ(loaded->file.filename(), step_file_name(10));
  ASSERT_EQ(loaded->rejected.size(), 2u);
  EXPECT_NE(loaded->rejected[0].find(step_file_name(30)), std::string::npos);
  EXPECT_NE(loaded->rejected[0].find(target), std::string::npos) << loaded->rejected[0];
  EXPECT_NE(loaded->rejected[0].find("checksum mismatch"), std::string::npos);
  EXPECT_NE(loaded->rejected[1].find(step_file_name(20)), std::string::npos);
  EXPECT_TRUE(all_ranks(count_mismatches(r, 10) == 0));
  // find_newest_valid agrees, without reading into the caller's memory.
  const auto found = find_newest_valid(MPI_COMM_WORLD, dir);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->filename(), step_file_name(10));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fs::remove_all(dir);
}

// A holder like parallel::Strategy: one staging buffer that every export reuses, so a part's
// slices are valid only until the next part is asked for.
TEST(CheckpointMpi, PartByPartThroughOneStagingBuffer) {
  const int P = world_size(), me = world_rank();
  const ModelConfig model = small_model(Arch::kLlama);
  const ParameterLayout layout(model);
  const fs::path dir = shared_temp_dir(MPI_COMM_WORLD, "parts");
  OwnedState held = make_state(layout, Decomp::kMixed, me, P);
  fill_known(held, 4);
  OwnedState staging = make_state(layout, Decomp::kMixed, me, P);
  auto export_part = [&](StatePart part) {
    const auto& from = held.kinds[static_cast<int>(part)];
    StateSlices out = staging.kinds[0].slices;
    for (std::size_t i = 0; i < out.size(); ++i)
      std::copy(from.storage[i].begin(), from.storage[i].end(),
                staging.kinds[0].storage[i].begin());
    return out;
  };
  write_checkpoint(MPI_COMM_WORLD, dir / "p.h5", meta_for(model, 4, P), export_part);
  OwnedState loaded = make_state(layout, Decomp::kMixed, me, P);
  int parts_seen = 0;
  read_checkpoint(
      MPI_COMM_WORLD, dir / "p.h5",
      [&](StatePart) {
        for (auto& b : staging.kinds[0].storage) std::fill(b.begin(), b.end(), -7.0f);
        return staging.kinds[0].slices;
      },
      [&](StatePart part, const StateSlices& filled) {
        auto& to = loaded.kinds[static_cast<int>(part)];
        for (std::size_t i = 0; i < filled.size(); ++i)
          std::copy(filled[i].data, filled[i].data + filled[i].elements(), to.storage[i].begin());
        ++parts_seen;
      });
  EXPECT_EQ(parts_seen, 3);
  EXPECT_TRUE(all_ranks(count_mismatches(loaded, 4) == 0));
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) fs::remove_all(dir);
}

TEST(CheckpointMpi, MissingFileIsAnErrorOnEveryRank) {
  std::string msg;
  try {
    read_meta(MPI_COMM_WORLD, "/nonexistent/dir/step-00000001.h5");
  } catch (const CheckpointError& e) {
    msg = e.what();
  }
  EXPECT_TRUE(all_ranks(msg.find("step-00000001.h5") != std::string::npos)) << msg;
}

}  // namespace
}  // namespace saturn::ckpt
