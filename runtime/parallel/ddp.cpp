#include "runtime/parallel/ddp.hpp"

#include <fmt/format.h>

#include <cmath>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

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
  if (c.ffn_dim() % tp_ != 0)
    return infeasible(e, fmt::format("{}: tensor-parallel degree {} does not divide d_ff {} (MLP "
                                     "columns are split across ranks)",
                                     name_, tp_, c.ffn_dim()));
  const std::int64_t rows = spec_.train.batch_size / dp_;
  std::string why;
  const std::int64_t micro = choose_micro_batch(spec_, rows, &why);
  if (micro == 0) return infeasible(e, fmt::format("{}: {}", name_, why));
  const int T = spec_.train.seq_len;
  const std::size_t P = ParameterLayout(c, tp_).total() * sizeof(float);
  const std::size_t acts =
      GptModel::activation_bytes(c, model_options(0), static_cast<int>(micro), T);
  e.device_breakdown = {
      {"parameters", P}, {"gradients", P}, {"optimizer state", 2 * P}, {"activations", acts}};
  e.device_bytes = 4 * P + acts;
  const bool repro = spec_.train.reproducible;
  if (repro) {
    e.device_breakdown["fp64 gradient accumulator"] = 2 * P;
    e.device_bytes += 2 * P;
  }
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  const double N = static_cast<double>(micro) * T;
  if (dp_ > 1) e.comm_bytes += repro ? 2 * P : P;  // one allreduce of every gradient (fp64)
  if (tp_ > 1) {
    // Two allreduces of [N, C] per block forward and two backward (plus the forward again when
    // recomputing), per micro-batch.
    const double per_micro =
        (4.0 + (spec_.knobs.recompute ? 2.0 : 0.0)) * c.n_layer * N * c.d_model * sizeof(float);
    e.comm_bytes += static_cast<std::uint64_t>(per_micro * static_cast<double>(e.micro_batches));
  }
  const double tokens = static_cast<double>(rows) * T;
  e.flops = tokens * (block_flops_per_token(c, T) * c.n_layer / tp_ + head_flops_per_token(c));
  e.layout = tp_ > 1 ? fmt::format("dp={} x tp={}", dp_, tp_) : fmt::format("dp={}", dp_);
  check_capacity(e, spec_.knobs, name_);
  return e;
}

void DdpStrategy::setup(comm::Communicator& comm, MemoryPool& device, MemoryPool& /*host*/) {
  if (comm.size() != spec_.degree)
    throw InputError(fmt::format("{} at degree {} needs {} ranks; the communicator has {}", name_,
                                 spec_.degree, spec_.degree, comm.size()));
  tp_rank_ = comm.rank() % tp_;
  dp_rank_ = comm.rank() / tp_;
  // Collective part first: every rank reaches it, whatever fails later.
  tp_comm_ = comm.split(dp_rank_, tp_rank_);
  dp_comm_ = comm.split(tp_rank_, dp_rank_);
  track(tp_comm_.get());
  track(dp_comm_.get());

  std::string why;
  micro_ = choose_micro_batch(spec_, spec_.train.batch_size / dp_, &why);
  if (micro_ == 0) throw InputError(fmt::format("{}: {}", name_, why));
  model_ = std::make_unique<GptModel>(spec_.model, device, model_options(tp_rank_));
  if (tp_ > 1)
    model_->set_tp_allreduce([c = tp_comm_.get()](float* data, std::size_t n) {
      c->allreduce(data, n, comm::ReduceOp::kSum);
    });
  model_->init_weights(spec_.train.seed);
  opt_ = std::make_unique<AdamW>(spec_.train.optimizer, model_->layout(), 0, model_->num_params(),
                                 device);
  if (spec_.train.reproducible) acc_ = GradAccumulator(device, model_->num_params());
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  buckets_ = std::make_unique<GradBuckets>(model_->layout(), spec_.knobs.bucket_bytes);
  for (const auto& t : model_->layout().tensors()) {
    // Replicas hold identical copies: replica 0 writes; within a tensor-parallel group, split
    // tensors are distinct and replicated ones are written by tp rank 0.
    const bool writer = dp_rank_ == 0 && (t.split_dim >= 0 || tp_rank_ == 0);
    slices_.add_local_tensor(t, tp_rank_, 0, t.offset, writer);
  }
  const std::size_t n = static_cast<std::size_t>(micro_) * spec_.train.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
}

