// How FSDP splits the flat parameter layout over N ranks: each group's range (the embeddings,
// each block, the final norm and head) is padded to N equal parts, each a multiple of the
// layout's alignment (so every rank's part starts aligned, as the group does), and rank r owns
// the r-th; a rank's parts of every group are packed into one shard buffer. One type for the
// two coordinate systems in play (positions in the flat layout, positions in the shard
// buffer), so no caller converts between them by hand.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/model/parameters.hpp"

namespace saturn::parallel {

class ShardMap {
 public:
  struct Group {
    std::size_t begin = 0, size = 0;         // the group's range in the flat layout
    std::size_t shard = 0;                   // padded length of every rank's part (size / N up)
    std::size_t offset = 0;                  // of this rank's part in the shard buffer
    std::size_t own_begin = 0, own_end = 0;  // the flat elements this rank owns (may be empty)
  };
  // Where an owned flat range lies: flat [begin, end) is shard buffer [pos, pos + end - begin).
  struct Piece {
    std::size_t begin = 0, end = 0, pos = 0;
    bool empty() const { return begin >= end; }
  };

  // Which layout's groups are cut: the parameters' (FSDP), or the gradients' (ZeRO-2: only the
  // trained tensors, which are all of them but for a LoRA job's adapters).
  // kFrozen: each group's frozen tensors, [group_begin, trainable_begin) of the parameter layout
  // (empty groups without LoRA).
  enum class Over { kParameters, kGradients, kFrozen };
  ShardMap() = default;
  ShardMap(const ParameterLayout& layout, int ranks, int rank, Over over = Over::kParameters);

  // The length of every rank's part of a group of n elements (align: the layout's).
  static std::size_t shard_len(std::size_t n, int ranks, std::size_t align) {
    const std::size_t part =
        (n + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks);
    return (part + align - 1) / align * align;
  }
  int ranks() const { return ranks_; }
  const Group& group(int g) const { return groups_[static_cast<std::size_t>(g + 1)]; }
  int first_group() const { return -1; }
  int last_group() const { return static_cast<int>(groups_.size()) - 2; }
  // Elements of a rank's shard buffer (the same on every rank).
  std::size_t total() const { return total_; }
  // The part of the flat range [begin, end) of group g that this rank owns.
  Piece owned(int g, std::size_t begin, std::size_t end) const;

 private:
  int ranks_ = 1;
  std::vector<Group> groups_;  // g = -1 .. L at [g + 1]
  std::size_t total_ = 0;
};

}  // namespace saturn::parallel
