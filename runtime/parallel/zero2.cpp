#include "runtime/parallel/zero2.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/parallel/param_store.hpp"
#include "runtime/parallel/replica_eval.hpp"

namespace saturn::parallel {

StrategyInfo zero2_strategy() {
  StrategyInfo s;
  s.name = "zero2";
  s.help =
      "ZeRO-2: whole parameters on every rank; gradients reduce-scattered and AdamW state "
      "sharded 1/N, the updated parts all-gathered";
  s.make = [](const StrategySpec& spec) { return std::make_unique<Zero2Strategy>(spec); };
  return s;
}

Zero2Strategy::Zero2Strategy(StrategySpec spec)
    : Strategy(std::move(spec)),
      layout_(spec_.model, 1, backend_traits(spec_.backend).param_align) {}

Estimate Zero2Strategy::estimate() const {
  Estimate e;
  if (!check_common(e, spec_, spec_.degree)) return e;
  const ModelConfig& c = spec_.model;
  const int N = spec_.degree, T = spec_.train.seq_len, L = c.n_layer;
  const std::int64_t rows = spec_.train.batch_size / N;
  std::string why;
  const std::int64_t micro = choose_micro_batch(spec_, rows, &why);
  if (micro == 0) return infeasible(e, "zero2: " + why);
  const BackendTraits& bt = backend_traits(spec_.backend);
  const bool repro = spec_.train.reproducible;
  const std::size_t n = layout_.total();
  const std::size_t ng = layout_.grad_total();                    // the trained tensors' gradients
  const ShardMap map(layout_, N, 0, ShardMap::Over::kGradients);  // rank 0 owns the most
  std::size_t moments = 0, transient = 0;
  std::uint64_t reduced = 0, gathered = 0;  // bytes per step, as CommStats counts them
  for (int g = -1; g <= L; ++g) {
    const ShardMap::Group& G = map.group(g);
    if (G.own_end > G.own_begin) moments += 2 * bt.footprint((G.own_end - G.own_begin) * 4);
    const std::size_t whole = G.shard * static_cast<std::size_t>(N);
    // The reduction's padded buffer (and, reproducible, its fp64 part), then the gathering's.
    const std::size_t reduction =
        repro ? bt.footprint(whole * sizeof(double)) + bt.footprint(G.shard * sizeof(double))
              : bt.footprint(whole * sizeof(float));
    transient = std::max({transient, reduction, bt.footprint(whole * sizeof(float))});
    reduced += whole * (repro ? sizeof(double) : sizeof(float));
    gathered += G.shard * sizeof(float);
  }
  ModelOptions o;
  o.recompute = spec_.knobs.recompute;
  const std::size_t acts = model_activation_bytes(spec_.backend, c, o, static_cast<int>(micro), T);
  const std::size_t tokens = TokenStage::bytes(bt, micro, T, rows / micro,
                                               {true, true, !spec_.train.packing.cross_attention});
  const std::size_t params = ParamStore::bytes(bt, n);
  const std::size_t grads = bt.footprint(ng * sizeof(float));
  const std::size_t owned = bt.footprint(map.total() * sizeof(float));
  e.device_breakdown = {{"parameters", params},
                        {"gradients", grads},
                        {"reduced gradients", owned},
                        {"optimizer state", moments},
                        {"activations", acts},
                        {"tokens", tokens},
                        {"gradient reduction (peak)", transient}};
  e.device_bytes = params + grads + owned + moments + acts + tokens + transient;
  if (repro) {
    const std::size_t acc = bt.footprint(ng * sizeof(double));
    e.device_breakdown["fp64 gradient accumulator"] = acc;
    e.device_bytes += acc;
  }
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  e.comm_bytes = reduced + gathered;
  // The cost: after the last micro-batch, one reduce-scatter and one all-gather per group, one
  // after the other (the replicas meet at the first), none hidden behind compute.
  double groups = 0;  // with anything to reduce (a LoRA job's embeddings and head have not)
  for (int g = -1; g <= L; ++g) groups += layout_.grad_group_size(g) > 0 ? 1.0 : 0.0;
  e.comm_schedule = {
      {comm::CollOp::kReduceScatter, N, groups, static_cast<double>(reduced), false, true, 1.0},
      {comm::CollOp::kAllGather, N, groups, static_cast<double>(gathered), false, true, 0.0}};
  e.flops =
      static_cast<double>(rows) * T * (block_flops_per_token(c, T) * L + head_flops_per_token(c));
  e.layout = fmt::format("dp={} (gradients and AdamW state sharded 1/{})", N, N);
  finish_estimate(e, spec_, "zero2");
  return e;
}

void Zero2Strategy::setup(comm::CommPair& comms, Device& device, MemoryPool& /*host*/) {
  check_setup(comms, device);
  comms_ = &comms;
  track(comms_);
  device_ = &device;
  rank_ = comms.rank();
  size_ = comms.size();
  const ModelConfig& c = spec_.model;
  const int L = c.n_layer;
  const std::int64_t rows = spec_.train.batch_size / size_;
  std::string why;
  micro_ = choose_micro_batch(spec_, rows, &why);
  if (micro_ == 0) throw InputError("zero2: " + why);

  ModelOptions o;
  o.recompute = spec_.knobs.recompute;
  model_ = make_model(device, c, o);
  if (model_->layout().total() != layout_.total())
    throw Error("zero2: the model's layout is not the one its parts were cut from");
  model_->init_weights(spec_.train.seed);
  shards_ = ShardMap(layout_, size_, rank_, ShardMap::Over::kGradients);
  owned_grads_ = Buffer<float>(device.memory(), shards_.total(), "reduced gradients");
  device.zero(owned_grads_.data(), owned_grads_.bytes());
  opts_.resize(static_cast<std::size_t>(L + 2));
  for (int g = -1; g <= L; ++g) {
    const ShardMap::Group& G = shards_.group(g);
    if (G.own_end > G.own_begin)
      opts_[static_cast<std::size_t>(g + 1)] =
          std::make_unique<AdamW>(spec_.train.optimizer, layout_, G.own_begin, G.own_end, device,
                                  layout_.weight_of_gradient(g, G.own_begin));
  }
  if (spec_.train.reproducible) acc_ = GradAccumulator(device, layout_.grad_total());
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  // The weights are whole on every rank (rank 0 writes them); the moments, the owned parts.
  params_ = SliceSet(device);
  frozen_ = SliceSet(device);
  owned_ = SliceSet(device);
  for (const auto& t : layout_.tensors()) {
    (t.trainable ? params_ : frozen_).add_local_tensor(t, 0, 0, t.offset, rank_ == 0);
    if (!t.trainable) continue;
    const ShardMap::Piece p = shards_.owned(t.layer, t.grad_offset, t.grad_offset + t.numel);
    if (!p.empty())
      owned_.add_flat_range(t, p.begin - t.grad_offset, p.end - t.grad_offset, t.layer + 1,
                            p.begin - shards_.group(t.layer).own_begin, true);
  }
  tokens_ = TokenStage(device, c.vocab_size, micro_, spec_.train.seq_len, rows / micro_,
                       {true, true, !spec_.train.packing.cross_attention});
  loss_ = DeviceSum(device);
}

void Zero2Strategy::reduce_scatter_group(int g) {
  const ShardMap::Group& G = shards_.group(g);
  if (G.size == 0) return;  // nothing trained in the group (LoRA: the embeddings, the head)
  const std::size_t whole = G.shard * static_cast<std::size_t>(size_);
  comm::Communicator& data = comms_->data();
  if (spec_.train.reproducible) {
    // The fp64 sums of this rank's micro-batches, summed over the ranks, rounded once.
    Buffer<double> sums(device_->memory(), whole, "gradient reduction");
    device_->zero(sums.data(), sums.bytes());
    device_->copy(sums.data(), acc_.data() + G.begin, G.size * sizeof(double));
    device_->zero(acc_.data() + G.begin, G.size * sizeof(double));  // ready for the next step
    Buffer<double> part(device_->memory(), G.shard, "gradient reduction");
    data.reduce_scatter(sums.data(), part.data(), G.shard, comm::ReduceOp::kSum);
    device_->round_into(owned_grads_.data() + G.offset, part.data(), G.shard);
    return;
  }
  Buffer<float> sums(device_->memory(), whole, "gradient reduction");
  device_->zero(sums.data(), sums.bytes());
  device_->copy(sums.data(), model_->grads() + G.begin, G.size * sizeof(float));
  data.reduce_scatter(sums.data(), owned_grads_.data() + G.offset, G.shard, comm::ReduceOp::kSum);
}

// The updated parts of group g's trained parameters, from every rank to every rank.
void Zero2Strategy::all_gather_group(int g) {
  const ShardMap::Group& G = shards_.group(g);
  if (G.size == 0) return;
  Buffer<float> whole(device_->memory(), G.shard * static_cast<std::size_t>(size_),
                      "parameter gathering");
  float* mine = whole.data() + static_cast<std::size_t>(rank_) * G.shard;
  device_->zero(mine, G.shard * sizeof(float));
  if (G.own_end > G.own_begin)
    device_->copy(mine, model_->master() + layout_.weight_of_gradient(g, G.own_begin),
                  (G.own_end - G.own_begin) * sizeof(float));
  comms_->data().all_gather(mine, whole.data(), G.shard);  // in place
  device_->copy(model_->master() + layout_.weight_of_gradient(g, G.begin), whole.data(),
                G.size * sizeof(float));
}

StepResult Zero2Strategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const RowRange rows = shard_rows(tc.batch_size, rank_, size_);
  const std::int64_t accum = rows.count / micro_;
  const LossScale per_target = loss_scale(batch);
  const float dloss = per_target.dloss;
  const int L = spec_.model.n_layer;
  Model& m = *model_;
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
    if (tc.reproducible)
      reproducible_backward(m, dloss, acc_);
    else
      m.backward(dloss);
  }
  for (int g = -1; g <= L; ++g) reduce_scatter_group(g);

  // The loss and the gradient norm over the owned parts (padding is zero), summed over ranks.
  double sums[2] = {loss_.read(), 0.0};
  comm::Communicator& control = comms_->control();
  if (tc.reproducible) {
    ExactSquareSum exact;
    device_->add_exact_squares(exact, owned_grads_.data(), owned_grads_.size());
    allreduce_exact(exact, control);
    sums[1] = exact.value();
    control.allreduce(sums, 1, comm::ReduceOp::kSum);
  } else {
    sums[1] = device_->sum_of_squares(owned_grads_.data(), owned_grads_.size());
    control.allreduce(sums, 2, comm::ReduceOp::kSum);
  }
  StepResult r;
  r.loss = sums[0] / per_target.divisor;
  r.grad_norm = std::sqrt(sums[1]);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  const float scale = clip_scale(r.grad_norm, tc.optimizer.grad_clip);
  {
    ScopedTimer compute(stats_.compute_s);
    // The owned parts of the master weights; the kernels' copy is refreshed once all are in.
    for (int g = -1; g <= L; ++g)
      if (auto& opt = opts_[static_cast<std::size_t>(g + 1)]) {
        const ShardMap::Group& G = shards_.group(g);
        opt->step(m.master() + layout_.weight_of_gradient(g, G.own_begin), nullptr,
                  owned_grads_.data() + G.offset, r.lr, scale, step + 1);
      }
  }
  for (int g = -1; g <= L; ++g) all_gather_group(g);
  {
    ScopedTimer compute(stats_.compute_s);
    m.refresh_weights();
  }
  ++stats_.steps;
  return r;
}

double Zero2Strategy::evaluate(const data::Batch& batch) {
  return replica_eval_loss(batch, rank_, size_, micro_, *model_, tokens_, loss_, comms_->control());
}

std::vector<float*> Zero2Strategy::moments(StateKind kind) {
  std::vector<float*> s(opts_.size(), nullptr);
  for (std::size_t i = 0; i < opts_.size(); ++i)
    if (opts_[i]) s[i] = kind == StateKind::kAdamM ? opts_[i]->m() : opts_[i]->v();
  return s;
}

StateSlices Zero2Strategy::export_state(StateKind kind) {
  if (kind == StateKind::kFrozen) return frozen_.export_from({model_->master()});
  if (kind == StateKind::kParams) return params_.export_from({model_->master()});
  return owned_.export_from(moments(kind));
}

void Zero2Strategy::import_state(StateKind kind, const StateSlices& slices) {
  if (kind == StateKind::kParams || kind == StateKind::kFrozen) {
    (kind == StateKind::kParams ? params_ : frozen_).import_into({model_->master()}, slices);
    model_->refresh_weights();
    return;
  }
  owned_.import_into(moments(kind), slices);
}

}  // namespace saturn::parallel
