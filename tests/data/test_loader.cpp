#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/data/token_file.hpp"
#include "tests/data/test_util.hpp"

namespace saturn::data {
namespace {

using saturn::testing::error_of;
using saturn::testing::TempDir;

// Token i has value i (mod 2^32), so a window shows where it came from.
TokenArray counting(std::uint32_t n) {
  std::vector<std::uint32_t> t(n);
  std::iota(t.begin(), t.end(), 0u);
  return TokenArray::from_tokens(std::move(t), "counting");
}

TEST(SplitMix64, ReferenceOutput) {
  // The published reference sequence for seed 0.
  SplitMix64 r(0);
  EXPECT_EQ(r.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(r.next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(r.next(), 0x06C45D188009454Full);
}

TEST(EpochPermutation, IsAPermutationAndPinned) {
  const auto p = epoch_permutation(1000, 1234, 0);
  std::vector<std::uint64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, epoch_permutation(1000, 1234, 1));
  EXPECT_NE(p, epoch_permutation(1000, 1235, 0));
  EXPECT_EQ(p, epoch_permutation(1000, 1234, 0));
  // Pinned so that a change of the documented algorithm (which would silently change every
  // run's data order and break resuming old checkpoints) fails here.
  // (Computed by an independent Python implementation of the documented algorithm.)
  const std::vector<std::uint64_t> expected = {9, 5, 8, 2, 7, 3, 6, 4, 0, 1};
  EXPECT_EQ(epoch_permutation(10, 1234, 0), expected);
  EXPECT_TRUE(epoch_permutation(0, 1, 0).empty());
  EXPECT_EQ(epoch_permutation(1, 1, 0), std::vector<std::uint64_t>{0});
}

TEST(TokenLoader, WindowsInputsAndTargets) {
  TokenLoader l(counting(101), 10, 7, Order::kSequential);
  EXPECT_EQ(l.num_sequences(), 10u);  // (101 - 1) / 10
  EXPECT_EQ(TokenLoader(counting(100), 10, 7).num_sequences(), 9u);
  const Batch b = l.next_batch(3);
  EXPECT_EQ(b.batch_size, 3);
  EXPECT_EQ(b.seq_len, 10);
  ASSERT_EQ(b.inputs.size(), 30u);
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 10; ++t) {
      EXPECT_EQ(b.inputs[r * 10 + t], r * 10 + t);
      EXPECT_EQ(b.targets[r * 10 + t], r * 10 + t + 1);
    }
  EXPECT_EQ(l.position(), (LoaderPosition{0, 3}));
}

// Instruction data: a target whose token's mask byte is 0 is -1 (no loss); inputs are kept.
TEST(TokenLoader, LossMaskMarksUntrainedTargets) {
  TokenLoader l(counting(101), 10, 7);
  std::vector<std::uint8_t> mask(101);
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = (i / 3) % 2 == 0 ? 1 : 0;
  l.set_loss_mask(mask);
  EXPECT_TRUE(l.masked());
  const Batch b = l.next_batch(4);
  int trained = 0;
  for (std::size_t i = 0; i < b.targets.size(); ++i) {
    const std::int32_t token = b.inputs[i] + 1;  // counting: the target is the next token
    EXPECT_EQ(b.targets[i], mask[static_cast<std::size_t>(token)] ? token : -1) << i;
    trained += b.targets[i] >= 0;
  }
  EXPECT_GT(trained, 0);
  EXPECT_LT(trained, 40);
  EXPECT_THROW(l.set_loss_mask(std::vector<std::uint8_t>(100, 1)), Error);
}

TEST(LossMask, BesideItsTokenFileAndChecked) {
  TempDir dir;
  const auto tokens = dir.path() / "train.bin";
  write_llmc_tokens(tokens, std::vector<std::uint16_t>(50, 3));
  EXPECT_EQ(loss_mask_path(tokens), dir.path() / "train.mask");
  TokenLoader l(TokenArray::open(tokens), 8, 1);
  EXPECT_FALSE(load_loss_mask_beside(l, tokens));  // none yet: plain text
  write_loss_mask(loss_mask_path(tokens), std::vector<std::uint8_t>(49, 1));
  EXPECT_NE(error_of<InputError>([&] { load_loss_mask_beside(l, tokens); }).find("49 bytes"),
            std::string::npos);
  std::vector<std::uint8_t> bad(50, 1);
  bad[7] = 2;
  write_loss_mask(loss_mask_path(tokens), bad);
  EXPECT_NE(error_of<InputError>([&] { load_loss_mask_beside(l, tokens); }).find("byte 7 is 2"),
            std::string::npos);
  write_loss_mask(loss_mask_path(tokens), std::vector<std::uint8_t>(50, 1));
  EXPECT_TRUE(load_loss_mask_beside(l, tokens));
  EXPECT_TRUE(l.masked());
}

// Packing without cross-attention, by the documented rule: input token n of a window starting at
// s has position n - max(record_start(n), s); its target is -1 when token n+1 starts a record
// or (with a mask) the mask of n+1 is 0.
void expect_packed_rows(const Batch& b, const std::vector<std::uint64_t>& window_starts,
                        const std::vector<std::uint64_t>& starts,
                        const std::vector<std::uint8_t>& mask) {
  const auto T = static_cast<std::uint64_t>(b.seq_len);
  ASSERT_EQ(b.positions.size(), b.inputs.size());
  for (std::size_t r = 0; r < window_starts.size(); ++r) {
    const std::uint64_t s = window_starts[r];
    for (std::uint64_t t = 0; t < T; ++t) {
      const std::uint64_t n = s + t;
      const std::uint64_t record = *std::prev(std::upper_bound(starts.begin(), starts.end(), n));
      const bool starts_record = std::binary_search(starts.begin(), starts.end(), n + 1);
      const bool untrained = !mask.empty() && mask[n + 1] == 0;
      const std::size_t i = r * T + t;
      EXPECT_EQ(b.inputs[i], static_cast<std::int32_t>(n)) << "row " << r << " t " << t;
      EXPECT_EQ(b.positions[i], static_cast<std::int32_t>(n - std::max(record, s)))
          << "row " << r << " t " << t;
      EXPECT_EQ(b.targets[i], starts_record || untrained ? -1 : static_cast<std::int32_t>(n + 1))
          << "row " << r << " t " << t;
    }
  }
}

TEST(TokenLoader, PackedPositionsRestartPerRecordAndWindow) {
  // Windows of 8 start at 0, 8, 16, 24, 32. Records start at 0, 3, 8 (exactly at a window's
  // start), 13, 17 (cut by the window at 16), 30 and 40 (the last token: only a target).
  const std::vector<std::uint64_t> starts = {0, 3, 8, 13, 17, 30, 40};
  TokenLoader l(counting(41), 8, 1, Order::kSequential);
  EXPECT_FALSE(l.packed());
  EXPECT_TRUE(l.next_batch(1).positions.empty());  // not packed: no positions
  l.set_record_starts(starts);
  EXPECT_TRUE(l.packed());
  l.seek({0, 0});
  const Batch b = l.next_batch(5);
  // Spelled out for the first three windows.
  const std::vector<std::int32_t> pos0 = {0, 1, 2, 0, 1, 2, 3, 4},
                                  tgt0 = {1, 2, -1, 4, 5, 6, 7, -1};
  const std::vector<std::int32_t> pos1 = {0, 1, 2, 3, 4, 0, 1, 2},
                                  tgt1 = {9, 10, 11, 12, -1, 14, 15, 16};
  const std::vector<std::int32_t> pos2 = {0, 0, 1, 2, 3, 4, 5, 6},
                                  tgt2 = {-1, 18, 19, 20, 21, 22, 23, 24};
  EXPECT_EQ(std::vector<std::int32_t>(b.positions.begin(), b.positions.begin() + 8), pos0);
  EXPECT_EQ(std::vector<std::int32_t>(b.targets.begin(), b.targets.begin() + 8), tgt0);
  EXPECT_EQ(std::vector<std::int32_t>(b.positions.begin() + 8, b.positions.begin() + 16), pos1);
  EXPECT_EQ(std::vector<std::int32_t>(b.targets.begin() + 8, b.targets.begin() + 16), tgt1);
  EXPECT_EQ(std::vector<std::int32_t>(b.positions.begin() + 16, b.positions.begin() + 24), pos2);
  EXPECT_EQ(std::vector<std::int32_t>(b.targets.begin() + 16, b.targets.begin() + 24), tgt2);
  EXPECT_EQ(b.targets[39], -1);  // token 40 starts a record
  expect_packed_rows(b, {0, 8, 16, 24, 32}, starts, {});

  // With a loss mask: both rules.
  std::vector<std::uint8_t> mask(41);
  for (std::size_t i = 0; i < mask.size(); ++i) mask[i] = i % 5 == 0 ? 0 : 1;
  l.set_loss_mask(mask);
  l.seek({0, 0});
  expect_packed_rows(l.next_batch(5), {0, 8, 16, 24, 32}, starts, mask);

  // The caller-buffer overload: the same rows, positions only when asked for.
  l.seek({0, 1});
  std::vector<std::int32_t> in(16), tg(16), pos(16, -7);
  l.next_batch(2, in.data(), tg.data(), pos.data());
  const Batch same = [&] {
    l.seek({0, 1});
    return l.next_batch(2);
  }();
  EXPECT_EQ(in, same.inputs);
  EXPECT_EQ(tg, same.targets);
  EXPECT_EQ(pos, same.positions);
  l.seek({0, 1});
  l.next_batch(2, in.data(), tg.data());  // no positions buffer: targets still packed
  EXPECT_EQ(tg, same.targets);

  // Starts that do not fit the tokens.
  TokenLoader bad(counting(41), 8, 1);
  EXPECT_THROW(bad.set_record_starts({}), Error);
  EXPECT_THROW(bad.set_record_starts({1, 5}), Error);
  EXPECT_THROW(bad.set_record_starts({0, 5, 5}), Error);
  EXPECT_THROW(bad.set_record_starts({0, 41}), Error);
  EXPECT_FALSE(bad.packed());
}

TEST(TokenLoader, PackedShardsEqualTheGlobalBatch) {
  std::vector<std::uint64_t> starts = {0};
  while (starts.back() < 3900) starts.push_back(starts.back() + 1 + (starts.back() * 7) % 23);
  constexpr int kShards = 3;
  constexpr std::int64_t kBatch = 7;
  TokenLoader global(counting(4000), 16, 5);
  global.set_record_starts(starts);
  std::vector<TokenLoader> ranks(kShards, global);
  for (int step = 0; step < 20; ++step) {
    std::vector<std::uint64_t> window_starts;
    for (std::int64_t r = 0; r < kBatch; ++r) {
      LoaderPosition p = global.position();
      p.index += static_cast<std::uint64_t>(r);
      if (p.index >= global.num_sequences()) p = {p.epoch + 1, p.index - global.num_sequences()};
      window_starts.push_back(global.window_start(p));
    }
    const Batch g = global.next_batch(kBatch);
    expect_packed_rows(g, window_starts, starts, {});
    Batch joined;
    for (int s = 0; s < kShards; ++s) {
      const Batch part = ranks[s].next_shard(kBatch, s, kShards);
      joined.inputs.insert(joined.inputs.end(), part.inputs.begin(), part.inputs.end());
      joined.targets.insert(joined.targets.end(), part.targets.begin(), part.targets.end());
      joined.positions.insert(joined.positions.end(), part.positions.begin(), part.positions.end());
    }
    ASSERT_EQ(joined.inputs, g.inputs) << "step " << step;
    ASSERT_EQ(joined.targets, g.targets) << "step " << step;
    ASSERT_EQ(joined.positions, g.positions) << "step " << step;
  }
}

TEST(RecordStarts, BesideItsTokenFileAndChecked) {
  TempDir dir;
  const auto tokens = dir.path() / "train.bin";
  write_llmc_tokens(tokens, std::vector<std::uint16_t>(50, 3));
  const auto records = record_starts_path(tokens);
  EXPECT_EQ(records, dir.path() / "train.records");
  EXPECT_EQ(record_starts_path(dir.path() / "val.h5"), dir.path() / "val.records");
  TokenLoader l(TokenArray::open(tokens), 8, 1);
  EXPECT_FALSE(load_record_starts_beside(l, tokens));  // none: plain text
  EXPECT_FALSE(l.packed());
  EXPECT_CONTAINS(error_of<InputError>([&] { read_record_starts(records, 50); }),
                  records.string() + " does not exist");

  // The format: uint64 little-endian, no header.
  write_record_starts(records, std::vector<std::uint64_t>{0, 7, 300});
  const std::string bytes = saturn::testing::read_file(records);
  ASSERT_EQ(bytes.size(), 24u);
  EXPECT_EQ(static_cast<unsigned char>(bytes[8]), 7);
  EXPECT_EQ(static_cast<unsigned char>(bytes[16]), 300 % 256);
  EXPECT_EQ(static_cast<unsigned char>(bytes[17]), 1);
  EXPECT_EQ(read_record_starts(records, 301), (std::vector<std::uint64_t>{0, 7, 300}));

  const auto error_for = [&](std::vector<std::uint64_t> starts, std::uint64_t n) {
    write_record_starts(records, starts);
    const std::string msg = error_of<InputError>([&] { read_record_starts(records, n); });
    EXPECT_CONTAINS(msg, records.string());
    return msg;
  };
  EXPECT_CONTAINS(error_for({0, 7, 300}, 300),
                  "record 2 starts at token 300, but the token "
                  "file has 300 tokens");
  EXPECT_CONTAINS(error_for({}, 10), "the file holds no record");
  EXPECT_CONTAINS(error_for({2, 5}, 10), "the first start is 2");
  EXPECT_CONTAINS(error_for({0, 5, 5}, 10), "start 2 is 5, not above start 1 (5)");
  EXPECT_CONTAINS(error_for({0, 5, 3}, 10), "start 2 is 3, not above start 1 (5)");
  saturn::testing::write_file(records, std::string(12, '\0'));
  EXPECT_CONTAINS(error_of<InputError>([&] { read_record_starts(records, 10); }),
                  "hold 12 bytes, not a multiple of 8");
  EXPECT_THROW(load_record_starts_beside(l, tokens), InputError);
  EXPECT_FALSE(l.packed());

  write_record_starts(records, std::vector<std::uint64_t>{0, 20, 49});
  EXPECT_TRUE(load_record_starts_beside(l, tokens));
  EXPECT_TRUE(l.packed());
}

TEST(TokenLoader, TooShortData) {
  const std::string msg = error_of<InputError>([] { TokenLoader(counting(64), 64, 1); });
  EXPECT_CONTAINS(msg, "data file counting has 64 tokens; seq_len 64 needs at least 65");
  EXPECT_NO_THROW(TokenLoader(counting(65), 64, 1));
}

TEST(TokenLoader, EachEpochVisitsEveryWindowOnceInADifferentOrder) {
  TokenLoader l(counting(1001), 10, 42);
  const std::uint64_t w = l.num_sequences();
  std::vector<std::int32_t> first_epoch, second_epoch;
  for (std::uint64_t i = 0; i < w; ++i) first_epoch.push_back(l.next_batch(1).inputs[0]);
  EXPECT_EQ(l.position(), (LoaderPosition{1, 0}));
  for (std::uint64_t i = 0; i < w; ++i) second_epoch.push_back(l.next_batch(1).inputs[0]);
  EXPECT_NE(first_epoch, second_epoch);
  for (auto* e : {&first_epoch, &second_epoch}) {
    std::vector<std::int32_t> s = *e;
    std::sort(s.begin(), s.end());
    for (std::uint64_t i = 0; i < w; ++i) ASSERT_EQ(s[i], static_cast<std::int32_t>(i * 10));
  }
  std::vector<std::int32_t> in_order(first_epoch);
  std::sort(in_order.begin(), in_order.end());
  EXPECT_NE(first_epoch, in_order);  // actually shuffled
}

TEST(TokenLoader, DeterministicFromSeed) {
  TokenLoader a(counting(5000), 16, 9), b(counting(5000), 16, 9), c(counting(5000), 16, 10);
  bool differs = false;
  for (int i = 0; i < 40; ++i) {  // 40 * 8 = 320 > 312 windows: crosses an epoch
    const Batch x = a.next_batch(8), y = b.next_batch(8), z = c.next_batch(8);
    ASSERT_EQ(x.inputs, y.inputs);
    ASSERT_EQ(x.targets, y.targets);
    differs = differs || x.inputs != z.inputs;
  }
  EXPECT_TRUE(differs);
}

TEST(TokenLoader, SaveAndRestorePositionExactly) {
  TokenLoader a(counting(2000), 32, 5);
  const std::uint64_t w = a.num_sequences();     // 62
  for (int i = 0; i < 25; ++i) a.next_batch(7);  // 175 sequences: epoch 2, index 51
  const LoaderPosition saved = a.position();
  EXPECT_EQ(saved, (LoaderPosition{175 / w, 175 % w}));
  EXPECT_EQ(parse_position(format_position(saved)), saved);
  std::vector<Batch> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a.next_batch(7));  // crosses into epoch 3

