#include "runtime/parallel/shard_map.hpp"

#include <algorithm>

namespace saturn::parallel {

ShardMap::ShardMap(const ParameterLayout& layout, int ranks, int rank, Over over) : ranks_(ranks) {
  const int L = layout.num_groups() - 2;
  groups_.resize(static_cast<std::size_t>(L + 2));
  const std::size_t r = static_cast<std::size_t>(rank);
  for (int g = -1; g <= L; ++g) {
    Group& G = groups_[static_cast<std::size_t>(g + 1)];
    const bool grads = over == Over::kGradients;
    G.begin = grads ? layout.grad_group_begin(g) : layout.group_begin(g);
    G.size = grads                   ? layout.grad_group_size(g)
             : over == Over::kFrozen ? layout.trainable_begin(g) - layout.group_begin(g)
                                     : layout.group_size(g);
    G.shard = shard_len(G.size, ranks, layout.align());
    G.offset = total_;
    total_ += G.shard;
    G.own_begin = G.begin + std::min(G.size, r * G.shard);
    G.own_end = G.begin + std::min(G.size, (r + 1) * G.shard);
  }
}

ShardMap::Piece ShardMap::owned(int g, std::size_t begin, std::size_t end) const {
  const Group& G = group(g);
  Piece p;
  p.begin = std::max(G.own_begin, begin);
  p.end = std::min(G.own_end, end);
  if (p.begin < p.end) p.pos = G.offset + (p.begin - G.own_begin);
  return p;
}

}  // namespace saturn::parallel
