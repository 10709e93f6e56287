#include "runtime/parallel/pipeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

namespace {

int act_tag(int micro) {
  return 2 * micro;
}
int grad_tag(int micro) {
  return 2 * micro + 1;
}

// The stage's gradient reductions, on fp32 gradients or on reproducible mode's fp64 sums:
// GPT-2's tied embedding (the first stage's embedding gradient plus the last stage's head
// gradient, on both), then across the data-parallel replicas of the stage.
template <typename T>
void reduce_stage(comm::Communicator* tie, comm::Communicator* dp, bool first_stage, T* grads,
                  std::size_t n, T* wte, std::size_t wte_n) {
  // tie and dp are data communicators (the buffers are device memory).
  if (tie != nullptr) tie->allreduce(first_stage ? grads : wte, wte_n, comm::ReduceOp::kSum);
  if (dp != nullptr) {
    dp->allreduce(grads, n, comm::ReduceOp::kSum);
    if (wte != nullptr) dp->allreduce(wte, wte_n, comm::ReduceOp::kSum);
  }
}

}  // namespace

StrategyInfo pipeline_strategy() {
  StrategyInfo s;
  s.name = "pipeline";
  s.help = "layers split into stages, micro-batches streamed through them (1F1B or GPipe)";
  s.knob_variants.push_back({"schedule=gpipe"});
  s.make = [](const StrategySpec& spec) {
    return std::make_unique<PipelineStrategy>(spec, "pipeline", spec.degree);
  };
  return s;
}

PipelineStrategy::PipelineStrategy(StrategySpec spec, std::string name, int stages)
    : Strategy(std::move(spec)), name_(std::move(name)), p_(stages < 1 ? 1 : stages) {
  dp_ = spec_.degree >= p_ ? spec_.degree / p_ : 1;
}

PipelineStrategy::~PipelineStrategy() = default;

std::vector<int> PipelineStrategy::partition(const ModelConfig& model, int seq_len, int stages,
                                             bool balance) {
  const int L = model.n_layer, p = stages;
  std::vector<int> bounds(static_cast<std::size_t>(p + 1), 0);
  if (!balance) {
    for (int s = 0; s <= p; ++s) bounds[static_cast<std::size_t>(s)] = s * L / p;
    return bounds;
  }
  const double head = head_flops_per_token(model);
  // Blocks [0, l)'s FLOPs. Layers differ only with Gemma 2's alternating window; alike, a
  // stage costs its block count times one block, as exactly as before.
  std::vector<double> prefix(static_cast<std::size_t>(L + 1), 0.0);
  bool alike = true;
  for (int l = 0; l < L; ++l) {
    const double f = blocks_flops_per_token(model, seq_len, l, l + 1);
    alike = alike && f == blocks_flops_per_token(model, seq_len, 0, 1);
    prefix[static_cast<std::size_t>(l + 1)] = prefix[static_cast<std::size_t>(l)] + f;
  }
  const double block = blocks_flops_per_token(model, seq_len, 0, std::min(L, 1));
  auto cost = [&](int s, int a, int b) {
    const double blocks =
        alike ? (b - a) * block
              : prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)];
    return blocks + (s == p - 1 ? head : 0.0);
  };
  // best[s][l]: the smallest possible costliest stage when stages 0..s-1 run blocks [0, l).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(p + 1),
                                        std::vector<double>(static_cast<std::size_t>(L + 1), inf));
  std::vector<std::vector<int>> cut(static_cast<std::size_t>(p + 1),
                                    std::vector<int>(static_cast<std::size_t>(L + 1), 0));
  best[0][0] = 0;
  for (int s = 1; s <= p; ++s)
    for (int l = s; l <= L; ++l)
      for (int a = s - 1; a < l; ++a) {
        const double v = std::max(
            best[static_cast<std::size_t>(s - 1)][static_cast<std::size_t>(a)], cost(s - 1, a, l));
        // Strictly better only: among equal maxima the earliest cut keeps later stages lighter.
        if (v < best[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)]) {
          best[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)] = v;
          cut[static_cast<std::size_t>(s)][static_cast<std::size_t>(l)] = a;
        }
      }
  bounds[static_cast<std::size_t>(p)] = L;
  for (int s = p; s >= 1; --s)
    bounds[static_cast<std::size_t>(s - 1)] =
        cut[static_cast<std::size_t>(s)]
           [static_cast<std::size_t>(bounds[static_cast<std::size_t>(s)])];
  return bounds;
}

