#include "runtime/data/loader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <numeric>

#include "runtime/core/error.hpp"

namespace saturn::data {

namespace {
constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
}  // namespace

std::string format_position(const LoaderPosition& pos) {
  return fmt::format("{}:{}", pos.epoch, pos.index);
}

LoaderPosition parse_position(const std::string& text) {
  LoaderPosition pos;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [p, ec] = std::from_chars(begin, end, pos.epoch);
  if (ec == std::errc() && p != end && *p == ':') {
    auto [q, ec2] = std::from_chars(p + 1, end, pos.index);
    if (ec2 == std::errc() && q == end && q != p + 1) return pos;
  }
  throw InputError(
      fmt::format("data position '{}' is malformed (valid: EPOCH:INDEX, e.g. 3:1024)", text));
}

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state_ += kGolden);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t SplitMix64::bounded(std::uint64_t n) {
  const std::uint64_t threshold = (0 - n) % n;
  std::uint64_t r = next();
  while (r < threshold) r = next();
  return r % n;
}

std::vector<std::uint64_t> epoch_permutation(std::uint64_t n, std::uint64_t seed,
                                             std::uint64_t epoch) {
  // Output number epoch+1 of SplitMix64(seed): distinct epochs get distinct keys (the mix is a
  // bijection), and no state has to be carried from one epoch to the next.
  SplitMix64 keygen(seed + epoch * kGolden);
  SplitMix64 rng(keygen.next());
  std::vector<std::uint64_t> p(n);
  std::iota(p.begin(), p.end(), std::uint64_t{0});
  for (std::uint64_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.bounded(i)]);
  return p;
}

TokenLoader::TokenLoader(TokenArray tokens, int seq_len, std::uint64_t seed, Order order)
    : tokens_(std::move(tokens)), seq_len_(seq_len), seed_(seed), order_(order) {
  if (seq_len_ < 1) throw InputError(fmt::format("seq_len must be >= 1 (got {})", seq_len_));
  const auto t = static_cast<std::uint64_t>(seq_len_);
  if (tokens_.size() < t + 1)
    throw InputError(fmt::format("data file {} has {} tokens; seq_len {} needs at least {}",
                                 tokens_.name(), tokens_.size(), seq_len_, t + 1));
  windows_ = (tokens_.size() - 1) / t;
}

TokenLoader TokenLoader::validation(TokenArray tokens, int seq_len) {
  return TokenLoader(std::move(tokens), seq_len, 0, Order::kSequential);
}

void TokenLoader::seek(const LoaderPosition& pos) {
  if (pos.index >= windows_)
    throw InputError(fmt::format(
        "data position {} is past the {} sequences per epoch of {} at seq_len {} (the position "
        "was saved with other data or another seq_len)",
        format_position(pos), windows_, tokens_.name(), seq_len_));
  pos_ = pos;
}

void TokenLoader::skip(std::uint64_t n) {
  // index < windows_, so index + n % windows_ cannot overflow.
  pos_.epoch += n / windows_;
  pos_.index += n % windows_;
  if (pos_.index >= windows_) {
    pos_.index -= windows_;
    ++pos_.epoch;
  }
}

const std::vector<std::uint64_t>& TokenLoader::permutation(std::uint64_t epoch) const {
  if (!perm_valid_ || perm_epoch_ != epoch) {
    perm_ = epoch_permutation(windows_, seed_, epoch);
    perm_epoch_ = epoch;
    perm_valid_ = true;
  }
  return perm_;
}

std::uint64_t TokenLoader::window_start(const LoaderPosition& pos) const {
  const std::uint64_t w =
      order_ == Order::kShuffled ? permutation(pos.epoch)[pos.index] : pos.index;
  return w * static_cast<std::uint64_t>(seq_len_);
}

