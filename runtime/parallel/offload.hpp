// Offload (spilling): parameters, gradients and AdamW state live in host memory (a separate
// MemoryPool: the saving is measured even on the CPU backend). Each parameter group is copied
// into the device pool just before it is used and released right after; a group's gradients
// are copied in before its backward, accumulated on the device, and copied back, so the
// arithmetic is exactly one device's. The optimizer runs on the host. Device peak: the
// activations plus one group's parameters and gradients (the tied GPT-2 head: the token
// embedding and the final norm, parameters and gradients): at most two of the largest groups.
// This is the strategy that trains a model larger than one device on one device.
//
// On a backend whose kernels read another weight type (bf16 on CUDA), a group's fp32 master
// weights are copied to the device and converted there into the kernels' copy.
//
// At degree > 1 every rank offloads a whole replica and the ranks are data-parallel (their
// host gradients are allreduced per group, overlapping the backward of the groups below, over
// a communicator of their own for host memory).
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/grad_buckets.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tied_head.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

class OffloadStrategy : public Strategy {
 public:
  explicit OffloadStrategy(StrategySpec spec);
  ~OffloadStrategy() override;
  std::string name() const override { return "offload"; }
  Estimate estimate() const override;
  void setup(comm::CommPair& comms, Device& device, MemoryPool& host) override;
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
  void micro_step(const std::int32_t* tokens, const std::int32_t* targets, float dloss,
                  bool backward, bool reduce);
  std::vector<float*> segments(StateKind kind);

  ParameterLayout layout_;  // with the backend's group alignment (host and device alike)
  comm::CommPair* comms_ = nullptr;
  std::unique_ptr<comm::Communicator> host_comm_;  // MPI over host memory: the gradients
  Device* device_ = nullptr;
  std::unique_ptr<Device> host_;  // the host pool as a device: the optimizer and sums there
  int rank_ = 0, size_ = 1;
  std::int64_t micro_ = 0;
  bool tied_ = false;
  Buffer<float> params_, grads_;  // host: fp32 master weights and gradients
  std::unique_ptr<AdamW> opt_;    // host
  std::unique_ptr<Model> model_;
  std::vector<std::unique_ptr<OnDevice>> on_device_;  // per group
  std::unique_ptr<GradBuckets> buckets_;
  GradAccumulator acc_;  // host, reproducible mode
  SliceSet slices_;
  TokenStage tokens_;
  DeviceSum loss_;
};

}  // namespace saturn::parallel