PipelineStrategy::Plan PipelineStrategy::plan() const {
  Plan pl;
  const ModelConfig& c = spec_.model;
  if (spec_.degree % p_ != 0) {
    pl.reason = fmt::format("{}: degree {} is not a multiple of the {} pipeline stages", name_,
                            spec_.degree, p_);
    return pl;
  }
  if (p_ > c.n_layer) {
    pl.reason = fmt::format(
        "{}: {} pipeline stages but the model has only {} layers (each stage "
        "needs at least one)",
        name_, p_, c.n_layer);
    return pl;
  }
  pl.rows = spec_.train.batch_size / dp_;
  const Knobs& k = spec_.knobs;
  const std::int64_t size =
      k.micro_batch_size > 0 ? k.micro_batch_size : spec_.train.micro_batch_size;
  if (spec_.train.reproducible) {
    // The canonical micro-batches, whatever the stage count.
    const std::string why = reproducible_rows_reason(spec_, pl.rows);
    if (!why.empty()) {
      pl.reason = fmt::format("{}: {}", name_, why);
      return pl;
    }
    pl.micro = canonical_micro_batch(spec_.train);
    pl.m = pl.rows / pl.micro;
    if (k.micro_batches > 0 && k.micro_batches != pl.m) {
      pl.reason = fmt::format(
          "{}: micro_batches {} differs from the {} canonical micro-batches of {} sequences of "
          "this reproducible job ({} rows per pipeline)",
          name_, k.micro_batches, pl.m, pl.micro, pl.rows);
      return pl;
    }
  } else if (k.micro_batches > 0) {
    if (pl.rows % k.micro_batches != 0) {
      pl.reason = fmt::format(
          "{}: micro_batches {} does not divide the {} sequences of a "
          "pipeline's share of the batch",
          name_, k.micro_batches, pl.rows);
      return pl;
    }
    pl.m = k.micro_batches;
    pl.micro = pl.rows / pl.m;
    if (k.micro_batch_size > 0 && k.micro_batch_size != pl.micro) {
      pl.reason = fmt::format(
          "{}: micro_batches {} and micro_batch_size {} disagree ({} rows per "
          "pipeline)",
          name_, k.micro_batches, k.micro_batch_size, pl.rows);
      return pl;
    }
  } else if (size > 0) {
    if (pl.rows % size != 0) {
      pl.reason = fmt::format(
          "{}: micro_batch_size {} does not divide the {} sequences of a "
          "pipeline's share of the batch",
          name_, size, pl.rows);
      return pl;
    }
    pl.micro = size;
    pl.m = pl.rows / size;
  } else {
    // Enough micro-batches to keep the bubble small (2p), none larger than 8 sequences.
    pl.m = pl.rows;
    for (std::int64_t d = 1; d <= pl.rows; ++d)
      if (pl.rows % d == 0 && d >= std::min<std::int64_t>(pl.rows, 2 * p_) && pl.rows / d <= 8) {
        pl.m = d;
        break;
      }
    pl.micro = pl.rows / pl.m;
  }
  pl.bounds = partition(c, spec_.train.seq_len, p_, k.balance);
  return pl;
}

ModelOptions PipelineStrategy::model_options(int stage, const Plan& pl) const {
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  o.shard.first_layer = pl.bounds[static_cast<std::size_t>(stage)];
  o.shard.end_layer = pl.bounds[static_cast<std::size_t>(stage + 1)];
  o.shard.embed = stage == 0;
  o.shard.head = stage == p_ - 1;
  return o;
}

int PipelineStrategy::slots_for(int stage) const {
  if (spec_.knobs.schedule == PipelineSchedule::kGpipe) return m_;
  return std::min(m_, p_ - stage);
}

