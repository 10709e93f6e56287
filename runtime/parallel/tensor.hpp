// Tensor parallelism (Megatron-LM): each block's attention heads and MLP columns are split
// across the ranks of a tensor-parallel group. q, k, v and the MLP up-projections are
// column-parallel (each rank computes its heads / columns from the whole input), the attention
// output projection and MLP down-projection are row-parallel (each rank multiplies its part and
// the partial sums are allreduced). Per block that is one allreduce after attention and one
// after the MLP in forward, and one for each input gradient in backward. Embedding, norms and
// head are replicated (identical inputs give identical results on every rank). n_head, n_kv_head
// and d_ff must be divisible by the degree: a rank keeps the key/value heads its query heads
// read (grouped-query attention).
//
// "tensor" uses all ranks as one group; "ddp+tensor" (hybrid.hpp) replicates the group.
#pragma once

#include "runtime/parallel/ddp.hpp"

namespace saturn::parallel {

class TensorStrategy : public DdpStrategy {
 public:
  explicit TensorStrategy(StrategySpec spec) : DdpStrategy(spec, "tensor", spec.degree) {}
};

// Registry entry (registry.cpp).
inline StrategyInfo tensor_strategy() {
  StrategyInfo s;
  s.name = "tensor";
  s.help = "Megatron tensor parallelism: each block's heads and MLP columns split over the ranks";
  s.make = [](const StrategySpec& spec) { return std::make_unique<TensorStrategy>(spec); };
  return s;
}

}  // namespace saturn::parallel
