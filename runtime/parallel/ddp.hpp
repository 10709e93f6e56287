// DDP: every rank holds a whole replica (parameters, gradients, AdamW state) and trains on its
// share of the global batch's rows; gradients are summed across replicas with bucketed
// non-blocking allreduces launched while backward still runs (a bucket per layer by default),
// so only the last bucket's reduction is exposed.
//
// The same engine runs tensor parallelism (tensor.hpp): a "replica" is then a Megatron group of
// tp ranks that share one model, and DP x TP is several such groups (ranks r = replica·tp + i).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/grad_buckets.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

class DdpStrategy : public Strategy {
 public:
  // tp = 1: plain DDP over `degree` replicas; tp > 1: degree/tp tensor-parallel replicas.
  DdpStrategy(StrategySpec spec, std::string name, int tp = 1);
  std::string name() const override { return name_; }
  Estimate estimate() const override;
  void setup(comm::CommPair& comms, Device& device, MemoryPool& host) override;
  StepResult train_step(const data::Batch& batch, std::int64_t step) override;
  double evaluate(const data::Batch& batch) override;
  StateSlices export_state(StateKind kind) override;
  void import_state(StateKind kind, const StateSlices& slices) override;

  int tensor_degree() const { return tp_; }
  int replicas() const { return dp_; }

 private:
  ModelOptions model_options(int tp_rank) const;
  double grad_square_sum();
  std::vector<float*> segments(StateKind kind);
  SliceSet& slice_set(StateKind kind);

  std::string name_;
  int tp_ = 1, dp_ = 1;
  int tp_rank_ = 0, dp_rank_ = 0;
  std::int64_t micro_ = 0;
  Device* device_ = nullptr;
  std::unique_ptr<comm::CommPair> tp_comm_, dp_comm_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<AdamW> opt_;
  std::unique_ptr<GradBuckets> buckets_;
  GradAccumulator acc_;     // reproducible mode
  SliceSet slices_;         // the trained parameters
  SliceSet frozen_slices_;  // the frozen ones (a LoRA job's base)
  SliceSet opt_slices_;     // AdamW m and v: the trained tensors, in the gradient layout
  TokenStage tokens_;
  DeviceSum loss_;
};

// Registry entries (registry.cpp): ddp, and the one-device strategy (DDP's degree-1 case, named
// for what it is).
StrategyInfo ddp_strategy();
StrategyInfo single_device_strategy();

}  // namespace saturn::parallel