Estimate PipelineStrategy::estimate() const {
  Estimate e;
  if (!check_common(e, spec_, dp_)) return e;
  const Plan pl = plan();
  if (!pl.reason.empty()) return infeasible(e, pl.reason);
  const ModelConfig& c = spec_.model;
  const BackendTraits& bt = backend_traits(spec_.backend);
  const ParameterLayout layout(c, 1, bt.param_align);
  const int T = spec_.train.seq_len, L = c.n_layer;
  const bool gpipe = spec_.knobs.schedule == PipelineSchedule::kGpipe;
  const std::size_t NC =
      static_cast<std::size_t>(pl.micro) * T * c.d_model * dtype_size(bt.activations);
  const TiedHead head(c, layout);
  // The last stage's copy of a tied embedding: its weights, and (unless frozen) its gradients.
  const std::size_t wte_w = head.tied ? layout.tensors()[0].numel : 0;
  const std::size_t wte_n = head.elements;
  for (int s = 0; s < p_; ++s) {
    const int first = s == 0 ? -1 : pl.bounds[static_cast<std::size_t>(s)];
    const int last = s == p_ - 1 ? L : pl.bounds[static_cast<std::size_t>(s + 1)] - 1;
    // Parameters of the stage's groups; gradients, moments and reductions of their trained
    // tensors (all of them but for a LoRA job).
    const std::size_t w = layout.group_end(last) - layout.group_begin(first);
    const std::size_t n = layout.grad_group_end(last) - layout.grad_group_begin(first);
    const bool tied = head.tied && p_ > 1 && s == p_ - 1;
    // Each buffer at its footprint in the backend's pool: parameters (ParamStore), gradients,
    // AdamW's m and v, per range (the stage's groups and, on the last stage, the wte copy).
    auto per_range = [&](std::size_t kw, std::size_t k) {
      return ParamStore::bytes(bt, kw) + (k > 0 ? 3 * bt.footprint(k * sizeof(float)) : 0);
    };
    const bool repro = spec_.train.reproducible;  // fp64 accumulators beside the gradients
    auto acc = [&](std::size_t k) { return repro ? bt.footprint(k * sizeof(double)) : 0; };
    const std::size_t P = n * sizeof(float) + (tied ? wte_n * sizeof(float) : 0);
    const int slots = static_cast<int>(gpipe ? pl.m : std::min<std::int64_t>(pl.m, p_ - s));
    const std::size_t acts = model_activation_bytes(spec_.backend, c, model_options(s, pl),
                                                    static_cast<int>(pl.micro), T, slots);
    const std::size_t send = s > 0 ? bt.footprint(NC) : 0;
    const std::size_t tokens = TokenStage::bytes(bt, pl.micro, T, pl.m, staged_parts(s));
    const std::size_t params = ParamStore::bytes(bt, w) + (tied ? ParamStore::bytes(bt, wte_w) : 0);
    const std::size_t grads = bt.footprint(n * sizeof(float)) +
                              (tied && wte_n > 0 ? bt.footprint(wte_n * sizeof(float)) : 0);
    const std::size_t moments = 2 * grads;
    const std::size_t accs = acc(n) + (tied && wte_n > 0 ? acc(wte_n) : 0);
    const std::size_t total =
        per_range(w, n) + (tied ? per_range(wte_w, wte_n) : 0) + accs + acts + send + tokens;
    std::uint64_t comm = 0;
    const int links = (s > 0 ? 1 : 0) + (s < p_ - 1 ? 1 : 0);
    comm += static_cast<std::uint64_t>(pl.m) * 2 * static_cast<std::uint64_t>(links) * NC;
    const std::size_t width = repro ? 2 : 1;  // reductions carry fp64 when reproducible
    const std::size_t wte = wte_n * sizeof(float);
    if (wte_n > 0 && p_ > 1 && (s == 0 || s == p_ - 1)) comm += width * wte;
    if (dp_ > 1) comm += width * P;
    e.comm_bytes = std::max<std::uint64_t>(e.comm_bytes, comm);
    const double flops = static_cast<double>(pl.rows) * T *
                         (blocks_flops_per_token(c, T, pl.bounds[static_cast<std::size_t>(s)],
                                                 pl.bounds[static_cast<std::size_t>(s + 1)]) +
                          (s == p_ - 1 ? head_flops_per_token(c) : 0.0));
    e.flops = std::max(e.flops, flops);
    if (total > e.device_bytes) {
      e.device_bytes = total;
      e.device_breakdown = {{"parameters", params},       {"gradients", grads},
                            {"optimizer state", moments}, {"activations", acts},
                            {"tokens", tokens},           {"pipeline send buffer", send}};
      if (repro) e.device_breakdown["fp64 gradient accumulator"] = accs;
    }
  }
  e.micro_batch = pl.micro;
  e.micro_batches = pl.m;
  std::string stages;
  for (int s = 0; s < p_; ++s)
    stages += fmt::format(" [{},{})", pl.bounds[static_cast<std::size_t>(s)],
                          pl.bounds[static_cast<std::size_t>(s + 1)]);
  e.layout = fmt::format("dp={} x pp={}; stages{}; {} m={}", dp_, p_, stages,
                         gpipe ? "gpipe" : "1f1b", pl.m);
  // The cost: every micro-batch's activations go forward and their gradients back over each
  // link of the busiest stage, each exchange waited for; the rest of its bytes are the tied
  // embedding's and the replicas' gradient allreduces after the last micro-batch.
  e.pipeline_stages = p_;
  const double m = static_cast<double>(pl.m);
  const double links = p_ > 2 ? 2 : (p_ > 1 ? 1 : 0);
  const double exchanges = m * 2 * links;
  const double sent =
      std::min(exchanges * static_cast<double>(NC), static_cast<double>(e.comm_bytes));
  e.comm_schedule.push_back({comm::CollOp::kSendRecv, 2, exchanges, sent, false, true, exchanges});
  if (const double rest = static_cast<double>(e.comm_bytes) - sent; rest > 0) {
    const double calls =
        (wte_n > 0 ? 1.0 : 0.0) + (dp_ > 1 ? std::ceil(static_cast<double>(L) / p_) + 1 : 0.0);
    e.comm_schedule.push_back(
        {comm::CollOp::kAllreduce, std::max(dp_, 2), std::max(calls, 1.0), rest, false, true, 0});
  }
  finish_estimate(e, spec_, name_);
  return e;
}

