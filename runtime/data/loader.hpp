// Batches of token windows in a deterministic, restorable order.
//
// The token stream is cut into W = floor((N - 1) / T) windows with stride T: window w has inputs
// tokens[wT .. wT+T-1] and targets tokens[wT+1 .. wT+T] (inputs shifted by one). An epoch visits
// every window once. A shuffled loader visits them in the order of epoch_permutation(W, seed,
// epoch); a sequential one (validation) in file order. The global stream of sequences is the
// concatenation of epochs; next_batch takes the next B of it, so a position (epoch, index) names
// the state exactly and data-parallel ranks can each take their rows of the same global batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/token_file.hpp"

namespace saturn::data {

// Where the loader stands: `index` windows of epoch `epoch` are consumed (index < W).
struct LoaderPosition {
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;
  bool operator==(const LoaderPosition&) const = default;
};

// "EPOCH:INDEX", e.g. "3:1024" (the checkpoint attribute data_position).
std::string format_position(const LoaderPosition& pos);
// Inverse of format_position; throws InputError naming the text.
LoaderPosition parse_position(const std::string& text);

// SplitMix64 (Steele, Lea, Flood 2014), the platform-independent generator behind the shuffle:
//   state += 0x9E3779B97F4A7C15; z = state;
//   z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9; z = (z ^ (z >> 27)) * 0x94D049BB133111EB;
//   return z ^ (z >> 31);
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next();
  // Uniform in [0, n), n >= 1, by rejection: draws r = next() until r >= (2^64 - n) mod n, then
  // returns r mod n (so no modulo bias, and the same numbers on every platform).
  std::uint64_t bounded(std::uint64_t n);

 private:
  std::uint64_t state_;
};

// The visiting order of an epoch: a permutation of 0..n-1. The generator is SplitMix64 seeded
// with output number epoch+1 of SplitMix64(seed) (i.e. key = mix(seed + (epoch+1) * 0x9E37...));
// starting from the identity, for i = n-1 down to 1: swap(p[i], p[bounded(i + 1)])
// (Fisher-Yates). Reimplementable bit-for-bit elsewhere, e.g. in a Python test.
std::vector<std::uint64_t> epoch_permutation(std::uint64_t n, std::uint64_t seed,
                                             std::uint64_t epoch);

// B sequences of T tokens, row-major [B][T]; targets[b][t] is the token after inputs[b][t]
// (-1: not trained).
struct Batch {
  std::int64_t batch_size = 0;
  int seq_len = 0;
  std::vector<std::int32_t> inputs;
  std::vector<std::int32_t> targets;
  // Empty unless the loader is packed() (set_record_starts); then [B][T]: each input token's
  // position inside its record within the window (0 at a record's first token and at the
  // window's first token). The model restarts its positions (learned or rotary) there and
  // attends only within the run since the last 0, so packed records do not see each other.
  std::vector<std::int32_t> positions;
};

enum class Order { kShuffled, kSequential };

class TokenLoader {
 public:
  // Throws InputError when seq_len < 1 or the data holds fewer than seq_len + 1 tokens
  // ("data file X has N tokens; seq_len T needs at least T+1").
  TokenLoader(TokenArray tokens, int seq_len, std::uint64_t seed, Order order = Order::kShuffled);
  // Validation data: file order, starting at the first window. Evaluating k sequences means
  // seek({0, 0}) then next_batch calls totalling k (wrapping to the start past the last window).
  static TokenLoader validation(TokenArray tokens, int seq_len);

  int seq_len() const { return seq_len_; }
  std::uint64_t seed() const { return seed_; }
  Order order() const { return order_; }
  // Windows per epoch (W above).
  std::uint64_t num_sequences() const { return windows_; }
  const TokenArray& tokens() const { return tokens_; }

  LoaderPosition position() const { return pos_; }
  // Restores a position exactly; throws InputError if index >= num_sequences() (the position
  // came from other data or another seq_len).
  void seek(const LoaderPosition& pos);
  // Advances n sequences without reading them.
  void skip(std::uint64_t n);

  // The next batch_size sequences of the global stream (crossing into the next epoch if needed).
  Batch next_batch(std::int64_t batch_size);
  // The same, into caller buffers of batch_size * seq_len int32 each; `positions` is filled only
  // when the loader is packed() and it is not null.
  void next_batch(std::int64_t batch_size, std::int32_t* inputs, std::int32_t* targets,
                  std::int32_t* positions = nullptr);
  // Data parallelism: of the next global_batch sequences, the rows
  // [shard * global_batch / num_shards, (shard + 1) * global_batch / num_shards) (integer
  // division), advancing past the whole global batch, so every shard stays at the same position.
  Batch next_shard(std::int64_t global_batch, int shard, int num_shards);

  // Token offset of the window the loader would read at `pos` (for tests and diagnostics).
  std::uint64_t window_start(const LoaderPosition& pos) const;

  // Instruction data: one byte per token of the file, 1 where the token is trained on
  // (token_file.hpp's loss mask). A target whose token's byte is 0 becomes -1 (no loss, no
  // gradient). Error when the size is not the token count.
  void set_loss_mask(std::vector<std::uint8_t> mask);
  bool masked() const { return mask_ != nullptr; }

  // Packing without cross-attention (`packing: {cross_attention: false}`): the token offset of
  // each record's first token (token_file.hpp's record starts). Windows still cut the stream
  // every T tokens (so the data order is the same as without), but each record of a window is a
  // sequence of its own there: batches then carry `positions`, where input token n of a window
  // starting at s has position n - max(record_start(n), s) (record_start(n): the largest start
  // <= n), so a record cut by the window's start restarts at 0 like a record starting there;
  // and a target that is the first token of a record becomes -1 (besides the mask's rule),
  // since no record's last token may predict the next record. Error when the starts are not
  // valid for the token count (first 0, strictly increasing, below the token count).
  void set_record_starts(std::vector<std::uint64_t> starts);
  bool packed() const { return starts_ != nullptr; }

 private:
  const std::vector<std::uint64_t>& permutation(std::uint64_t epoch) const;

  TokenArray tokens_;
  std::shared_ptr<const std::vector<std::uint8_t>> mask_;     // null: every target trained
  std::shared_ptr<const std::vector<std::uint64_t>> starts_;  // null: not packed
  int seq_len_;
  std::uint64_t seed_;
  Order order_;
  std::uint64_t windows_ = 0;
  LoaderPosition pos_;
  // One epoch's permutation, rebuilt when the loader enters another epoch.
  mutable std::vector<std::uint64_t> perm_;
  mutable std::uint64_t perm_epoch_ = 0;
  mutable bool perm_valid_ = false;
};

// Instruction data: sets the loss mask beside `token_file` (loss_mask_path) on the loader when
// that file exists; true if it did. InputError naming the mask when it does not fit the tokens.
bool load_loss_mask_beside(TokenLoader& loader, const std::filesystem::path& token_file);

// Packing without cross-attention: sets the record starts beside `token_file`
// (record_starts_path) on the loader when that file exists; true if it did. InputError naming
// the file when it does not fit the tokens (read_record_starts).
bool load_record_starts_beside(TokenLoader& loader, const std::filesystem::path& token_file);

}  // namespace saturn::data
