// Offload (spilling): parameters, gradients and AdamW state live in host memory (a separate
// MemoryPool: the saving is measured even on the CPU backend). Each parameter group is copied
// into the device pool just before it is used and released right after; a group's gradients
// are copied in before its backward, accumulated on the device, and copied back, so the
// arithmetic is exactly one device's. The optimizer runs on the host. Device peak: the
// activations plus one group's parameters and gradients (the tied GPT-2 head: the token
// embedding and the final norm, parameters and gradients): at most two of the largest groups.
// This is the strategy that trains a model larger than one device on one device.
//
// At degree > 1 every rank offloads a whole replica and the ranks are data-parallel (their
// host gradients are allreduced per group, overlapping the backward of the groups below).
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/gpt.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/grad_buckets.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/strategy.hpp"

namespace saturn::parallel {

class OffloadStrategy : public Strategy {
 public:
  explicit OffloadStrategy(StrategySpec spec);
  ~OffloadStrategy() override;
  std::string name() const override { return "offload"; }
  Estimate estimate() const override;
  void setup(comm::Communicator& comm, MemoryPool& device, MemoryPool& host) override;
  StepResult train_step(const data::Batch& batch, std::int64_t step) override;
  double evaluate(const data::Batch& batch) override;
  StateSlices export_state(StateKind kind) override;
  void import_state(StateKind kind, const StateSlices& slices) override;

 private:
  struct OnDevice;
  // Copies group g's parameters (the first `count` floats; 0: all) to the device and binds
  // them, with gradients copied in too when `grads`.
  void load(int g, bool grads, std::size_t count = 0);
  // Copies gradients back (when loaded) and releases the device copies of group g.
  void unload(int g);
  float micro_step(const std::int32_t* tokens, const std::int32_t* targets, float dloss,
                   bool backward, bool reduce);
  std::vector<float*> segments(StateKind kind);

  ParameterLayout layout_;
  comm::Communicator* comm_ = nullptr;
  MemoryPool* device_ = nullptr;
  MemoryPool* host_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::int64_t micro_ = 0;
  bool tied_ = false;
  Buffer<float> params_, grads_;  // host
  std::unique_ptr<AdamW> opt_;    // host
  std::unique_ptr<GptModel> model_;
  std::vector<std::unique_ptr<OnDevice>> on_device_;  // per group
  std::unique_ptr<GradBuckets> buckets_;
  GradAccumulator acc_;  // host, reproducible mode
  SliceSet slices_;
  std::vector<std::int32_t> inputs_, targets_;
};

}  // namespace saturn::parallel