void PipelineStrategy::setup(comm::CommPair& comms, Device& device, MemoryPool& /*host*/) {
  check_setup(comms, device);
  device_ = &device;
  world_ = &comms;
  stage_ = comms.rank() % p_;
  dp_rank_ = comms.rank() / p_;
  const ModelConfig& c = spec_.model;
  // The first and last stage sum the tied embedding's gradients (none when it is frozen).
  const bool tied = TiedHead(c, ParameterLayout(c)).elements > 0;
  pp_comm_ = comms.split(dp_rank_, stage_);
  dp_comm_ = comms.split(stage_, dp_rank_);
  if (tied && p_ > 1) tie_comm_ = pp_comm_->split(stage_ == 0 || stage_ == p_ - 1 ? 0 : -1, stage_);
  track(world_);
  track(pp_comm_.get());
  track(dp_comm_.get());
  track(tie_comm_.get());

  const Plan pl = plan();
  if (!pl.reason.empty()) throw InputError(pl.reason);
  m_ = static_cast<int>(pl.m);
  micro_ = pl.micro;
  bounds_ = pl.bounds;
  const int L = c.n_layer;
  const ModelOptions o = model_options(stage_, pl);
  const int first_group = stage_ == 0 ? -1 : o.shard.first_layer;
  const int last_group = stage_ == p_ - 1 ? L : o.shard.end_layer - 1;
  model_ = make_model(device, c, o);
  const ParameterLayout& layout = model_->layout();
  lo_ = layout.group_begin(first_group);
  hi_ = layout.group_end(last_group);
  // The gradients (and AdamW's moments) of the stage's trained tensors: a LoRA job's adapters.
  glo_ = layout.grad_group_begin(first_group);
  ghi_ = layout.grad_group_end(last_group);
  params_ = ParamStore(device, hi_ - lo_);
  grads_ = Buffer<float>(device.memory(), ghi_ - glo_, "gradients");
  device.zero(grads_.data(), grads_.bytes());
  const TiedHead head(c, layout);
  tied_copy_ = head.tied && p_ > 1 && stage_ == p_ - 1;
  wte_size_ = head.tied ? layout.tensors()[0].numel : 0;
  head_elements_ = head.elements;  // 0: untied, or frozen (LoRA)
  wte_grad_size_ = tied_copy_ ? head.elements : 0;
  if (tied_copy_) wte_params_ = ParamStore(device, wte_size_);
  if (wte_grad_size_ > 0) {
    wte_grads_ = Buffer<float>(device.memory(), wte_grad_size_, "gradients");
    device.zero(wte_grads_.data(), wte_grads_.bytes());
    wte_opt_ = std::make_unique<AdamW>(spec_.train.optimizer, layout, 0, wte_grad_size_, device);
  }
  opt_ = std::make_unique<AdamW>(spec_.train.optimizer, layout, glo_, ghi_, device, lo_);
  if (spec_.train.reproducible) {
    acc_ = GradAccumulator(device, ghi_ - glo_);
    if (wte_grad_size_ > 0) wte_acc_ = GradAccumulator(device, wte_grad_size_);
  }
  for (int g = first_group; g <= last_group; ++g)
    model_->bind_group(g, params_.weights_at(layout.group_begin(g) - lo_),
                       grads_.data() + (layout.grad_group_begin(g) - glo_));
  // The head reads the token embedding through group -1; only its first tensor (wte) is used.
  if (tied_copy_)
    model_->bind_group(-1, wte_params_.weights(), wte_grad_size_ > 0 ? wte_grads_.data() : nullptr);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len, slots_for(stage_));
  act_type_ = device.traits().activations;
  act_count_ = static_cast<std::size_t>(micro_) * spec_.train.seq_len * c.d_model;
  if (stage_ > 0)
    grad_send_ = Buffer<std::byte>(device.memory(), act_count_ * dtype_size(act_type_),
                                   "pipeline send buffer");
  act_send_.resize(static_cast<std::size_t>(slots_for(stage_)));

  generate_canonical_weights(
      c, spec_.train.seed, [&](std::size_t k, const ParamTensor&, const float* values) {
        const ParamTensor& t = layout.tensors()[k];
        if (t.offset >= lo_ && t.offset + t.numel <= hi_)
          device.upload(params_.master() + (t.offset - lo_), values, t.numel * sizeof(float));
        if (tied_copy_ && k == 0)
          device.upload(wte_params_.master(), values, t.numel * sizeof(float));
      });
  params_.refresh();
  if (tied_copy_) wte_params_.refresh();
  slices_ = SliceSet(device);
  frozen_slices_ = SliceSet(device);
  opt_slices_ = SliceSet(device);
  for (const auto& t : layout.tensors()) {
    if (t.offset < lo_ || t.offset + t.numel > hi_) continue;
    (t.trainable ? slices_ : frozen_slices_)
        .add_local_tensor(t, 0, 0, t.offset - lo_, dp_rank_ == 0);
    if (t.trainable) opt_slices_.add_local_tensor(t, 0, 0, t.grad_offset - glo_, dp_rank_ == 0);
  }
  if (tied_copy_) {
    const ParamTensor& wte = layout.tensors()[0];
    (wte.trainable ? slices_ : frozen_slices_).add_local_tensor(wte, 0, 1, 0, false);
    if (wte.trainable) opt_slices_.add_local_tensor(wte, 0, 1, 0, false);
  }
  tokens_ = TokenStage(device, c.vocab_size, micro_, spec_.train.seq_len, m_, staged_parts(stage_));
  loss_ = DeviceSum(device);
}

