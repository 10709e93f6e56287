// ZeRO-2 (DeepSpeed's stage 2): every rank holds the whole model's parameters, as DDP, and
// trains on its share of the global batch's rows; after the last micro-batch the gradients are
// reduce-scattered instead of allreduced, so each rank receives the sum of its 1/N of them,
// updates that part of the parameters with its 1/N of the AdamW state, and the updated parts
// are all-gathered back into every replica. Against DDP a rank keeps 1/N of the AdamW state
// (two floats per parameter) and of the reduced gradients; the parameters and the backward's
// gradient buffer stay whole. Against FSDP (ZeRO-3) nothing is gathered during the forward and
// backward: the step communicates once, after the last micro-batch.
//
// The parts are FSDP's (shard_map.hpp): each parameter group (the embeddings, each block, the
// final norm and head) is padded to N equal parts and rank r owns the r-th, so a group's
// reduce-scatter and all-gather each move one padded buffer. In reproducible mode the
// micro-batches' gradients are summed into fp64 as one device does (repro.hpp), reduce-scattered
// as fp64 sums and rounded once; the owned parts then get exactly the single-device update.
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/shard_map.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

class Zero2Strategy : public Strategy {
 public:
  explicit Zero2Strategy(StrategySpec spec);
  std::string name() const override { return "zero2"; }
  Estimate estimate() const override;
  void setup(comm::CommPair& comms, Device& device, MemoryPool& host) override;
  StepResult train_step(const data::Batch& batch, std::int64_t step) override;
  double evaluate(const data::Batch& batch) override;
  StateSlices export_state(StateKind kind) override;
  void import_state(StateKind kind, const StateSlices& slices) override;

 private:
  // Group g's summed gradients, this rank's part of them, into owned_grads_.
  void reduce_scatter_group(int g);
  // Group g's updated parts from every rank into the replica's master weights.
  void all_gather_group(int g);
  std::vector<float*> moments(StateKind kind);

  ParameterLayout layout_;  // the whole model's, with the backend's alignment
  ShardMap shards_;
  comm::CommPair* comms_ = nullptr;
  Device* device_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::int64_t micro_ = 0;
  std::unique_ptr<Model> model_;
  Buffer<float> owned_grads_;                 // the reduced gradients of the owned parts
  std::vector<std::unique_ptr<AdamW>> opts_;  // per group; null when this rank owns none of it
  GradAccumulator acc_;                       // reproducible: the whole gradient in fp64
  SliceSet params_;                           // the replica's trained weights (rank 0 writes them)
  SliceSet frozen_;                           // ... and its frozen ones (a LoRA job's base)
  SliceSet owned_;                            // the owned parts' AdamW moments
  TokenStage tokens_;
  DeviceSum loss_;
};

// Registry entry (registry.cpp).
StrategyInfo zero2_strategy();

}  // namespace saturn::parallel
