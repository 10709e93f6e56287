// Hybrids on a 2-D grid of ranks: data parallelism across replicas of a pipeline (ddp+pipeline,
// ranks r = replica·p + stage) or of a tensor-parallel group (ddp+tensor, r = replica·t + i).
// The inner degree comes from the knobs (stages, tensor_degree) or is chosen: the largest
// proper divisor of the degree that fits the model (stages <= n_layer; t dividing n_head,
// n_kv_head and d_ff), so degree 4 runs 2 replicas of 2.
#pragma once

#include <memory>

#include "runtime/parallel/strategy.hpp"

namespace saturn::parallel {

// The inner degree a hybrid uses (0 when none fits: the strategy reports it infeasible).
int hybrid_stages(const StrategySpec& spec);
int hybrid_tensor_degree(const StrategySpec& spec);

std::unique_ptr<Strategy> make_ddp_pipeline(const StrategySpec& spec);
std::unique_ptr<Strategy> make_ddp_tensor(const StrategySpec& spec);

// Registry entries (registry.cpp): a hybrid needs two replicas of an inner group of two.
StrategyInfo ddp_pipeline_strategy();
StrategyInfo ddp_tensor_strategy();

}  // namespace saturn::parallel