// The first stage stages the token ids, the last the targets, and with packed records every
// stage their segments (its blocks' attention follows the records).
StagedParts PipelineStrategy::staged_parts(int stage) const {
  return {stage == 0, stage == p_ - 1, !spec_.train.packing.cross_attention};
}

bool PipelineStrategy::stages_tokens() const {
  const StagedParts parts = staged_parts(stage_);
  return parts.inputs || parts.targets || parts.segments;
}

void PipelineStrategy::forward_micro(int i, int slot, std::int64_t k, double weight) {
  Model& m = *model_;
  comm::Communicator& pp = pp_comm_->data();
  m.set_slot(slot);
  m.set_segments(tokens_.segments(k));               // read again by the slot's backward
  act_send_[static_cast<std::size_t>(slot)].wait();  // the slot's output stream is free again
  if (stage_ == 0) {
    ScopedTimer busy(stats_.busy_s);
    m.embed_forward(tokens_.inputs(k));
  } else {
    pp.recv(m.residual(m.first_layer()), act_count_, act_type_, stage_ - 1, act_tag(i));
  }
  {
    ScopedTimer busy(stats_.busy_s);
    for (int l = m.first_layer(); l < m.end_layer(); ++l) m.block_forward(l);
  }
  if (stage_ == p_ - 1) {
    ScopedTimer busy(stats_.busy_s);
    m.head_forward(tokens_.targets(k));
    loss_.add(m.loss(), weight);
  } else {
    act_send_[static_cast<std::size_t>(slot)] =
        pp.isend(m.residual(m.end_layer()), act_count_, act_type_, stage_ + 1, act_tag(i));
  }
}

