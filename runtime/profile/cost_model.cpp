#include "runtime/profile/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/hybrid.hpp"
#include "runtime/parallel/strategy.hpp"

namespace saturn::profile {

std::string ConfigSpec::knobs_text() const {
  std::string out;
  for (const auto& k : knobs) out += (out.empty() ? "" : ",") + k;
  return out;
}

std::string ConfigSpec::label() const {
  return knobs.empty() ? strategy : fmt::format("{}[{}]", strategy, knobs_text());
}

std::int64_t evaluations(const TrainConfig& train, std::int64_t steps) {
  if (steps <= 0) return 0;
  const std::int64_t periodic = train.eval_every > 0 ? steps / train.eval_every : 0;
  const bool last_is_periodic = train.eval_every > 0 && steps % train.eval_every == 0;
  return periodic + (last_is_periodic ? 0 : 1);
}

double run_seconds(const TrainConfig& train, std::int64_t steps, double step_s, double eval_s) {
  return static_cast<double>(steps) * step_s +
         static_cast<double>(evaluations(train, steps)) * eval_s;
}

namespace {

std::size_t breakdown(const parallel::Estimate& e, const char* tag) {
  const auto it = e.device_breakdown.find(tag);
  return it == e.device_breakdown.end() ? 0 : it->second;
}

}  // namespace

CostEstimate estimate_cost(const ModelConfig& model, const TrainConfig& train,
                           const ConfigSpec& config, const Calibration& cal,
                           std::size_t device_capacity, std::size_t host_capacity,
                           DeviceKind backend) {
  // Rates measured on one backend say nothing of the other (a GPU's GEMMs are 100-1000x a
  // CPU's): never estimate a CUDA job from a CPU calibration, nor the reverse.
  const bool cal_is_cpu = cal.device == "cpu";
  if (cal_is_cpu != (backend == DeviceKind::kCpu))
    throw Error(fmt::format(
        "cost model: a {} job cannot be estimated from the calibration of {} (hardware {}); "
        "calibrate on the job's backend (saturn profile --device {} --recalibrate)",
        device_kind_name(backend), cal.device, cal.hardware_id, device_kind_name(backend)));
  parallel::StrategySpec spec;
  spec.backend = backend;
  spec.model = model;
  spec.train = train;
  spec.degree = config.degree;
  spec.knobs = parallel::parse_knobs(config.knobs);
  spec.knobs.device_capacity = device_capacity;
  spec.knobs.host_capacity = host_capacity;
  const auto strategy = parallel::make_strategy(config.strategy, spec);
  const parallel::Estimate e = strategy->estimate();

  CostEstimate c;
  c.feasible = e.feasible;
  c.reason = e.reason;
  c.device_bytes = e.device_bytes;
  c.host_bytes = e.host_bytes;
  c.comm_bytes = e.comm_bytes;
  c.host_transfer_bytes = e.host_transfer_bytes;
  c.flops = e.flops;
  c.micro_batch = e.micro_batch;
  c.micro_batches = e.micro_batches;
  c.layout = e.layout;
  if (!e.feasible || e.micro_batch <= 0) return c;

  const std::string& name = config.strategy;
  const parallel::Knobs& k = spec.knobs;
  const int T = train.seq_len, L = model.n_layer;
  int tp = 1, pp = 1;
  if (name == "tensor") tp = config.degree;
  if (name == "ddp+tensor") tp = std::max(parallel::hybrid_tensor_degree(spec), 1);
  if (name == "pipeline") pp = config.degree;
  if (name == "ddp+pipeline") pp = std::max(parallel::hybrid_stages(spec), 1);
  const int dp = std::max(config.degree / (tp * pp), 1);
  c.tensor_degree = tp;
  const bool inter = config.nodes > 1 && cal.has_inter_node();
  const double m = static_cast<double>(e.micro_batches);

  // Compute: the strategy's FLOPs at the calibrated speed of this model's micro-batch.
  const int micro = static_cast<int>(e.micro_batch);
  const double block = parallel::block_flops_per_token(model, T) * L / tp;
  const double head = parallel::head_flops_per_token(model);
  const double micro_flops = static_cast<double>(micro) * T * (block + head);
  const double micro_s = cal.micro_batch_seconds(model, micro, T, tp);
  c.compute_s = e.flops / micro_flops * micro_s;
  if (k.recompute) c.compute_s *= 1.0 + block / (block + head) / 3.0;
  if (pp > 1) c.bubble_s = c.compute_s * (pp - 1) / std::max(m, 1.0);

  // Communication, by the strategy's collective pattern.
  const double overlapped = k.overlap ? 1.0 - cal.overlap : 1.0;
  // Reproducible ddp and offload reduce their fp64 sums once, after the last micro-batch: no
  // overlap with the backward, one call.
  const bool one_reduction = train.reproducible;
  const double bytes = static_cast<double>(e.comm_bytes);
  const double groups = L + 2;  // embeddings, blocks, head: one bucket / gather each
  if (name == "ddp" || name == "tensor" || name == "ddp+tensor") {
    double tp_bytes = 0;
    if (tp > 1) {
      const double calls = (4.0 + (k.recompute ? 2.0 : 0.0)) * L * m;
      tp_bytes = calls * micro * T * model.d_model * sizeof(float);
      c.comm_s += cal.comm_seconds(CollOp::kAllreduce, tp, false, calls, tp_bytes) +
                  cal.sync_seconds(tp, false, calls);
    }
    const double dp_bytes = std::max(bytes - tp_bytes, 0.0);
    const double calls = one_reduction ? 1.0
                         : k.bucket_bytes > 0
                             ? std::ceil(dp_bytes / static_cast<double>(k.bucket_bytes))
                             : groups;
    c.comm_s += (one_reduction ? 1.0 : overlapped) *
                    cal.comm_seconds(CollOp::kAllreduce, dp, inter, calls, dp_bytes) +
                cal.sync_seconds(dp, inter, 1);  // replicas meet once, at the last bucket
  } else if (name == "fsdp") {
    const int n = config.degree;
    const double tied = model.tied() ? 1 : 0;
    // Per micro-batch every group is gathered for forward and backward (the head once) and its
    // gradients reduce-scattered: gathers move 2 shards per group, reductions N shards.
    const double ag_bytes = bytes * 2.0 / (n + 2.0);
    const double rs_bytes = bytes - ag_bytes;
    const double overlap_gather = k.prefetch ? 1.0 - cal.overlap : 1.0;
    c.comm_s += overlap_gather * cal.comm_seconds(CollOp::kAllGather, n, inter,
                                                  m * (2 * groups - 1 + tied), ag_bytes);
    c.comm_s += overlapped *
                cal.comm_seconds(CollOp::kReduceScatter, n, inter, m * (groups + tied), rs_bytes);
    c.comm_s += cal.sync_seconds(n, inter, m * (2 * groups - 1));  // every gather is waited for
  } else if (name == "pipeline" || name == "ddp+pipeline") {
    const double nc = static_cast<double>(micro) * T * model.d_model * sizeof(float);
    const double links = pp > 2 ? 2 : (pp > 1 ? 1 : 0);
    const double p2p_calls = m * 2 * links;
    const double p2p_bytes = std::min(p2p_calls * nc, bytes);
    c.comm_s += cal.comm_seconds(CollOp::kSendRecv, 2, inter, p2p_calls, p2p_bytes) +
                cal.sync_seconds(2, inter, p2p_calls);
    const double rest = bytes - p2p_bytes;
    if (rest > 0) {
      const double calls =
          (model.tied() ? 1.0 : 0.0) + (dp > 1 ? std::ceil(static_cast<double>(L) / pp) + 1 : 0.0);
      c.comm_s +=
          cal.comm_seconds(CollOp::kAllreduce, std::max(dp, 2), inter, std::max(calls, 1.0), rest);
    }
  } else if (name == "offload") {
    c.comm_s += (one_reduction ? 1.0 : overlapped) *
                    cal.comm_seconds(CollOp::kAllreduce, config.degree, inter,
                                     one_reduction ? 1.0 : groups, bytes) +
                cal.sync_seconds(config.degree, inter, 1);
  } else {
    throw InputError(fmt::format("cost model: no communication pattern for strategy '{}'", name));
  }

  if (e.host_transfer_bytes > 0 && cal.copy_bytes_per_s > 0)
    c.transfer_s = static_cast<double>(e.host_transfer_bytes) / cal.copy_bytes_per_s;
  if (train.reproducible && cal.copy_bytes_per_s > 0) {
    // Reproducible mode adds every micro-batch's fp32 gradient into an fp64 accumulator and
    // zeroes it (fsdp converts each gathered group gradient to fp64 instead): about the memory
    // traffic of copying 12 bytes per gradient element, per micro-batch.
    const double local = name == "fsdp" || name == "offload"
                             ? static_cast<double>(model.num_parameters())
                             : static_cast<double>(breakdown(e, "fp64 gradient accumulator")) / 8.0;
    c.compute_s += m * local * 12.0 / cal.copy_bytes_per_s;
  }
  // AdamW state is two floats per local parameter (on the host for offload).
  const std::size_t state = name == "offload" ? e.host_bytes / 2 : breakdown(e, "optimizer state");
  const double params = static_cast<double>(state) / (2.0 * sizeof(float));
  c.optimizer_s = params * cal.optimizer_s_per_param;
  // A node busier (or idler) than when it was calibrated slows (or speeds) everything alike.
  for (double* part : {&c.compute_s, &c.bubble_s, &c.comm_s, &c.transfer_s, &c.optimizer_s})
    *part *= cal.load_factor;
  c.step_s = c.compute_s + c.bubble_s + c.comm_s + c.transfer_s + c.optimizer_s;

  // Evaluation: forward only (a third of forward+backward) over eval_batches micro-batches.
  const double rows_evaluated = static_cast<double>(eval_rows(train));
  const double step_rows = static_cast<double>(train.batch_size);
  c.eval_s = (c.compute_s + c.bubble_s) / 3.0 * rows_evaluated / step_rows;
  return c;
}

}  // namespace saturn::profile