  TokenLoader b(counting(2000), 32, 5);
  b.seek(saved);
  for (int i = 0; i < 6; ++i) {
    const Batch got = b.next_batch(7);
    ASSERT_EQ(got.inputs, expected[i].inputs) << "batch " << i;
    ASSERT_EQ(got.targets, expected[i].targets) << "batch " << i;
  }
  EXPECT_EQ(b.position(), a.position());

  const std::string msg = error_of<InputError>([&] { b.seek({0, w}); });
  EXPECT_CONTAINS(msg, "past the 62 sequences per epoch");
}

TEST(TokenLoader, SkipMatchesReading) {
  TokenLoader a(counting(3000), 20, 3), b(counting(3000), 20, 3);
  for (std::uint64_t n : {0ull, 1ull, 13ull, 149ull, 150ull, 400ull}) {
    a.next_batch(static_cast<std::int64_t>(n));
    b.skip(n);
    ASSERT_EQ(a.position(), b.position()) << n;
    ASSERT_EQ(a.next_batch(4).inputs, b.next_batch(4).inputs) << n;
  }
}

TEST(TokenLoader, ShardsPartitionTheGlobalBatch) {
  constexpr int kShards = 3;
  constexpr std::int64_t kBatch = 10;  // uneven: rows 3, 3, 4
  TokenLoader global(counting(4000), 16, 11);
  std::vector<TokenLoader> ranks(kShards, TokenLoader(counting(4000), 16, 11));
  for (int step = 0; step < 30; ++step) {
    const Batch g = global.next_batch(kBatch);
    std::vector<std::int32_t> joined;
    for (int s = 0; s < kShards; ++s) {
      const Batch part = ranks[s].next_shard(kBatch, s, kShards);
      joined.insert(joined.end(), part.inputs.begin(), part.inputs.end());
      ASSERT_EQ(ranks[s].position(), global.position());
    }
    ASSERT_EQ(joined, g.inputs) << "step " << step;
  }
}

TEST(TokenLoader, ValidationIsSequentialFromTheStart) {
  TempDir dir;
  std::vector<std::uint16_t> t(105);
  std::iota(t.begin(), t.end(), std::uint16_t{0});
  write_llmc_tokens(dir / "val.bin", t);
  TokenLoader v = TokenLoader::validation(TokenArray::open(dir / "val.bin", 256), 10);
  EXPECT_EQ(v.num_sequences(), 10u);
  const Batch first = v.next_batch(4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(first.inputs[r * 10], r * 10);
  v.seek({0, 0});
  EXPECT_EQ(v.next_batch(4).inputs, first.inputs);  // every evaluation sees the same data
  v.seek({0, 8});
  const Batch wrap = v.next_batch(3);  // windows 8, 9, then 0 again
  EXPECT_EQ(wrap.inputs[0], 80);
  EXPECT_EQ(wrap.inputs[10], 90);
  EXPECT_EQ(wrap.inputs[20], 0);
}

TEST(LoaderPosition, ParseErrors) {
  EXPECT_EQ(parse_position("3:1024"), (LoaderPosition{3, 1024}));
  for (const char* bad : {"", "3", "3:", ":4", "a:b", "1:2:3", "-1:2"})
    EXPECT_CONTAINS(error_of<InputError>([&] { parse_position(bad); }), "malformed");
}

}  // namespace
}  // namespace saturn::data
