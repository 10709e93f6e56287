#include "runtime/parallel/ddp.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/parallel/param_store.hpp"
#include "runtime/parallel/replica_eval.hpp"

namespace saturn::parallel {

StrategyInfo ddp_strategy() {
  StrategyInfo s;
  s.name = "ddp";
  s.help = "a whole replica per rank; gradients allreduced in buckets during the backward";
  s.make = [](const StrategySpec& spec) { return std::make_unique<DdpStrategy>(spec, "ddp", 1); };
  return s;
}

StrategyInfo single_device_strategy() {
  StrategyInfo s;
  s.name = "single";
  s.help = "one device (DDP's degree-1 case): what `saturn train` runs without --strategy";
  s.max_degree = 1;
  s.offered = false;
  s.make = [](const StrategySpec& spec) {
    return std::make_unique<DdpStrategy>(spec, "single", 1);
  };
  return s;
}

DdpStrategy::DdpStrategy(StrategySpec spec, std::string name, int tp)
    : Strategy(std::move(spec)), name_(std::move(name)), tp_(tp < 1 ? 1 : tp) {
  dp_ = spec_.degree >= tp_ ? spec_.degree / tp_ : 1;
}

ModelOptions DdpStrategy::model_options(int tp_rank) const {
  ModelOptions o;
  o.shard.tp_rank = tp_rank;
  o.shard.tp_size = tp_;
  o.recompute = spec_.knobs.recompute;
  return o;
}

Estimate DdpStrategy::estimate() const {
  Estimate e;
  const ModelConfig& c = spec_.model;
  if (name_ == "single" && spec_.degree != 1)
    return infeasible(e, fmt::format("single trains on one device, not {}: pick a parallel "
                                     "strategy for several ranks",
                                     spec_.degree));
  if (spec_.degree % tp_ != 0)
    return infeasible(e, fmt::format("{}: degree {} is not a multiple of the tensor-parallel "
                                     "degree {}",
                                     name_, spec_.degree, tp_));
  if (!check_common(e, spec_, dp_)) return e;
  if (spec_.train.reproducible && (tp_ > 1 || name_ == "tensor"))
    return infeasible(e, tensor_parallel_reason(name_));
  if (c.n_head % tp_ != 0)
    return infeasible(e, fmt::format("{}: tensor-parallel degree {} does not divide n_head {} "
                                     "(attention heads are split across ranks)",
                                     name_, tp_, c.n_head));
  if (c.kv_heads() % tp_ != 0)
    return infeasible(e, fmt::format("{}: tensor-parallel degree {} does not divide n_kv_head {} "
                                     "(key/value heads are split across ranks)",
                                     name_, tp_, c.kv_heads()));
  if (c.ffn_dim() % tp_ != 0)
    return infeasible(e, fmt::format("{}: tensor-parallel degree {} does not divide d_ff {} (MLP "
                                     "columns are split across ranks)",
                                     name_, tp_, c.ffn_dim()));
  const std::int64_t rows = spec_.train.batch_size / dp_;
  std::string why;
  const std::int64_t micro = choose_micro_batch(spec_, rows, &why);
  if (micro == 0) return infeasible(e, fmt::format("{}: {}", name_, why));
  const int T = spec_.train.seq_len;
  const BackendTraits& bt = backend_traits(spec_.backend);
  const ParameterLayout layout(c, tp_, bt.param_align);
  const std::size_t n = layout.total();
  // Gradients, AdamW moments and their reduction cover the trainable tensors (a LoRA job's
  // adapters, else every parameter).
  const std::size_t P = layout.grad_total() * sizeof(float);
  const std::size_t held = bt.footprint(P);  // ... as one buffer of the device's pool
  const std::size_t acts =
      model_activation_bytes(spec_.backend, c, model_options(0), static_cast<int>(micro), T);
  const std::size_t tokens = TokenStage::bytes(bt, micro, T, rows / micro,
                                               {true, true, !spec_.train.packing.cross_attention});
  e.device_breakdown = {{"parameters", ParamStore::bytes(bt, n)},
                        {"gradients", held},
                        {"optimizer state", 2 * held},
                        {"activations", acts},
                        {"tokens", tokens}};
  e.device_bytes = ParamStore::bytes(bt, n) + 3 * held + acts + tokens;
  const bool repro = spec_.train.reproducible;
  if (repro) {
    e.device_breakdown["fp64 gradient accumulator"] = bt.footprint(2 * P);
    e.device_bytes += bt.footprint(2 * P);
  }
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  const double N = static_cast<double>(micro) * T;
  if (dp_ > 1) e.comm_bytes += repro ? 2 * P : P;  // one allreduce of every gradient (fp64)
  if (tp_ > 1) {
    // Two allreduces of [N, C] activations per block forward and two backward (plus the
    // forward again when recomputing), per micro-batch.
    const double per_micro = (4.0 + (spec_.knobs.recompute ? 2.0 : 0.0)) * c.n_layer * N *
                             c.d_model * static_cast<double>(dtype_size(bt.activations));
    e.comm_bytes += static_cast<std::uint64_t>(per_micro * static_cast<double>(e.micro_batches));
  }
  const double tokens_per_step = static_cast<double>(rows) * T;
  e.flops =
      tokens_per_step * (block_flops_per_token(c, T) * c.n_layer / tp_ + head_flops_per_token(c));
  e.layout = tp_ > 1 ? fmt::format("dp={} x tp={}", dp_, tp_) : fmt::format("dp={}", dp_);
  // The cost: a tensor-parallel group allreduces activations in every block (inside a node,
  // not hidden); replicas allreduce the gradients once, as the fp64 sums after the last
  // micro-batch when reproducible, else in a bucket per layer (or of bucket_bytes) while the
  // backward runs.
  e.tensor_degree = tp_;
  if (tp_ > 1) {
    const double calls = (4.0 + (spec_.knobs.recompute ? 2.0 : 0.0)) * c.n_layer *
                         static_cast<double>(e.micro_batches);
    const double bytes = calls * N * c.d_model * static_cast<double>(dtype_size(bt.activations));
    e.comm_schedule.push_back({comm::CollOp::kAllreduce, tp_, calls, bytes, false, false, calls});
  }
  if (dp_ > 1) {
    const double bytes = static_cast<double>(repro ? 2 * P : P);
    const double calls = repro ? 1.0
                         : spec_.knobs.bucket_bytes > 0
                             ? std::ceil(bytes / static_cast<double>(spec_.knobs.bucket_bytes))
                             : c.n_layer + (layout.has_frozen() ? 0.0 : 2.0);
    e.comm_schedule.push_back(
        {comm::CollOp::kAllreduce, dp_, calls, bytes, !repro && spec_.knobs.overlap, true, 1.0});
  }
  finish_estimate(e, spec_, name_);
  return e;
}

void DdpStrategy::setup(comm::CommPair& comms, Device& device, MemoryPool& /*host*/) {
  check_setup(comms, device);
  device_ = &device;
  tp_rank_ = comms.rank() % tp_;
  dp_rank_ = comms.rank() / tp_;
  // Collective part first: every rank reaches it, whatever fails later.
  tp_comm_ = comms.split(dp_rank_, tp_rank_);
  dp_comm_ = comms.split(tp_rank_, dp_rank_);
  track(tp_comm_.get());
  track(dp_comm_.get());

  std::string why;
  const std::int64_t rows = spec_.train.batch_size / dp_;
  micro_ = choose_micro_batch(spec_, rows, &why);
  if (micro_ == 0) throw InputError(fmt::format("{}: {}", name_, why));
  model_ = make_model(device, spec_.model, model_options(tp_rank_));
  if (tp_ > 1) {
    const DType act = device.traits().activations;
    model_->set_tp_allreduce([c = &tp_comm_->data(), act](void* data, std::size_t n) {
      c->allreduce(data, n, act, comm::ReduceOp::kSum);
    });
  }
  model_->init_weights(spec_.train.seed);
  const std::size_t n = model_->layout().grad_total();
  opt_ = std::make_unique<AdamW>(spec_.train.optimizer, model_->layout(), 0, n, device, 0);
  if (spec_.train.reproducible) acc_ = GradAccumulator(device, n);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  buckets_ = std::make_unique<GradBuckets>(model_->layout(), spec_.knobs.bucket_bytes);
  slices_ = SliceSet(device);
  frozen_slices_ = SliceSet(device);
  opt_slices_ = SliceSet(device);
  for (const auto& t : model_->layout().tensors()) {
    // Replicas hold identical copies: replica 0 writes; within a tensor-parallel group, split
    // tensors are distinct and replicated ones are written by tp rank 0.
    const bool writer = dp_rank_ == 0 && (t.split_dim >= 0 || tp_rank_ == 0);
    (t.trainable ? slices_ : frozen_slices_).add_local_tensor(t, tp_rank_, 0, t.offset, writer);
    if (t.trainable) opt_slices_.add_local_tensor(t, tp_rank_, 0, t.grad_offset, writer);
  }
  tokens_ = TokenStage(device, spec_.model.vocab_size, micro_, spec_.train.seq_len, rows / micro_,
                       {true, true, !spec_.train.packing.cross_attention});
  loss_ = DeviceSum(device);
}

double DdpStrategy::grad_square_sum() {
  Model& m = *model_;
  if (spec_.train.reproducible) {  // tp = 1: every replica holds the whole, identical gradient
    ScopedTimer compute(stats_.compute_s);
    ExactSquareSum exact;
    device_->add_exact_squares(exact, m.grads(), m.layout().grad_total());
    return exact.value();
  }
  double sq = 0;
  {
    ScopedTimer compute(stats_.compute_s);
    if (tp_ == 1) {
      sq = device_->sum_of_squares(m.grads(), m.layout().grad_total());
    } else {
      // Split tensors are distinct on each tensor-parallel rank, replicated ones are counted
      // once.
      for (const auto& t : m.layout().tensors())
        if (t.trainable && (t.split_dim >= 0 || tp_rank_ == 0))
          sq += device_->sum_of_squares(m.grads() + t.grad_offset, t.numel);
    }
  }
  tp_comm_->control().allreduce(&sq, 1, comm::ReduceOp::kSum);
  return sq;
}

StepResult DdpStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const RowRange rows = shard_rows(tc.batch_size, dp_rank_, dp_);
  const std::int64_t accum = rows.count / micro_;
  const LossScale per_target = loss_scale(batch);
  const float dloss = per_target.dloss;
  const int L = spec_.model.n_layer;
  const bool overlap = dp_ > 1 && spec_.knobs.overlap && !tc.reproducible;
  Model& m = *model_;
  comm::Communicator& dp_data = dp_comm_->data();
  for (std::int64_t k = 0; k < accum; ++k) tokens_.stage(batch, k, rows.begin + k * micro_, micro_);
  {
    ScopedTimer compute(stats_.compute_s);
    tokens_.upload(accum);
    m.zero_grads();
    loss_.reset();
  }
  for (std::int64_t k = 0; k < accum; ++k) {
    ScopedTimer compute(stats_.compute_s);
    m.set_segments(tokens_.segments(k));
    m.forward(tokens_.inputs(k), tokens_.targets(k));
    loss_.add(m.loss(),
              static_cast<double>(trained_targets(batch, rows.begin + k * micro_, micro_)));
    if (tc.reproducible) {
      // Every micro-batch's gradient goes into the fp64 accumulator as its canonical terms;
      // the reduction across replicas waits for the last one (no overlap): it runs on the
      // fp64 sums.
      reproducible_backward(m, dloss, acc_);
    } else if (!overlap || k + 1 < accum) {
      m.backward(dloss);
    } else {
      // Last micro-batch: each group's gradients are final once its backward is done.
      m.head_backward(dloss);
      buckets_->group_done(dp_data, m.grads(), L);
      for (int l = L - 1; l >= 0; --l) {
        m.block_backward(l);
        buckets_->group_done(dp_data, m.grads(), l);
        buckets_->progress();
      }
      m.embed_backward();
      buckets_->group_done(dp_data, m.grads(), -1);
    }
  }
  if (tc.reproducible) {
    if (dp_ > 1) dp_data.allreduce(acc_.data(), acc_.size(), comm::ReduceOp::kSum);
    ScopedTimer compute(stats_.compute_s);
    acc_.round_and_reset(m.grads());
  } else if (overlap) {
    buckets_->finish(dp_data, m.grads());
  } else if (dp_ > 1) {
    dp_data.allreduce(m.grads(), m.layout().grad_total(), comm::ReduceOp::kSum);
  }