void PipelineStrategy::backward_micro(int i, int slot, float dloss) {
  Model& m = *model_;
  comm::Communicator& pp = pp_comm_->data();
  m.set_slot(slot);
  const bool repro = spec_.train.reproducible;
  if (stage_ == p_ - 1) {
    ScopedTimer busy(stats_.busy_s);
    m.head_backward(dloss);
    // Reproducible mode: the tied embedding's classifier part is its own term, whether the
    // last stage holds a copy (p > 1) or the embedding itself (p = 1).
    if (repro && wte_grad_size_ > 0) wte_acc_.flush(wte_grads_.data(), wte_grad_size_);
    if (repro && p_ == 1 && head_elements_ > 0) acc_.flush(grads_.data(), head_elements_);
  } else {
    pp.recv(m.dresidual(), act_count_, act_type_, stage_ + 1, grad_tag(i));
  }
  {
    ScopedTimer busy(stats_.busy_s);
    for (int l = m.end_layer() - 1; l >= m.first_layer(); --l) m.block_backward(l);
    if (stage_ == 0) m.embed_backward();
    if (repro) acc_.flush(grads_.data(), grads_.size());
  }
  if (stage_ > 0) {
    grad_send_req_.wait();
    device_->copy(grad_send_.data(), m.dresidual(), grad_send_.bytes());
    grad_send_req_ = pp.isend(grad_send_.data(), act_count_, act_type_, stage_ - 1, grad_tag(i));
  }
}

StepResult PipelineStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const RowRange rows = shard_rows(tc.batch_size, dp_rank_, dp_);
  const LossScale per_target = loss_scale(batch);
  if (stages_tokens()) {
    for (int i = 0; i < m_; ++i) tokens_.stage(batch, i, rows.begin + i * micro_, micro_);
    tokens_.upload(m_);
  }
  device_->zero(grads_.data(), grads_.bytes());
  if (wte_grad_size_ > 0) device_->zero(wte_grads_.data(), wte_grads_.bytes());
  loss_.reset();
  const double busy_before = stats_.busy_s;
  const int slots = slots_for(stage_);
  auto F = [&](int i) {
    forward_micro(i, i % slots, i,
                  static_cast<double>(trained_targets(batch, rows.begin + i * micro_, micro_)));
  };
  auto B = [&](int i) { backward_micro(i, i % slots, per_target.dloss); };
  {
    ScopedTimer schedule(stats_.schedule_s);
    if (spec_.knobs.schedule == PipelineSchedule::kGpipe) {
      for (int i = 0; i < m_; ++i) F(i);
      for (int i = 0; i < m_; ++i) B(i);
    } else {
      const int warmup = std::min(p_ - stage_ - 1, m_);
      for (int i = 0; i < warmup; ++i) F(i);
      for (int k = 0; k < m_ - warmup; ++k) {
        F(warmup + k);
        B(k);
      }
      for (int k = m_ - warmup; k < m_; ++k) B(k);
    }
    for (auto& r : act_send_) r.wait();
    grad_send_req_.wait();
  }
  stats_.compute_s += stats_.busy_s - busy_before;
  if (tc.reproducible) {
    reproducible_reduce();
  } else {
    reduce_grads();
  }
  // The last stage's embedding copy is not counted: its gradient is the first stage's.
  double sums[2] = {stage_ == p_ - 1 ? loss_.read() : 0.0, 0.0};
  world_->control().allreduce(sums, 1, comm::ReduceOp::kSum);
  double sq = 0;
  if (tc.reproducible) {
    ExactSquareSum exact;
    device_->add_exact_squares(exact, grads_.data(), grads_.size());
    allreduce_exact(exact, pp_comm_->control());
    sq = exact.value();
  } else {
    sq = device_->sum_of_squares(grads_.data(), grads_.size());
    pp_comm_->control().allreduce(&sq, 1, comm::ReduceOp::kSum);
  }
  StepResult r;
  r.loss = sums[0] / per_target.divisor;
  r.grad_norm = std::sqrt(sq);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  const float scale = clip_scale(r.grad_norm, tc.optimizer.grad_clip);
  {
    ScopedTimer compute(stats_.compute_s);
    opt_->step(params_.master(), params_.weights(), grads_.data(), r.lr, scale, step + 1);
    if (wte_opt_)
      wte_opt_->step(wte_params_.master(), wte_params_.weights(), wte_grads_.data(), r.lr, scale,
                     step + 1);
  }
  ++stats_.steps;
  return r;
}

