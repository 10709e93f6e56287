#include "runtime/parallel/fsdp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

struct FsdpStrategy::Gathered {
  Buffer<std::byte> buf;  // the group's trained weights, in the kernels' type
  comm::Request req;
  Buffer<std::byte> frozen;  // its frozen ones (a LoRA job's base)
  comm::Request frozen_req;
};

struct FsdpStrategy::Reduction {
  int group = 0;
  Buffer<float> grads;              // the full group gradient being reduce-scattered
  Buffer<float> shard;              // this rank's reduced part
  Buffer<double> grads64, shard64;  // the same in fp64 (reproducible mode)
  comm::Request req;
};

namespace {

// Bytes live at the peak of one FSDP micro-step (gathered weights, gradient buffers and
// reduce-scatter results), replaying the allocation order of micro_step() without allocating,
// each buffer at its footprint in the backend's pool.
std::size_t transient_peak(const ParameterLayout& layout, int ranks, bool tied, bool prefetch,
                           bool overlap, bool repro, const BackendTraits& bt) {
  const int L = layout.num_groups() - 2;
  const std::size_t wbytes = dtype_size(bt.weights);
  // Shard lengths of a group's trained tensors (their gradients) and of its frozen ones.
  auto len = [&](int g) {
    return ShardMap::shard_len(layout.grad_group_size(g), ranks, layout.align());
  };
  auto frozen_len = [&](int g) {
    return ShardMap::shard_len(layout.trainable_begin(g) - layout.group_begin(g), ranks,
                               layout.align());
  };
  const std::size_t n = static_cast<std::size_t>(ranks);
  auto W = [&](int g) {  // gathered weights, the frozen ones in a buffer of their own
    const std::size_t f = frozen_len(g) * n * wbytes, t = len(g) * n * wbytes;
    return (t > 0 ? bt.footprint(t) : 0) + (f > 0 ? bt.footprint(f) : 0);
  };
  // Nothing for a group without trained tensors (a LoRA job's embeddings and head).
  auto bytes = [&](int g, std::size_t k) { return len(g) == 0 ? 0 : bt.footprint(k); };
  auto A = [&](int g) { return bytes(g, len(g) * n * sizeof(float)); };  // gradient buffer
  auto A64 = [&](int g) { return bytes(g, len(g) * n * sizeof(double)); };
  auto R = [&](int g) { return bytes(g, len(g) * sizeof(float)); };  // reduced shard
  auto R64 = [&](int g) { return bytes(g, len(g) * sizeof(double)); };
  std::size_t live = 0, peak = 0;
  auto alloc = [&](std::size_t b) {
    live += b;
    peak = std::max(peak, live);
  };
  auto release = [&](std::size_t b) { live -= b; };
  std::vector<bool> held(static_cast<std::size_t>(L + 2), false);
  auto gather = [&](int g) {
    if (!held[static_cast<std::size_t>(g + 1)]) {
      alloc(W(g));
      held[static_cast<std::size_t>(g + 1)] = true;
    }
  };
  auto drop = [&](int g) {
    if (held[static_cast<std::size_t>(g + 1)]) {
      release(W(g));
      held[static_cast<std::size_t>(g + 1)] = false;
    }
  };
  // Forward: each group gathered, the next one prefetched, then freed.
  for (int g = -1; g <= L - 1; ++g) {
    gather(g);
    if (prefetch) gather(g + 1 <= L - 1 ? g + 1 : L);
    drop(g);
  }
  gather(L);
  if (tied) gather(-1);
  // Head backward.
  std::vector<std::size_t> pending;
  alloc(A(L));
  if (tied) alloc(A(-1));
  if (prefetch) gather(L - 1);
  drop(L);
  if (tied) drop(-1);
  auto reduce = [&](int g) {
    if (repro) {  // the fp32 gradient becomes an fp64 copy, reduced into an fp64 shard
      alloc(A64(g));
      release(A(g));
      alloc(R64(g));
      pending.push_back(A64(g) + R64(g));
    } else {
      alloc(R(g));
      pending.push_back(A(g) + R(g));
    }
    if (!overlap) {
      for (auto p : pending) release(p);
      pending.clear();
    }
  };
  reduce(L);
  if (tied) reduce(-1);
  for (int l = L - 1; l >= -1; --l) {
    gather(l);
    alloc(A(l));  // gradient buffer
    if (prefetch && l >= 0) gather(l - 1);
    drop(l);
    for (auto p : pending) release(p);
    pending.clear();
    reduce(l);
  }
  return peak;
}

}  // namespace