StepResult DdpStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const int T = tc.seq_len;
  const RowRange rows = shard_rows(tc.batch_size, dp_rank_, dp_);
  const std::int64_t accum = rows.count / micro_;
  const float dloss = 1.0f / static_cast<float>(tc.batch_size * T);
  const int L = spec_.model.n_layer;
  const bool overlap = dp_ > 1 && spec_.knobs.overlap;
  GptModel& m = *model_;
  double loss_sum = 0;
  {
    ScopedTimer compute(stats_.compute_s);
    m.zero_grads();
  }
  if (tc.reproducible) {
    reproducible_micro_batches(batch, rows, dloss, &loss_sum);
    if (dp_ > 1) dp_comm_->allreduce(acc_.data(), acc_.size(), comm::ReduceOp::kSum);
    ScopedTimer compute(stats_.compute_s);
    acc_.round_and_reset(m.grads());
  } else {
    for (std::int64_t k = 0; k < accum; ++k) {
      copy_rows(batch, rows.begin + k * micro_, micro_, micro_, inputs_.data(), targets_.data());
      ScopedTimer compute(stats_.compute_s);
      loss_sum += static_cast<double>(
                      m.forward(inputs_.data(), targets_.data(), static_cast<int>(micro_), T)) *
                  static_cast<double>(micro_);
      if (!overlap || k + 1 < accum) {
        m.backward(dloss);
        continue;
      }
      // Last micro-batch: each group's gradients are final once its backward is done.
      m.head_backward(dloss);
      buckets_->group_done(*dp_comm_, m.grads(), L);
      for (int l = L - 1; l >= 0; --l) {
        m.block_backward(l);
        buckets_->group_done(*dp_comm_, m.grads(), l);
        buckets_->progress();
      }
      m.embed_backward();
      buckets_->group_done(*dp_comm_, m.grads(), -1);
    }
    if (overlap)
      buckets_->finish(*dp_comm_, m.grads());
    else if (dp_ > 1)
      dp_comm_->allreduce(m.grads(), m.num_params(), comm::ReduceOp::kSum);
  }

  double loss_and_norm[2] = {loss_sum, 0.0};
  dp_comm_->allreduce(loss_and_norm, 1, comm::ReduceOp::kSum);
  const double loss = loss_and_norm[0] / static_cast<double>(tc.batch_size);
  // Global norm: split tensors are distinct on each tensor-parallel rank, replicated ones are
  // counted once.
  double sq = 0;
  if (tc.reproducible) {  // tp = 1: every replica holds the whole, identical gradient
    ScopedTimer compute(stats_.compute_s);
    ExactSquareSum exact;
    exact.add(m.grads(), m.num_params());
    sq = exact.value();
  } else {
    {
      ScopedTimer compute(stats_.compute_s);
      for (const auto& t : m.layout().tensors())
        if (t.split_dim >= 0 || tp_rank_ == 0) sq += sum_squares(m.grads() + t.offset, t.numel);
    }
    tp_comm_->allreduce(&sq, 1, comm::ReduceOp::kSum);
  }
  StepResult r;
  r.loss = loss;
  r.grad_norm = std::sqrt(sq);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  {
    ScopedTimer compute(stats_.compute_s);
    opt_->step(m.params(), m.grads(), r.lr, clip_scale(r.grad_norm, tc.optimizer.grad_clip),
               step + 1);
  }
  ++stats_.steps;
  return r;
}

// Reproducible mode: every micro-batch's gradient added to the fp64 accumulator as its canonical
// terms. The reduction across replicas waits for the last micro-batch (no overlap): it runs on
// the fp64 sums.
void DdpStrategy::reproducible_micro_batches(const data::Batch& batch, const RowRange& rows,
                                             float dloss, double* loss_sum) {
  const int T = spec_.train.seq_len;
  for (std::int64_t k = 0; k < rows.count / micro_; ++k) {
    copy_rows(batch, rows.begin + k * micro_, micro_, micro_, inputs_.data(), targets_.data());
    ScopedTimer compute(stats_.compute_s);
    *loss_sum += static_cast<double>(model_->forward(inputs_.data(), targets_.data(),
                                                     static_cast<int>(micro_), T)) *
                 static_cast<double>(micro_);
    reproducible_backward(*model_, dloss, acc_);
  }
}

double DdpStrategy::evaluate(const data::Batch& batch) {
  const int T = spec_.train.seq_len;
  const RowRange rows = shard_rows(batch.batch_size, dp_rank_, dp_);
  double sum = 0;
  for (std::int64_t r = 0; r < rows.count; r += micro_) {
    const std::int64_t n = std::min(micro_, rows.count - r);
    copy_rows(batch, rows.begin + r, n, micro_, inputs_.data(), targets_.data());
    sum += static_cast<double>(
               model_->forward(inputs_.data(), targets_.data(), static_cast<int>(micro_), T)) *
           static_cast<double>(n * T);
  }
  dp_comm_->allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / static_cast<double>(batch.batch_size * T);
}

std::vector<float*> DdpStrategy::segments(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
      return {model_->params()};
    case StateKind::kAdamM:
      return {opt_->m()};
    case StateKind::kAdamV:
      return {opt_->v()};
  }
  return {};
}

StateSlices DdpStrategy::export_state(StateKind kind) {
  return slices_.export_from(segments(kind));
}

void DdpStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slices_.import_into(segments(kind), slices);
}

}  // namespace saturn::parallel