void PipelineStrategy::reduce_grads() {
  reduce_stage(tie_comm_ ? &tie_comm_->data() : nullptr, dp_ > 1 ? &dp_comm_->data() : nullptr,
               stage_ == 0, grads_.data(), grads_.size(),
               wte_grad_size_ > 0 ? wte_grads_.data() : nullptr, head_grad_size());
}

// Reproducible mode: the same reductions on the fp64 sums, then the one rounding to fp32.
void PipelineStrategy::reproducible_reduce() {
  reduce_stage(tie_comm_ ? &tie_comm_->data() : nullptr, dp_ > 1 ? &dp_comm_->data() : nullptr,
               stage_ == 0, acc_.data(), acc_.size(),
               wte_grad_size_ > 0 ? wte_acc_.data() : nullptr, head_grad_size());
  ScopedTimer compute(stats_.compute_s);
  acc_.round_and_reset(grads_.data());
  if (wte_grad_size_ > 0) {
    wte_acc_.round_and_reset(wte_grads_.data());
  }
}

double PipelineStrategy::evaluate(const data::Batch& batch) {
  const RowRange rows = shard_rows(batch.batch_size, dp_rank_, dp_);
  loss_.reset();
  // Tags only need to tell activations from gradients: messages between two ranks arrive in
  // order.
  tokens_.for_each_micro(batch, rows.begin, rows.count, micro_, stages_tokens(),
                         [&](std::int64_t k, double weight) { forward_micro(0, 0, k, weight); });
  for (auto& q : act_send_) q.wait();
  double sum = stage_ == p_ - 1 ? loss_.read() : 0.0;
  world_->control().allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / loss_scale(batch).divisor;
}

std::vector<float*> PipelineStrategy::segments(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
    case StateKind::kFrozen:
      return {params_.master(), wte_params_.master()};
    case StateKind::kAdamM:
      return {opt_->m(), wte_opt_ ? wte_opt_->m() : nullptr};
    case StateKind::kAdamV:
      return {opt_->v(), wte_opt_ ? wte_opt_->v() : nullptr};
  }
  return {};
}

// The tied embedding's gradient elements the first and last stage sum (0: untied or frozen).
std::size_t PipelineStrategy::head_grad_size() const {
  return tie_comm_ ? head_elements_ : 0;
}

SliceSet& PipelineStrategy::slice_set(StateKind kind) {
  return kind == StateKind::kParams   ? slices_
         : kind == StateKind::kFrozen ? frozen_slices_
                                      : opt_slices_;
}

StateSlices PipelineStrategy::export_state(StateKind kind) {
  return slice_set(kind).export_from(segments(kind));
}

void PipelineStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slice_set(kind).import_into(segments(kind), slices);
  if (kind == StateKind::kParams || kind == StateKind::kFrozen) {
    params_.refresh();
    if (tied_copy_) wte_params_.refresh();
  }
}

}  // namespace saturn::parallel