StrategyInfo fsdp_strategy() {
  StrategyInfo s;
  s.name = "fsdp";
  s.help =
      "ZeRO-3: parameters, gradients and AdamW state sharded 1/N, each layer gathered when "
      "used";
  s.make = [](const StrategySpec& spec) { return std::make_unique<FsdpStrategy>(spec); };
  return s;
}

FsdpStrategy::FsdpStrategy(StrategySpec spec)
    : Strategy(std::move(spec)),
      layout_(spec_.model, 1, backend_traits(spec_.backend).param_align) {}

FsdpStrategy::~FsdpStrategy() = default;

Estimate FsdpStrategy::estimate() const {
  Estimate e;
  if (!check_common(e, spec_, spec_.degree)) return e;
  const ModelConfig& c = spec_.model;
  const int N = spec_.degree, T = spec_.train.seq_len, L = c.n_layer;
  const std::int64_t rows = spec_.train.batch_size / N;
  std::string why;
  const std::int64_t micro = choose_micro_batch(spec_, rows, &why);
  if (micro == 0) return infeasible(e, "fsdp: " + why);
  const BackendTraits& bt = backend_traits(spec_.backend);
  const ShardMap map(layout_, N, 0, ShardMap::Over::kGradients);  // rank 0 owns the most
  const ShardMap frozen(layout_, N, 0, ShardMap::Over::kFrozen);
  const std::size_t shards = bt.footprint(map.total() * sizeof(float));
  // AdamW's moments: a pair of buffers per group this rank owns part of.
  std::size_t moments = 0;
  for (int g = -1; g <= L; ++g) {
    const ShardMap::Group& G = map.group(g);
    if (G.own_end > G.own_begin) moments += 2 * bt.footprint((G.own_end - G.own_begin) * 4);
  }
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  const std::size_t acts = model_activation_bytes(spec_.backend, c, o, static_cast<int>(micro), T);
  const std::size_t tokens = TokenStage::bytes(bt, micro, T, rows / micro,
                                               {true, true, !spec_.train.packing.cross_attention});
  const bool tied = TiedHead(c, layout_).tied;
  const bool repro = spec_.train.reproducible;
  const std::size_t wbytes = dtype_size(bt.weights);
  const std::size_t transient =
      transient_peak(layout_, N, tied, spec_.knobs.prefetch, spec_.knobs.overlap, repro, bt);
  const std::size_t params = ParamStore::bytes(bt, map.total()) +
                             (frozen.total() > 0 ? ParamStore::bytes(bt, frozen.total()) : 0);
  e.device_breakdown = {{"parameters", params},       {"gradients", shards},
                        {"optimizer state", moments}, {"activations", acts},
                        {"tokens", tokens},           {"gathered (peak)", transient}};
  e.device_bytes = params + shards + moments + acts + tokens + transient;
  if (repro) {
    const std::size_t acc = bt.footprint(map.total() * sizeof(double));
    e.device_breakdown["fp64 gradient accumulator"] = acc;
    e.device_bytes += acc;
  }
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  // Per micro-batch: every group gathered for forward and again for backward (the head's
  // groups once, GPT-2's embedding a third time for the tied head) and reduce-scattered once
  // (the tied embedding twice). CommStats counts a gather as the rank's shard (in the kernels'
  // weight type), a reduce-scatter as the whole buffer (fp32; fp64 when reproducible).
  // A LoRA job gathers its frozen tensors too, and reduces only its adapters.
  std::uint64_t per_micro = 0;
  auto len = [&](int g) { return map.group(g).shard + frozen.group(g).shard; };
  auto rlen = [&](int g) { return map.group(g).shard; };
  const std::uint64_t rs = repro ? 2 : 1;
  for (int g = -1; g <= L; ++g) {
    const std::uint64_t gathers = g == L ? 1 : 2;
    per_micro += gathers * len(g) * wbytes + rs * static_cast<std::uint64_t>(N) * rlen(g) * 4;
  }
  if (tied) per_micro += len(-1) * wbytes + rs * static_cast<std::uint64_t>(N) * rlen(-1) * 4;
  e.comm_bytes = per_micro * static_cast<std::uint64_t>(e.micro_batches);
  // The cost: per micro-batch every group is gathered for the forward and again for the
  // backward (the head once; overlapping compute with prefetch, each gather waited for), and
  // its gradients reduce-scattered (overlapping the next group's backward).
  const double m = static_cast<double>(e.micro_batches), groups = L + 2.0, ties = tied ? 1.0 : 0.0;
  double gathered = 0;
  for (int g = -1; g <= L; ++g)
    gathered += (g == L ? 1.0 : 2.0) * static_cast<double>(len(g) * wbytes);
  gathered = m * (gathered + ties * static_cast<double>(len(-1) * wbytes));
  e.comm_schedule = {{comm::CollOp::kAllGather, N, m * (2 * groups - 1 + ties), gathered,
                      spec_.knobs.prefetch, true, m * (2 * groups - 1)},
                     {comm::CollOp::kReduceScatter, N, m * (groups + ties),
                      static_cast<double>(e.comm_bytes) - gathered, spec_.knobs.overlap, true, 0}};
  // Reproducible: each gathered group gradient is widened to fp64 before its reduction.
  if (repro) e.accumulated_elements = static_cast<double>(layout_.grad_total());
  e.flops =
      static_cast<double>(rows) * T * (block_flops_per_token(c, T) * L + head_flops_per_token(c));
  e.layout = fmt::format("dp={} (sharded 1/{})", N, N);
  finish_estimate(e, spec_, "fsdp");
  return e;
}