void TokenLoader::next_batch(std::int64_t batch_size, std::int32_t* inputs, std::int32_t* targets,
                             std::int32_t* positions) {
  if (batch_size < 0) throw Error(fmt::format("batch size must be >= 0 (got {})", batch_size));
  const auto t = static_cast<std::uint64_t>(seq_len_);
  for (std::int64_t b = 0; b < batch_size; ++b) {
    const std::uint64_t start = window_start(pos_);
    const auto row = static_cast<std::uint64_t>(b) * t;
    tokens_.copy_to(start, t, inputs + row);
    tokens_.copy_to(start + 1, t, targets + row);
    if (mask_)
      for (std::uint64_t i = 0; i < t; ++i)
        if ((*mask_)[start + 1 + i] == 0) targets[row + i] = -1;
    if (starts_) {
      // `next`: the first record start after the window's first token; `begin`: where the
      // current token's record begins within the window.
      const std::vector<std::uint64_t>& s = *starts_;
      auto next = std::upper_bound(s.begin(), s.end(), start);
      std::uint64_t begin = start;
      for (std::uint64_t i = 0; i < t; ++i) {
        const std::uint64_t n = start + i;
        if (next != s.end() && *next == n) {
          begin = n;
          ++next;
        }
        if (positions) positions[row + i] = static_cast<std::int32_t>(n - begin);
        if (next != s.end() && *next == n + 1) targets[row + i] = -1;
      }
    }
    skip(1);
  }
}

bool load_loss_mask_beside(TokenLoader& loader, const std::filesystem::path& token_file) {
  const std::filesystem::path mask = loss_mask_path(token_file);
  std::error_code ec;
  if (!std::filesystem::exists(mask, ec)) return false;
  loader.set_loss_mask(read_loss_mask(mask, loader.tokens().size()));
  return true;
}

bool load_record_starts_beside(TokenLoader& loader, const std::filesystem::path& token_file) {
  const std::filesystem::path records = record_starts_path(token_file);
  std::error_code ec;
  if (!std::filesystem::exists(records, ec)) return false;
  loader.set_record_starts(read_record_starts(records, loader.tokens().size()));
  return true;
}

void TokenLoader::set_record_starts(std::vector<std::uint64_t> starts) {
  const auto bad = [&](const std::string& what) {
    throw Error(
        fmt::format("record starts for {} ({} tokens): {}", tokens_.name(), tokens_.size(), what));
  };
  if (starts.empty() || starts[0] != 0) bad("the first record must start at 0");
  for (std::size_t i = 1; i < starts.size(); ++i)
    if (starts[i] <= starts[i - 1]) bad(fmt::format("start {} does not increase", i));
  if (starts.back() >= tokens_.size()) bad("a start is past the last token");
  starts_ = std::make_shared<const std::vector<std::uint64_t>>(std::move(starts));
}

void TokenLoader::set_loss_mask(std::vector<std::uint8_t> mask) {
  if (mask.size() != tokens_.size())
    throw Error(fmt::format("loss mask of {} bytes for {} ({} tokens)", mask.size(), tokens_.name(),
                            tokens_.size()));
  mask_ = std::make_shared<const std::vector<std::uint8_t>>(std::move(mask));
}

Batch TokenLoader::next_batch(std::int64_t batch_size) {
  Batch batch;
  batch.batch_size = batch_size;
  batch.seq_len = seq_len_;
  const auto n = static_cast<std::size_t>(std::max<std::int64_t>(batch_size, 0)) *
                 static_cast<std::size_t>(seq_len_);
  batch.inputs.resize(n);
  batch.targets.resize(n);
  if (starts_) batch.positions.resize(n);
  next_batch(batch_size, batch.inputs.data(), batch.targets.data(),
             starts_ ? batch.positions.data() : nullptr);
  return batch;
}

Batch TokenLoader::next_shard(std::int64_t global_batch, int shard, int num_shards) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards || global_batch < 0)
    throw Error(fmt::format("invalid shard {} of {} for a global batch of {}", shard, num_shards,
                            global_batch));
  const std::int64_t begin = global_batch * shard / num_shards;
  const std::int64_t end = global_batch * (shard + 1) / num_shards;
  skip(static_cast<std::uint64_t>(begin));
  Batch batch = next_batch(end - begin);
  skip(static_cast<std::uint64_t>(global_batch - end));
  return batch;
}

}  // namespace saturn::data
