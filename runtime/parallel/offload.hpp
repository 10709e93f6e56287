// Offload (spilling): parameters, gradients and AdamW state live in host memory (a separate
// MemoryPool: the saving is measured even on the CPU backend; on a GPU the pool is pinned,
// Device::host_allocator(), so copies are DMA beside compute). A micro-batch is a sequence of
// phases (embeddings, each block, the head, each block backward, the embeddings backward), each
// needing one parameter group on the device (the head: the final group and, for GPT-2's tied
// classifier, the token embedding). A phase's groups are copied in on the device's copy stream,
// the compute waits on the copy's event (Device::wait_copy), and with the `prefetch` knob (the
// default) the next phase's copies are issued before this phase computes: two phases' buffers
// in flight. Gradients are copied in before a group's backward (from the second micro-batch of
// a step on; the first starts from zero on the device), accumulated there, and copied back
// asynchronously, so the arithmetic is exactly one device's. The host waits for the copies once
// per step (Device::finish_copies) before it reads the gradients.
//
// On a backend whose kernels read another weight type (bf16 on CUDA), a group's fp32 master
// weights are copied to the device and converted there into the kernels' copy.
//
// At degree > 1 every rank offloads a whole replica and the ranks are data-parallel: in the
// last micro-batch each group's gradients are allreduced on the device over the data
// communicator (NCCL on a GPU) right after its backward, before they are copied to the host;
// with `overlap` the reduction runs during the next phase and the copy follows it. The
// optimizer runs on the host, where its state is (see docs/strategies.md: AdamW reads and writes
// 16 bytes of state per parameter, which would cross the link twice if it ran on the device).
// Reproducible mode (CPU only) sums fp64 accumulators on the host over a host communicator.
// This is the strategy that trains a model larger than one device on one device.
#pragma once

#include <memory>
#include <vector>

#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/repro.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/parallel/tied_head.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

struct OffloadPhase;  // offload.cpp

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
  struct Item;
  using Phase = OffloadPhase;
  using Loaded = std::vector<std::unique_ptr<Item>>;
  // Allocates a phase's buffers and issues its copies (gradients: zeroed on the device, and the
  // host's copied in unless `fresh`: the first micro-batch of a step).
  Loaded fetch(const Phase& phase, bool fresh);
  SliceSet& slice_set(StateKind kind);
  // Orders the compute after the phase's copies, converts the weights (where the kernels read
  // another type) and binds the groups to the model.
  void acquire(Loaded& loaded);
  void run(const Phase& phase, const std::int32_t* tokens, const std::int32_t* targets,
           float dloss);
  // Unbinds and releases the phase's buffers; gradients go back to the host (reduced first on
  // the device when `reduce`).
  void finish(Loaded& loaded, bool reduce);
  // Waits for the gradient reduction in flight (overlap) and copies its result to the host.
  void complete_reduction();
  // Staged micro-batch k through every phase.
  void micro_step(std::int64_t k, float dloss, bool backward, bool fresh, bool reduce);
  std::vector<float*> segments(StateKind kind);

  ParameterLayout layout_;  // with the backend's group alignment (host and device alike)
  comm::CommPair* comms_ = nullptr;
  std::unique_ptr<comm::Communicator> host_comm_;  // reproducible mode: the fp64 sums (host)
  Device* device_ = nullptr;
  std::unique_ptr<Device> host_;  // the host pool as a device: the optimizer and sums there
  int rank_ = 0, size_ = 1;
  std::int64_t micro_ = 0;
  std::size_t tied_weights_ = 0;   // GPT-2: the token embedding's part of group -1
  std::size_t tied_elements_ = 0;  // ... its gradient's (0: frozen)
  Buffer<float> params_, grads_;   // host: fp32 master weights and gradients
  std::unique_ptr<AdamW> opt_;     // host
  std::unique_ptr<Model> model_;
  std::unique_ptr<Item> reducing_;  // a group whose gradients are being allreduced (overlap)
  GradAccumulator acc_;             // host, reproducible mode
  SliceSet slices_;                 // the trained parameters
  SliceSet frozen_slices_;          // the frozen ones (a LoRA job's base)
  SliceSet opt_slices_;             // AdamW m and v, in the gradient layout
  TokenStage tokens_;
  DeviceSum loss_;
};

// Registry entry (registry.cpp).
StrategyInfo offload_strategy();

}  // namespace saturn::parallel