void FsdpStrategy::setup(comm::CommPair& comms, Device& device, MemoryPool& /*host*/) {
  check_setup(comms, device);
  comms_ = &comms;
  track(comms_);
  device_ = &device;
  rank_ = comms.rank();
  size_ = comms.size();
  const ModelConfig& c = spec_.model;
  const int L = c.n_layer;
  tied_ = TiedHead(c, layout_).tied;
  std::string why;
  const std::int64_t rows = spec_.train.batch_size / size_;
  micro_ = choose_micro_batch(spec_, rows, &why);
  if (micro_ == 0) throw InputError("fsdp: " + why);

  shards_ = ShardMap(layout_, size_, rank_, ShardMap::Over::kGradients);
  frozen_map_ = ShardMap(layout_, size_, rank_, ShardMap::Over::kFrozen);
  params_ = ParamStore(device, shards_.total());
  if (frozen_map_.total() > 0) frozen_ = ParamStore(device, frozen_map_.total());
  grads_ = Buffer<float>(device.memory(), shards_.total(), "gradients");
  device.zero(grads_.data(), grads_.bytes());
  repro_ = spec_.train.reproducible;
  if (repro_) acc_ = GradAccumulator(device, shards_.total());
  opts_.resize(static_cast<std::size_t>(L + 2));
  for (int g = -1; g <= L; ++g) {
    const ShardMap::Group& G = shards_.group(g);
    if (G.own_end > G.own_begin)
      opts_[static_cast<std::size_t>(g + 1)] =
          std::make_unique<AdamW>(spec_.train.optimizer, layout_, G.own_begin, G.own_end, device,
                                  layout_.weight_of_gradient(g, G.own_begin));
  }
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  model_ = make_model(device, c, o);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  gathered_.resize(static_cast<std::size_t>(L + 2));
  grad_buffers_.resize(static_cast<std::size_t>(L + 2));

  // Each rank keeps only its part of every canonical tensor while the weights stream past.
  // A trained tensor's elements are addressed in the gradient layout, a frozen one's in the
  // parameter layout (its shard map's coordinates).
  const auto piece = [&](const ParamTensor& t) {
    const std::size_t at = t.trainable ? t.grad_offset : t.offset;
    return std::make_pair(at,
                          (t.trainable ? shards_ : frozen_map_).owned(t.layer, at, at + t.numel));
  };
  generate_canonical_weights(
      c, spec_.train.seed, [&](std::size_t k, const ParamTensor&, const float* values) {
        const ParamTensor& t = layout_.tensors()[k];
        const auto [at, p] = piece(t);
        if (!p.empty())
          device.upload((t.trainable ? params_ : frozen_).master() + p.pos, values + (p.begin - at),
                        (p.end - p.begin) * sizeof(float));
      });
  params_.refresh();
  if (frozen_map_.total() > 0) frozen_.refresh();
  slices_ = SliceSet(device);
  frozen_slices_ = SliceSet(device);
  for (const auto& t : layout_.tensors()) {
    const auto [at, p] = piece(t);
    const ShardMap& map = t.trainable ? shards_ : frozen_map_;
    if (!p.empty())
      (t.trainable ? slices_ : frozen_slices_)
          .add_flat_range(t, p.begin - at, p.end - at, t.layer + 1,
                          p.begin - map.group(t.layer).own_begin, true);
  }
  tokens_ = TokenStage(device, c.vocab_size, micro_, spec_.train.seq_len, rows / micro_,
                       {true, true, !spec_.train.packing.cross_attention});
  loss_ = DeviceSum(device);
}