  double loss_sum = loss_.read();
  dp_comm_->control().allreduce(&loss_sum, 1, comm::ReduceOp::kSum);
  const double sq = grad_square_sum();
  StepResult r;
  r.loss = loss_sum / per_target.divisor;
  r.grad_norm = std::sqrt(sq);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  {
    ScopedTimer compute(stats_.compute_s);
    opt_->step(m.master(), m.weights(), m.grads(), r.lr,
               clip_scale(r.grad_norm, tc.optimizer.grad_clip), step + 1);
  }
  ++stats_.steps;
  return r;
}

double DdpStrategy::evaluate(const data::Batch& batch) {
  return replica_eval_loss(batch, dp_rank_, dp_, micro_, *model_, tokens_, loss_,
                           dp_comm_->control());
}

std::vector<float*> DdpStrategy::segments(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
    case StateKind::kFrozen:
      return {model_->master()};
    case StateKind::kAdamM:
      return {opt_->m()};
    case StateKind::kAdamV:
      return {opt_->v()};
  }
  return {};
}

SliceSet& DdpStrategy::slice_set(StateKind kind) {
  return kind == StateKind::kParams   ? slices_
         : kind == StateKind::kFrozen ? frozen_slices_
                                      : opt_slices_;
}

StateSlices DdpStrategy::export_state(StateKind kind) {
  return slice_set(kind).export_from(segments(kind));
}

void DdpStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slice_set(kind).import_into(segments(kind), slices);
  if (kind == StateKind::kParams || kind == StateKind::kFrozen) model_->refresh_weights();
}

}  // namespace saturn::parallel
