// Pipeline parallelism: the blocks are split into p contiguous stages balanced by cost (the
// first stage also runs the embedding, the last the final norm, head and loss), one stage per
// rank. A step runs m micro-batches through the stages; activations go forward and their
// gradients backward point-to-point. Schedules: GPipe (all forwards, then all backwards; m
// micro-batches of activations held) and 1F1B (after p - s - 1 warm-up forwards, stage s
// alternates one forward and one backward; at most p - s micro-batches held). Both idle
// (p-1)/(m+p-1) of the time in the ideal case.
//
// GPT-2 ties the head to the token embedding: the last stage keeps its own copy of
// transformer.wte.weight, and the two stages sum their gradients of it (an allreduce between
// the first and last stage) before identical AdamW updates, so the copies stay equal.
//
// "ddp+pipeline" (hybrid.hpp) runs several pipelines (ranks r = replica·p + stage) whose stages
// allreduce their gradients with the same stage of the other replicas.
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/param_store.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tied_head.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

class PipelineStrategy : public Strategy {
 public:
  // `stages` = p; degree / p data-parallel replicas.
  PipelineStrategy(StrategySpec spec, std::string name, int stages);
  ~PipelineStrategy() override;
  std::string name() const override { return name_; }
  Estimate estimate() const override;
  void setup(comm::CommPair& comms, Device& device, MemoryPool& host) override;
  StepResult train_step(const data::Batch& batch, std::int64_t step) override;
  double evaluate(const data::Batch& batch) override;
  StateSlices export_state(StateKind kind) override;
  void import_state(StateKind kind, const StateSlices& slices) override;

  int stages() const { return p_; }
  int micro_batches() const { return m_; }
  // Stage boundaries: stage s runs blocks [bounds[s], bounds[s+1]). Balanced: minimises the
  // costliest stage (blocks, plus the head's cost on the last stage); else layers split evenly.
  static std::vector<int> partition(const ModelConfig& model, int seq_len, int stages,
                                    bool balance);

 private:
  struct Plan {  // what estimate() and setup() both derive from the spec
    std::string reason;
    std::int64_t rows = 0, micro = 0, m = 0;
    std::vector<int> bounds;
  };
  Plan plan() const;
  ModelOptions model_options(int stage, const Plan& plan) const;
  // What stage `stage` stages of each micro-batch, and whether this rank stages anything.
  StagedParts staged_parts(int stage) const;
  bool stages_tokens() const;
  int slots_for(int stage) const;
  // Micro-batch i in activation slot `slot`: the tokens (first stage) and targets (last stage)
  // are the token stage's micro-batch k; the loss is weighted by `weight` tokens.
  void forward_micro(int i, int slot, std::int64_t k, double weight);
  void backward_micro(int i, int slot, float dloss);
  void reduce_grads();         // sums the gradients across stages (tied) and replicas
  void reproducible_reduce();  // the same in fp64, then rounds them into the gradients
  std::vector<float*> segments(StateKind kind);
  SliceSet& slice_set(StateKind kind);
  std::size_t head_grad_size() const;

  std::string name_;
  int p_ = 1, dp_ = 1;
  int stage_ = 0, dp_rank_ = 0;
  int m_ = 1;
  std::int64_t micro_ = 1;
  std::vector<int> bounds_;
  Device* device_ = nullptr;
  comm::CommPair* world_ = nullptr;
  std::unique_ptr<comm::CommPair> pp_comm_, dp_comm_, tie_comm_;
  std::unique_ptr<Model> model_;
  std::size_t lo_ = 0, hi_ = 0;    // this stage's range of the flat layout
  std::size_t glo_ = 0, ghi_ = 0;  // ... and of the gradient layout (its trained tensors)
  ParamStore params_;
  Buffer<float> grads_;
  std::unique_ptr<AdamW> opt_;
  bool tied_copy_ = false;         // GPT-2 last stage (p > 1): its own copy of the token embedding
  std::size_t wte_size_ = 0;       // the tied embedding's elements (0 for an untied LLaMA)
  std::size_t wte_grad_size_ = 0;  // ... of the last stage's copy's gradient (0: frozen, LoRA)
  std::size_t head_elements_ = 0;  // TiedHead::elements: the head's part of the gradient
  ParamStore wte_params_;
  Buffer<float> wte_grads_;
  std::unique_ptr<AdamW> wte_opt_;
  GradAccumulator acc_, wte_acc_;  // reproducible mode: grads_ and wte_grads_ in fp64
  std::size_t act_count_ = 0;      // activations per micro-batch crossing a stage boundary
  DType act_type_ = DType::kFloat32;
  Buffer<std::byte> grad_send_;
  comm::Request grad_send_req_;
  std::vector<comm::Request> act_send_;  // per slot
  SliceSet slices_;                      // the trained parameters
  SliceSet frozen_slices_;               // the frozen ones (a LoRA job's base)
  SliceSet opt_slices_;                  // AdamW m and v, in the gradient layout
  TokenStage tokens_;
  DeviceSum loss_;
};

// Registry entry (registry.cpp); ddp+pipeline's is hybrid.hpp's.
StrategyInfo pipeline_strategy();

}  // namespace saturn::parallel
