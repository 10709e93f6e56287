// FSDP / ZeRO-3: parameters, gradients and AdamW state are sharded 1/N over the ranks, per
// parameter group (the embeddings, each block, the final norm and head): each group's flat
// range is padded to a multiple of N and rank r owns the r-th equal part. A group's parameters
// are all-gathered just before its forward, freed after it, gathered again before its backward
// (the next group's gather is started while this one computes: prefetch); its gradients go to
// a temporary full-size buffer, are reduce-scattered (non-blocking, overlapping the next
// group's backward) and added to the owned shard. The whole model is never resident: peak
// memory is the shards plus about two groups of parameters and two of gradients in flight.
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/param_store.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/shard_map.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tied_head.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

class FsdpStrategy : public Strategy {
 public:
  explicit FsdpStrategy(StrategySpec spec);
  ~FsdpStrategy() override;
  std::string name() const override { return "fsdp"; }
  Estimate estimate() const override;
  void setup(comm::CommPair& comms, Device& device, MemoryPool& host) override;
  StepResult train_step(const data::Batch& batch, std::int64_t step) override;
  double evaluate(const data::Batch& batch) override;
  StateSlices export_state(StateKind kind) override;
  void import_state(StateKind kind, const StateSlices& slices) override;

 private:
  struct Gathered;
  struct Reduction;
  void start_gather(int g);
  // Waits for group g's gather and binds it to the model, with `grads` (null: forward only).
  void bind(int g, float* grads);
  void release(int g);
  float* new_grad_buffer(int g);
  void launch_reduction(int g);
  void complete_reductions();
  // Staged micro-batch k: forward, and backward when `backward`; the mean loss lands in the
  // model's loss().
  void micro_step(std::int64_t k, float dloss, bool backward);
  std::vector<float*> segments(StateKind kind);

  ParameterLayout layout_;  // the whole model's, with the backend's group alignment
  // Each group's trained tensors (all of them but for a LoRA job's adapters), sharded by the
  // gradient layout: their weights, gradients and AdamW moments; and its frozen tensors (a LoRA
  // job's base), sharded apart: gathered when used, never reduced or updated.
  ShardMap shards_;
  ShardMap frozen_map_;
  comm::CommPair* comms_ = nullptr;
  Device* device_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::int64_t micro_ = 0;
  bool tied_ = false;  // GPT-2: the head reads the token embedding (group -1)
  ParamStore params_;  // this rank's shards: fp32 master and the kernels' copy
  ParamStore frozen_;  // ... of the frozen tensors
  Buffer<float> grads_;
  std::vector<std::unique_ptr<AdamW>> opts_;  // per group; null when this rank owns nothing
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<Gathered>> gathered_;
  std::vector<std::unique_ptr<Reduction>> reductions_;
  std::vector<Buffer<float>> grad_buffers_;  // per group, while its backward runs
  bool repro_ = false;                       // reproducible mode: reduce in fp64 into acc_
  GradAccumulator acc_;                      // the owned shards' gradients in fp64
  SliceSet slices_;
  SliceSet frozen_slices_;
  TokenStage tokens_;
  DeviceSum loss_;
};

// Registry entry (registry.cpp).
StrategyInfo fsdp_strategy();

}  // namespace saturn::parallel
