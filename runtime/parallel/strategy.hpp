// Parallel strategies: one interface, one file per strategy (ddp, fsdp, pipeline, tensor,
// offload; hybrids ddp+pipeline and ddp+tensor on a 2-D rank grid). Every strategy trains
// exactly the job one device would train — same global batch, same initial weights, same
// optimizer — only spread over `degree` ranks, so the solver may pick any of them for any job.
//
// Every strategy is written once against the backend-neutral model (model/model.hpp) and device
// (backend/device.hpp): it never touches device memory from the host, and it talks over two
// communicators, control (host scalars) and data (device buffers), comm/comm_pair.hpp.
//
// Life of a strategy:
//   auto s = make_strategy("fsdp", spec);   // no communication yet
//   Estimate e = s->estimate();             // static memory/communication estimate + feasibility
//   s->setup(comms, device, host);          // collective; allocates, initialises weights
//   for each step: s->train_step(global_batch, step);
//   s->evaluate(val_batch);  s->export_state(kind) / s->import_state(kind, slices);
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/model/config.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::parallel {

// A job's state by kind: the trained parameters and their AdamW moments (what a checkpoint
// holds), and the frozen parameters (a LoRA job's base model, loaded from where it came from;
// no tensor without LoRA).
enum class StateKind { kParams, kAdamM, kAdamV, kFrozen };
const char* state_kind_name(StateKind kind);  // "params", "m", "v", "frozen"

enum class PipelineSchedule { kGpipe, k1F1B };

// Tuning knobs; defaults give a sensible configuration for every strategy. On the command line:
// --knob KEY=VALUE (parse_knobs lists the keys).
struct Knobs {
  std::int64_t micro_batch_size = 0;  // sequences per micro-batch on a rank (0: auto, <= 8)
  int micro_batches = 0;              // pipeline: micro-batches m per step (0: auto)
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  // pipeline: gpipe | 1f1b
  int stages = 0;                                       // ddp+pipeline: pipeline depth p (0: auto)
  int tensor_degree = 0;            // ddp+tensor: tensor-parallel degree t (0: auto)
  bool recompute = false;           // activation recomputation (every strategy)
  std::size_t bucket_bytes = 0;     // ddp: gradient bucket size (0: one bucket per layer)
  bool overlap = true;              // ddp/fsdp/offload: reductions overlap backward
  bool prefetch = true;             // fsdp: gather the next layer during this one
  bool balance = true;              // pipeline: stages balanced by cost (false: even layers)
  std::size_t device_capacity = 0;  // bytes of device memory per rank (0: unlimited)
  std::size_t host_capacity = 0;    // bytes of host memory per rank for offload (0: unlimited)
};

// "key=value" items, e.g. {"schedule=gpipe", "micro_batches=8", "recompute=true",
// "device_capacity=2GiB"}. InputError naming the item and the valid keys/values.
Knobs parse_knobs(const std::vector<std::string>& items);

// What is trained (model, global batch, optimizer), how it is spread, and on which backend
// (estimates describe that backend's memory: fp32 on the CPU, bf16 and flash attention on CUDA).
struct StrategySpec {
  ModelConfig model;
  TrainConfig train;
  int degree = 1;  // ranks
  Knobs knobs;
  DeviceKind backend = DeviceKind::kCpu;
};

// One kind of collective a strategy issues per optimizer step, as its estimate declares it: the
// cost model prices each as calls × latency + bytes / bandwidth (calibrated per operation and
// group size), plus a wait per synchronisation point, without knowing which strategy issues it.
struct CommCall {
  comm::CollOp op = comm::CollOp::kAllreduce;
  int group = 1;              // ranks taking part
  double calls = 0;           // per step
  double bytes = 0;           // per step on the busiest rank, as CommStats counts them
  bool overlappable = false;  // issued while compute runs (hidden up to the calibrated share)
  bool crosses_nodes = true;  // may span nodes (a tensor-parallel group never does)
  double sync_points = 0;     // per step, waits for the slowest rank of the group
};

// A static estimate, computed from the spec alone (the profiler and solver call it for
// configurations they never run). Memory figures mirror the allocations the strategy makes, so
// they are the peaks MemoryPool measures (within a few percent).
struct Estimate {
  bool feasible = true;
  std::string reason;            // why not, when infeasible (names the offending quantity)
  std::size_t device_bytes = 0;  // peak device memory of the busiest rank
  std::size_t host_bytes = 0;    // peak host-pool memory of the busiest rank (offload)
  std::map<std::string, std::size_t> device_breakdown;  // busiest rank, by MemoryPool tag
  std::uint64_t comm_bytes = 0;  // per optimizer step, busiest rank, as CommStats counts them
  std::uint64_t host_transfer_bytes = 0;  // offload: host <-> device copies per step
  double flops = 0;                       // forward+backward per step, busiest rank
  std::int64_t micro_batch = 0;           // sequences per micro-batch
  std::int64_t micro_batches = 0;         // micro-batches per step on a rank
  std::string layout;                     // e.g. "dp=2 x pp=2; stages [0,2) [2,4)"
  // What the cost model turns into time (profile/cost_model.hpp), owned by the strategy:
  std::vector<CommCall> comm_schedule;  // the step's collectives; their bytes make comm_bytes
  int tensor_degree = 1;                // the compute of a block is split this many ways
  int pipeline_stages = 1;              // > 1: stages idle (p - 1)/(m + p - 1) of the step
  double optimizer_elements = 0;        // parameters this rank's AdamW updates per step
  // Reproducible mode: fp32 gradient elements added into fp64 per micro-batch on this rank.
  double accumulated_elements = 0;
};

struct StepResult {
  double loss = 0;       // mean train loss over the global batch (identical on every rank)
  double grad_norm = 0;  // global gradient norm before clipping
  double lr = 0;
};

// Where time went on this rank, cumulative since setup (or reset_stats).
struct StrategyStats {
  std::int64_t steps = 0;
  double step_s = 0;     // wall time inside train_step
  double compute_s = 0;  // forward, backward and optimizer (what a bubble-free step would take)
  // The micro-batch schedule alone (forward and backward of every micro-batch, without the
  // gradient reduction and optimizer): its wall time and the compute inside it. For a
  // pipeline stage, 1 - busy_s / schedule_s is the measured bubble.
  double schedule_s = 0;
  double busy_s = 0;
  comm::CommStats comm;                   // every communicator of the strategy, summed
  std::uint64_t host_transfer_bytes = 0;  // offload
};

class Strategy {
 public:
  explicit Strategy(StrategySpec spec) : spec_(std::move(spec)) {}
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  const StrategySpec& spec() const { return spec_; }
  virtual std::string name() const = 0;

  // (a) Feasibility, memory and communication, without a communicator. Infeasible when the
  // degree does not fit the model or batch, or the busiest rank exceeds knobs.device_capacity
  // (or host_capacity).
  virtual Estimate estimate() const = 0;

  // (b) Collective over `comms` (size() == degree): splits sub-communicators first, then only
  // local work (allocation on `device` and, for offload, from the `host` pool; weights
  // initialised from train.seed exactly as one device would). `device` must be of
  // spec().backend. The communicators, the device and the pool must outlive the strategy.
  virtual void setup(comm::CommPair& comms, Device& device, MemoryPool& host) = 0;

  // (c) One optimizer step on the global batch (batch_size rows; every rank passes the same
  // batch and uses the rows it needs): micro-batches with gradient accumulation, gradients
  // reduced, clipped by the global norm, AdamW at scheduled_lr(step). `step` is 0-based.
  virtual StepResult train_step(const data::Batch& batch, std::int64_t step) = 0;
  // Mean loss over every token of `batch` (any number of rows), identical on every rank.
  virtual double evaluate(const data::Batch& batch) = 0;

  // (d) What this rank holds of `kind`, as canonical slices. The data pointers stay valid until
  // the next call on the strategy. Replicated slices are exported by every holder and marked
  // writer on exactly one (TensorSlice::writer). To load: call export_state(kind), fill every
  // slice's data with the canonical values of its box (e.g. read_checkpoint), then
  // import_state(kind, slices).
  virtual StateSlices export_state(StateKind kind) = 0;
  virtual void import_state(StateKind kind, const StateSlices& slices) = 0;

  StrategyStats stats() const;
  void reset_stats();

 protected:
  // Strategies register their communicators (for stats) and time their compute.
  void track(comm::Communicator* c) { comms_.push_back(c); }
  void track(comm::CommPair* p) {
    if (p == nullptr) return;
    track(&p->control());
    track(&p->data());
  }
  // Checks what every setup() checks first: the pair spans `degree` ranks and the device is
  // of the spec's backend (InputError naming the strategy).
  void check_setup(comm::CommPair& comms, Device& device) const;
  StrategySpec spec_;
  StrategyStats stats_;

 private:
  std::vector<comm::Communicator*> comms_;
};

// What a strategy tells the rest of Saturn about itself. The registry (registry.cpp, one line
// per strategy) is the one list: the workload's `strategies:`, the command line's help, the
// profiler's candidate configurations and the cost model know strategies only through it and
// through Strategy::estimate().
struct StrategyInfo {
  std::string name;
  std::string help;    // one line: what it splits or shards, for --help and messages
  int min_degree = 1;  // fewest ranks it is offered on
  int max_degree = 0;  // most ranks (0: any)
  // Offered to the planner (the profiler and the solver). The one-device strategy is not: a
  // degree-1 configuration of one that is stands for it.
  bool offered = true;
  // On one device it trains as a plain single device does (it splits or shards nothing there):
  // the profiler tries only one such strategy at degree 1, the first of the registry the
  // workload allows.
  bool plain_at_one_device = true;
  // The knob settings worth estimating, each a list of KEY=VALUE (the defaults first).
  std::vector<std::vector<std::string>> knob_variants = {{}, {"recompute=true"}};
  std::function<std::unique_ptr<Strategy>(const StrategySpec& spec)> make;
};

// Every strategy, offered ones first in the order the planner tries them.
const std::vector<StrategyInfo>& strategy_registry();
// InputError for an unknown name (lists the valid ones).
const StrategyInfo& strategy_info(const std::string& name);
// The name of the one-device strategy (`saturn train` without --strategy).
const std::string& one_device_strategy();
// The offered strategies' names, in registry order.
const std::vector<std::string>& strategy_names();
// InputError for an unknown name (lists the valid ones). Never falls back to another strategy.
std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategySpec& spec);

}  // namespace saturn::parallel