void FsdpStrategy::start_gather(int g) {
  auto& slot = gathered_[static_cast<std::size_t>(g + 1)];
  if (slot) return;
  const DType wt = device_->traits().weights;
  const auto n = static_cast<std::size_t>(size_);
  slot = std::make_unique<Gathered>();
  if (const ShardMap::Group& G = shards_.group(g); G.size > 0) {
    slot->buf =
        Buffer<std::byte>(device_->memory(), G.shard * n * dtype_size(wt), "gathered parameters");
    slot->req =
        comms_->data().iall_gather(params_.weights_at(G.offset), slot->buf.data(), G.shard, wt);
  }
  if (const ShardMap::Group& F = frozen_map_.group(g); F.size > 0) {
    slot->frozen =
        Buffer<std::byte>(device_->memory(), F.shard * n * dtype_size(wt), "gathered parameters");
    slot->frozen_req =
        comms_->data().iall_gather(frozen_.weights_at(F.offset), slot->frozen.data(), F.shard, wt);
  }
}

void FsdpStrategy::bind(int g, float* grads) {
  start_gather(g);
  auto& slot = gathered_[static_cast<std::size_t>(g + 1)];
  slot->req.wait();
  slot->frozen_req.wait();
  if (frozen_map_.group(g).size == 0) {  // no frozen tensors: the group is one gathered range
    model_->bind_group(g, slot->buf.data(), grads);
    return;
  }
  model_->bind_group(g, slot->frozen.data(), grads);
  model_->bind_group_trained(g, shards_.group(g).size > 0 ? slot->buf.data() : nullptr);
}

void FsdpStrategy::release(int g) {
  gathered_[static_cast<std::size_t>(g + 1)].reset();
}

float* FsdpStrategy::new_grad_buffer(int g) {
  const ShardMap::Group& G = shards_.group(g);
  if (G.size == 0) return nullptr;  // nothing trained in the group (LoRA)
  auto& b = grad_buffers_[static_cast<std::size_t>(g + 1)];
  b = Buffer<float>(device_->memory(), G.shard * static_cast<std::size_t>(size_),
                    "gathered gradients");
  device_->zero(b.data(), b.bytes());
  return b.data();
}

