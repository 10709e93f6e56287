#include "runtime/profile/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/parallel/common.hpp"
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

RunParts& RunParts::operator+=(const RunParts& o) {
  start_s += o.start_s;
  steps_s += o.steps_s;
  evals_s += o.evals_s;
  checkpoints_s += o.checkpoints_s;
  return *this;
}

namespace {
// Multiples of `every` in (from, to].
std::int64_t multiples(std::int64_t every, std::int64_t from, std::int64_t to) {
  return every > 0 && to > from ? to / every - from / every : 0;
}
}  // namespace

SegmentWork segment_work(const TrainConfig& train, std::int64_t from, std::int64_t to) {
  SegmentWork w;
  if (to <= from) return w;
  w.steps = to - from;
  const bool last = to >= train.steps;
  w.evals = multiples(train.eval_every, from, to);
  if (last && (train.eval_every <= 0 || to % train.eval_every != 0)) ++w.evals;
  w.checkpoints = multiples(train.checkpoint_every, from, to);
  const bool periodic_at_end = train.checkpoint_every > 0 && to % train.checkpoint_every == 0;
  if (last || !periodic_at_end) ++w.checkpoints;  // final.h5, or the stop's checkpoint
  return w;
}

RunParts run_parts(const TrainConfig& train, std::int64_t from, std::int64_t to,
                   const UnitCosts& c) {
  const SegmentWork w = segment_work(train, from, to);
  RunParts p;
  p.start_s = c.start_s;
  p.steps_s = static_cast<double>(w.steps) * c.step_s;
  p.evals_s = static_cast<double>(w.evals) * c.eval_s;
  p.checkpoints_s = static_cast<double>(w.checkpoints) * c.checkpoint_s;
  return p;
}

double checkpoint_bytes(const ModelConfig& model) {
  const double trained = static_cast<double>(model.lora.enabled() ? model.adapter_parameters()
                                                                  : model.num_parameters());
  return trained * 3.0 * sizeof(float);
}

double checkpoint_datasets(const ModelConfig& model) {
  double trained_tensors = 0;
  const ParameterLayout layout(model);
  for (const auto& t : layout.tensors())
    if (t.trainable) ++trained_tensors;
  return 3 * trained_tensors;  // weights and both AdamW moments
}

double checkpoint_sync_points(const ModelConfig& model) {
  return 5 * checkpoint_datasets(model) + 3 * 3 + 8;
}

double checkpoint_seconds(const ModelConfig& model, int degree, const WriteRates& writes,
                          double sync_s) {
  return writes.seconds(checkpoint_bytes(model), checkpoint_datasets(model)) +
         (degree > 1 ? sync_s * checkpoint_sync_points(model) : 0.0);
}

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

  const parallel::Knobs& k = spec.knobs;
  const int T = train.seq_len, L = model.n_layer;
  const int tp = std::max(e.tensor_degree, 1), pp = std::max(e.pipeline_stages, 1);
  c.tensor_degree = tp;
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

  // Communication: the strategy's collectives, each at its calibrated cost, hidden behind
  // compute up to the calibrated share when the strategy overlaps it.
  const bool spans_nodes = config.nodes > 1 && cal.has_inter_node();
  for (const parallel::CommCall& call : e.comm_schedule) {
    const bool inter = call.crosses_nodes && spans_nodes;
    const double exposed = call.overlappable ? 1.0 - cal.overlap : 1.0;
    c.comm_s += exposed * cal.comm_seconds(call.op, call.group, inter, call.calls, call.bytes);
    c.comm_s += cal.sync_seconds(call.group, inter, call.sync_points);
  }

  if (e.host_transfer_bytes > 0 && cal.copy_bytes_per_s > 0)
    c.transfer_s = static_cast<double>(e.host_transfer_bytes) / cal.copy_bytes_per_s;
  // Reproducible mode adds every micro-batch's fp32 gradient into an fp64 accumulator and
  // zeroes it: about the memory traffic of copying 12 bytes per element, per micro-batch.
  if (train.reproducible && cal.copy_bytes_per_s > 0)
    c.compute_s += m * e.accumulated_elements * 12.0 / cal.copy_bytes_per_s;
  c.optimizer_s = e.optimizer_elements * cal.optimizer_s_per_param;
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
