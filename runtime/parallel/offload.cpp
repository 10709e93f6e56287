#include "runtime/parallel/offload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/core/error.hpp"

namespace saturn::parallel {

struct OffloadStrategy::OnDevice {
  std::size_t count = 0;
  Buffer<float> master;       // the group's fp32 weights (the kernels read them on the CPU)
  Buffer<std::byte> weights;  // the kernels' copy, when the backend keeps a separate one
  Buffer<float> grads;
};

OffloadStrategy::OffloadStrategy(StrategySpec spec)
    : Strategy(std::move(spec)),
      layout_(spec_.model, 1, backend_traits(spec_.backend).param_align) {}

OffloadStrategy::~OffloadStrategy() = default;

Estimate OffloadStrategy::estimate() const {
  Estimate e;
  if (!check_common(e, spec_, spec_.degree)) return e;
  const ModelConfig& c = spec_.model;
  const int T = spec_.train.seq_len, L = c.n_layer;
  const std::int64_t rows = spec_.train.batch_size / spec_.degree;
  std::string why;
  const std::int64_t micro = choose_micro_batch(spec_, rows, &why);
  if (micro == 0) return infeasible(e, "offload: " + why);
  const BackendTraits& bt = backend_traits(spec_.backend);
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  const std::size_t acts = model_activation_bytes(spec_.backend, c, o, static_cast<int>(micro), T);
  const std::size_t tokens = TokenStage::bytes(bt, micro, T, rows / micro, true, true);
  // One group's weights and gradients on the device at a time; the head phase holds the final
  // group and (GPT-2) the token embedding it is tied to. Per loaded group of c elements, at the
  // footprints of the backend's pool: the fp32 upload and, where the kernels read another type,
  // its conversion (the upload is freed before the gradients arrive), then the gradients.
  auto loaded = [&](std::size_t count) {
    return bt.footprint(count * sizeof(float)) + (bt.separate_weights()
                                                      ? bt.footprint(count * dtype_size(bt.weights))
                                                      : bt.footprint(count * sizeof(float)));
  };
  std::size_t group_peak = 0;
  for (int g = -1; g < L; ++g) group_peak = std::max(group_peak, loaded(layout_.group_size(g)));
  const TiedHead tied(c, layout_);
  std::size_t head = loaded(layout_.group_size(L));
  if (tied.tied) head += loaded(tied.elements);
  group_peak = std::max(group_peak, head);
  const std::size_t P = layout_.total() * sizeof(float);
  e.device_breakdown = {
      {"activations", acts}, {"tokens", tokens}, {"offloaded groups (peak)", group_peak}};
  e.device_bytes = acts + tokens + group_peak;
  e.host_bytes = 4 * P;
  const bool repro = spec_.train.reproducible;
  if (repro) e.host_bytes += 2 * P;  // the fp64 gradient accumulator
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  // Per micro-batch every group's parameters go to the device twice (forward, backward) and
  // its gradients to the device and back once (the tied embedding's twice).
  std::uint64_t per_micro = 4 * P;
  per_micro += 3 * tied.elements * sizeof(float);
  e.host_transfer_bytes = per_micro * static_cast<std::uint64_t>(e.micro_batches);
  if (spec_.degree > 1) e.comm_bytes = repro ? 2 * P : P;
  e.flops =
      static_cast<double>(rows) * T * (block_flops_per_token(c, T) * L + head_flops_per_token(c));
  e.layout = fmt::format("dp={}, parameters and optimizer on the host", spec_.degree);
  finish_estimate(e, spec_, "offload");
  return e;
}

void OffloadStrategy::setup(comm::CommPair& comms, Device& device, MemoryPool& host) {
  check_setup(comms, device);
  comms_ = &comms;
  rank_ = comms.rank();
  size_ = comms.size();
  // The gradients live in host memory: they are reduced over MPI on host buffers, on a
  // communicator of their own (not the data communicator, whose buffers are device memory).
  host_comm_ = comms.control().split(0, rank_);
  track(&comms.control());
  track(host_comm_.get());
  device_ = &device;
  host_ = std::make_unique<cpu::CpuDevice>(host);
  tied_ = TiedHead(spec_.model, layout_).tied;
  std::string why;
  const std::int64_t rows = spec_.train.batch_size / size_;
  micro_ = choose_micro_batch(spec_, rows, &why);
  if (micro_ == 0) throw InputError("offload: " + why);
  params_ = Buffer<float>(host, layout_.total(), "parameters");
  grads_ = Buffer<float>(host, layout_.total(), "gradients");
  params_.zero();
  grads_.zero();
  opt_ = std::make_unique<AdamW>(spec_.train.optimizer, layout_, 0, layout_.total(), *host_);
  if (spec_.train.reproducible) acc_ = GradAccumulator(*host_, layout_.total());
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  model_ = make_model(device, spec_.model, o);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  on_device_.resize(static_cast<std::size_t>(layout_.num_groups()));
  buckets_ = std::make_unique<GradBuckets>(layout_, spec_.knobs.bucket_bytes);
  generate_canonical_weights(spec_.model, spec_.train.seed,
                             [&](std::size_t k, const ParamTensor&, const float* values) {
                               const ParamTensor& t = layout_.tensors()[k];
                               std::copy(values, values + t.numel, params_.data() + t.offset);
                             });
  slices_ = SliceSet(*host_);
  for (const auto& t : layout_.tensors()) slices_.add_local_tensor(t, 0, 0, t.offset, rank_ == 0);
  tokens_ = TokenStage(device, spec_.model.vocab_size, micro_, spec_.train.seq_len, rows / micro_,
                       true, true);
  loss_ = DeviceSum(device);
}

void OffloadStrategy::load(int g, bool grads, std::size_t count) {
  auto& d = on_device_[static_cast<std::size_t>(g + 1)];
  d = std::make_unique<OnDevice>();
  d->count = count == 0 ? layout_.group_size(g) : count;
  const std::size_t b = layout_.group_begin(g);
  d->master = Buffer<float>(device_->memory(), d->count, "offloaded parameters");
  device_->upload(d->master.data(), params_.data() + b, d->count * sizeof(float));
  stats_.host_transfer_bytes += d->count * sizeof(float);
  const void* weights = d->master.data();
  const BackendTraits& bt = device_->traits();
  if (bt.separate_weights()) {
    d->weights = Buffer<std::byte>(device_->memory(), d->count * dtype_size(bt.weights),
                                   "offloaded parameters");
    device_->to_weights(d->weights.data(), d->master.data(), d->count);
    d->master.reset();
    weights = d->weights.data();
  }
  if (grads) {
    d->grads = Buffer<float>(device_->memory(), d->count, "offloaded gradients");
    device_->upload(d->grads.data(), grads_.data() + b, d->count * sizeof(float));
    stats_.host_transfer_bytes += d->count * sizeof(float);
  }
  model_->bind_group(g, weights, grads ? d->grads.data() : nullptr);
}

void OffloadStrategy::unload(int g) {
  auto& d = on_device_[static_cast<std::size_t>(g + 1)];
  if (!d) return;
  if (!d->grads.empty()) {
    device_->download(grads_.data() + layout_.group_begin(g), d->grads.data(),
                      d->count * sizeof(float));
    stats_.host_transfer_bytes += d->count * sizeof(float);
  }
  model_->unbind_group(g);
  d.reset();
}

void OffloadStrategy::micro_step(const std::int32_t* tokens, const std::int32_t* targets,
                                 float dloss, bool backward, bool reduce) {
  Model& m = *model_;
  const int L = spec_.model.n_layer;
  comm::Communicator& hc = *host_comm_;
  load(-1, false);
  m.embed_forward(tokens);
  unload(-1);
  for (int l = 0; l < L; ++l) {
    load(l, false);
    m.block_forward(l);
    unload(l);
  }
  // The head phase: final group, and GPT-2's token embedding only (not the positions).
  const std::size_t wte = TiedHead(spec_.model, layout_).elements;
  load(L, backward);
  if (tied_) load(-1, backward, wte);
  m.head_forward(targets);
  if (backward) m.head_backward(dloss);
  unload(L);
  if (tied_) unload(-1);
  if (!backward) return;
  // Reproducible mode: the tied embedding's classifier part is its own term (parallel/repro.hpp).
  if (tied_ && spec_.train.reproducible) acc_.flush(grads_.data(), wte);
  if (reduce) buckets_->group_done(hc, grads_.data(), L);
  for (int l = L - 1; l >= 0; --l) {
    load(l, true);
    m.block_backward(l);
    unload(l);
    if (reduce) {
      buckets_->group_done(hc, grads_.data(), l);
      buckets_->progress();
    }
  }
  load(-1, true);
  m.embed_backward();
  unload(-1);
  if (reduce) buckets_->group_done(hc, grads_.data(), -1);
  if (spec_.train.reproducible) acc_.flush(grads_.data(), grads_.size());
}

StepResult OffloadStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const int T = tc.seq_len;
  const RowRange rows = shard_rows(tc.batch_size, rank_, size_);
  const std::int64_t accum = rows.count / micro_;
  const float dloss = 1.0f / static_cast<float>(tc.batch_size * T);
  // Reproducible mode reduces the fp64 sums once the last micro-batch is done (no overlap).
  const bool overlap = size_ > 1 && spec_.knobs.overlap && !tc.reproducible;
  for (std::int64_t k = 0; k < accum; ++k) tokens_.stage(batch, k, rows.begin + k * micro_, micro_);
  tokens_.upload(accum);
  grads_.zero();
  loss_.reset();
  for (std::int64_t k = 0; k < accum; ++k) {
    ScopedTimer compute(stats_.compute_s);
    const bool reduce = overlap && k + 1 == accum;
    micro_step(tokens_.inputs(k), tokens_.targets(k), dloss, true, reduce);
    loss_.add(model_->loss(), static_cast<double>(micro_));
  }
  double sq = 0;
  if (tc.reproducible) {
    if (size_ > 1) host_comm_->allreduce(acc_.data(), acc_.size(), comm::ReduceOp::kSum);
    ScopedTimer compute(stats_.compute_s);
    acc_.round_and_reset(grads_.data());
    ExactSquareSum exact;
    host_->add_exact_squares(exact, grads_.data(), grads_.size());
    sq = exact.value();
  } else {
    if (overlap)
      buckets_->finish(*host_comm_, grads_.data());
    else if (size_ > 1)
      host_comm_->allreduce(grads_.data(), grads_.size(), comm::ReduceOp::kSum);
    sq = host_->sum_of_squares(grads_.data(), grads_.size());
  }
  double loss_sum = loss_.read();
  comms_->control().allreduce(&loss_sum, 1, comm::ReduceOp::kSum);
  StepResult r;
  r.loss = loss_sum / static_cast<double>(tc.batch_size);
  r.grad_norm = std::sqrt(sq);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  {
    ScopedTimer compute(stats_.compute_s);
    opt_->step(params_.data(), nullptr, grads_.data(), r.lr,
               clip_scale(r.grad_norm, tc.optimizer.grad_clip), step + 1);
  }
  ++stats_.steps;
  return r;
}

double OffloadStrategy::evaluate(const data::Batch& batch) {
  const int T = spec_.train.seq_len;
  const RowRange rows = shard_rows(batch.batch_size, rank_, size_);
  loss_.reset();
  tokens_.for_each_micro(batch, rows.begin, rows.count, micro_, true,
                         [&](std::int64_t k, std::int64_t n) {
                           micro_step(tokens_.inputs(k), tokens_.targets(k), 0.0f, false, false);
                           loss_.add(model_->loss(), static_cast<double>(n * T));
                         });
  double sum = loss_.read();
  comms_->control().allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / static_cast<double>(batch.batch_size * T);
}

std::vector<float*> OffloadStrategy::segments(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
      return {params_.data()};
    case StateKind::kAdamM:
      return {opt_->m()};
    case StateKind::kAdamV:
      return {opt_->v()};
  }
  return {};
}

StateSlices OffloadStrategy::export_state(StateKind kind) {
  return slices_.export_from(segments(kind));
}

void OffloadStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slices_.import_into(segments(kind), slices);
}

}  // namespace saturn::parallel