void FsdpStrategy::launch_reduction(int g) {
  const ShardMap::Group& G = shards_.group(g);
  if (G.size == 0) return;
  auto r = std::make_unique<Reduction>();
  r->group = g;
  comm::Communicator& data = comms_->data();
  if (repro_) {
    // This micro-batch's term, summed over ranks and micro-batches in fp64.
    Buffer<float>& g32 = grad_buffers_[static_cast<std::size_t>(g + 1)];
    r->grads64 = Buffer<double>(device_->memory(), g32.size(), "gathered gradients");
    device_->widen(r->grads64.data(), g32.data(), g32.size());
    g32.reset();
    r->shard64 = Buffer<double>(device_->memory(), G.shard, "gathered gradients");
    r->req =
        data.ireduce_scatter(r->grads64.data(), r->shard64.data(), G.shard, comm::ReduceOp::kSum);
  } else {
    r->grads = std::move(grad_buffers_[static_cast<std::size_t>(g + 1)]);
    r->shard = Buffer<float>(device_->memory(), G.shard, "gathered gradients");
    r->req = data.ireduce_scatter(r->grads.data(), r->shard.data(), G.shard, comm::ReduceOp::kSum);
  }
  reductions_.push_back(std::move(r));
  if (!spec_.knobs.overlap) complete_reductions();
}

void FsdpStrategy::complete_reductions() {
  for (auto& r : reductions_) {
    r->req.wait();
    const ShardMap::Group& G = shards_.group(r->group);
    if (repro_)
      device_->add(acc_.data() + G.offset, r->shard64.data(), G.shard);
    else
      device_->add(grads_.data() + G.offset, r->shard.data(), G.shard);
  }
  reductions_.clear();
}

void FsdpStrategy::micro_step(std::int64_t k, float dloss, bool backward) {
  Model& m = *model_;
  const std::int32_t* tokens = tokens_.inputs(k);
  const std::int32_t* targets = tokens_.targets(k);
  m.set_segments(tokens_.segments(k));
  const int L = spec_.model.n_layer;
  const bool prefetch = spec_.knobs.prefetch;
  // Forward: one group resident at a time (plus the prefetched next one).
  bind(-1, nullptr);
  if (prefetch) start_gather(L > 0 ? 0 : L);
  m.embed_forward(tokens);
  m.unbind_group(-1);
  release(-1);
  for (int l = 0; l < L; ++l) {
    bind(l, nullptr);
    if (prefetch) start_gather(l + 1 < L ? l + 1 : L);
    m.block_forward(l);
    m.unbind_group(l);
    release(l);
  }
  bind(L, nullptr);
  if (tied_) bind(-1, nullptr);
  m.head_forward(targets);
  if (!backward) {
    m.unbind_group(L);
    release(L);
    if (tied_) {
      m.unbind_group(-1);
      release(-1);
    }
    return;
  }
  // Head backward with the head's groups still gathered.
  bind(L, new_grad_buffer(L));
  if (tied_) bind(-1, new_grad_buffer(-1));
  if (prefetch) start_gather(L - 1);
  m.head_backward(dloss);
  m.unbind_group(L);
  release(L);
  if (tied_) {
    m.unbind_group(-1);
    release(-1);
  }
  launch_reduction(L);
  if (tied_) launch_reduction(-1);
  // Blocks and embedding, last to first; each group's reduction overlaps the next backward.
  for (int l = L - 1; l >= -1; --l) {
    bind(l, new_grad_buffer(l));
    if (prefetch && l >= 0) start_gather(l - 1);
    if (l >= 0)
      m.block_backward(l);
    else
      m.embed_backward();
    m.unbind_group(l);
    release(l);
    complete_reductions();
    launch_reduction(l);
  }
  complete_reductions();
}

StepResult FsdpStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const RowRange rows = shard_rows(tc.batch_size, rank_, size_);
  const std::int64_t accum = rows.count / micro_;
  const LossScale per_target = loss_scale(batch);
  for (std::int64_t k = 0; k < accum; ++k) tokens_.stage(batch, k, rows.begin + k * micro_, micro_);
  tokens_.upload(accum);
  device_->zero(grads_.data(), grads_.bytes());
  loss_.reset();
  for (std::int64_t k = 0; k < accum; ++k) {
    ScopedTimer compute(stats_.compute_s);
    micro_step(k, per_target.dloss, true);
    loss_.add(model_->loss(),
              static_cast<double>(trained_targets(batch, rows.begin + k * micro_, micro_)));
  }
  double sums[2] = {loss_.read(), 0.0};
  comm::Communicator& control = comms_->control();
  if (repro_) {
    {
      ScopedTimer compute(stats_.compute_s);
      acc_.round_and_reset(grads_.data());
    }
    ExactSquareSum exact;
    device_->add_exact_squares(exact, grads_.data(), grads_.size());
    allreduce_exact(exact, control);
    sums[1] = exact.value();
    control.allreduce(sums, 1, comm::ReduceOp::kSum);
  } else {
    sums[1] = device_->sum_of_squares(grads_.data(), grads_.size());
    control.allreduce(sums, 2, comm::ReduceOp::kSum);
  }
  StepResult r;
  r.loss = sums[0] / per_target.divisor;
  r.grad_norm = std::sqrt(sums[1]);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  const float scale = clip_scale(r.grad_norm, tc.optimizer.grad_clip);
  {
    ScopedTimer compute(stats_.compute_s);
    for (int g = -1; g <= spec_.model.n_layer; ++g) {
      auto& opt = opts_[static_cast<std::size_t>(g + 1)];
      if (!opt) continue;
      const ShardMap::Group& G = shards_.group(g);
      opt->step(params_.master() + G.offset, params_.weights_at(G.offset), grads_.data() + G.offset,
                r.lr, scale, step + 1);
    }
  }
  ++stats_.steps;
  return r;
}

double FsdpStrategy::evaluate(const data::Batch& batch) {
  const RowRange rows = shard_rows(batch.batch_size, rank_, size_);
  // Every rank must take part in every gather: all run the largest rank's number of
  // micro-batches, padding with ignored rows.
  const std::int64_t most = (batch.batch_size + size_ - 1) / size_;
  const std::int64_t chunks = (most + micro_ - 1) / micro_;
  loss_.reset();
  for (std::int64_t first = 0; first < chunks; first += tokens_.capacity()) {
    const std::int64_t count = std::min(tokens_.capacity(), chunks - first);
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t r = (first + k) * micro_;
      const std::int64_t n = std::max<std::int64_t>(0, std::min(micro_, rows.count - r));
      tokens_.stage(batch, k, rows.begin + std::min(r, rows.count), n);
    }
    tokens_.upload(count);
    for (std::int64_t k = 0; k < count; ++k) {
      const std::int64_t r = (first + k) * micro_;
      const std::int64_t n = std::max<std::int64_t>(0, std::min(micro_, rows.count - r));
      micro_step(k, 0.0f, false);
      loss_.add(model_->loss(), static_cast<double>(trained_targets(
                                    batch, rows.begin + std::min(r, rows.count), n)));
    }
  }
  double sum = loss_.read();
  comms_->control().allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / loss_scale(batch).divisor;
}

std::vector<float*> FsdpStrategy::segments(StateKind kind) {
  const int L = spec_.model.n_layer;
  std::vector<float*> s(static_cast<std::size_t>(L + 2), nullptr);
  for (int g = -1; g <= L; ++g) {
    const std::size_t i = static_cast<std::size_t>(g + 1);
    if (kind == StateKind::kParams)
      s[i] = params_.master() + shards_.group(g).offset;
    else if (kind == StateKind::kFrozen)
      s[i] = frozen_map_.total() > 0 ? frozen_.master() + frozen_map_.group(g).offset : nullptr;
    else if (opts_[i])
      s[i] = kind == StateKind::kAdamM ? opts_[i]->m() : opts_[i]->v();
  }
  return s;
}

StateSlices FsdpStrategy::export_state(StateKind kind) {
  return (kind == StateKind::kFrozen ? frozen_slices_ : slices_).export_from(segments(kind));
}

void FsdpStrategy::import_state(StateKind kind, const StateSlices& slices) {
  (kind == StateKind::kFrozen ? frozen_slices_ : slices_).import_into(segments(kind), slices);
  if (kind == StateKind::kParams) params_.refresh();
  if (kind == StateKind::kFrozen && frozen_map_.total() > 0) frozen_.refresh();
}

}  // namespace saturn::parallel
