#include "runtime/parallel/offload.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace saturn::parallel {

// What one phase of a micro-batch puts on the device: per group, how many of its elements (the
// tied head reads only the token embedding of group -1), whether its gradients come too, and
// whether they are final after the phase (the tied head's part of the embedding is not: the
// embeddings' backward adds to it).
struct OffloadPhase {
  enum Kind { kEmbedForward, kBlockForward, kHead, kBlockBackward, kEmbedBackward };
  struct Need {
    int group = 0;
    std::size_t count = 0;  // parameters
    bool grads = false, final_grads = false;
    std::size_t grad_count = 0;  // their trained tensors' gradients (all but a LoRA job's base)
  };
  Kind kind = kEmbedForward;
  int layer = 0;
  std::vector<Need> needs;
  bool backward = false;  // kHead: and its backward (whether or not the head is trained)
};

struct OffloadStrategy::Item {
  Phase::Need need;
  Buffer<float> master;       // the fp32 weights copied in (the kernels read them on the CPU)
  Buffer<std::byte> weights;  // the kernels' copy, when the backend keeps a separate one
  Buffer<float> grads;
  Device::CopyTicket ready = 0;  // the last of its copies in
  comm::Request reduction;
};

namespace {

// The phases of one micro-batch, in order: forward (embeddings, blocks, the head with its
// backward when training), then backward (blocks from the last, embeddings).
// tied_weights, tied_grads: the tied embedding's elements the head reads, and its gradient's
// (0: frozen).
std::vector<OffloadPhase> schedule(const ParameterLayout& layout, int L, std::size_t tied_weights,
                                   std::size_t tied_grads, bool backward) {
  using P = OffloadPhase;
  std::vector<P> phases;
  auto all = [&](int g, bool grads) {
    const std::size_t n = layout.grad_group_size(g);
    return P::Need{g, layout.group_size(g), grads && n > 0, grads && n > 0, n};
  };
  phases.push_back({P::kEmbedForward, -1, {all(-1, false)}});
  for (int l = 0; l < L; ++l) phases.push_back({P::kBlockForward, l, {all(l, false)}});
  P head{P::kHead, L, {all(L, backward)}, backward};
  if (tied_weights > 0)
    head.needs.push_back({-1, tied_weights, backward && tied_grads > 0, false, tied_grads});
  phases.push_back(head);
  if (!backward) return phases;
  for (int l = L - 1; l >= 0; --l) phases.push_back({P::kBlockBackward, l, {all(l, true)}});
  phases.push_back({P::kEmbedBackward, -1, {all(-1, true)}});
  return phases;
}

// The device bytes offload's phases hold at their peak, at the footprints of the backend's
// pool: the allocations and releases of fetch/acquire/finish below, in their order. `hold`: a
// group's final gradients stay until the next group's are final (their reduction overlaps).
std::size_t phases_peak(const std::vector<OffloadPhase>& phases, const BackendTraits& bt,
                        bool prefetch, bool hold) {
  std::size_t now = 0, peak = 0, held = 0;
  auto add = [&](std::size_t b) {
    now += b;
    peak = std::max(peak, now);
  };
  auto fp32 = [&](std::size_t c) { return bt.footprint(c * sizeof(float)); };
  auto weights = [&](std::size_t c) { return bt.footprint(c * dtype_size(bt.weights)); };
  auto fetch = [&](const OffloadPhase& p) {
    for (const auto& n : p.needs) {
      add(fp32(n.count));
      if (n.grads) add(fp32(n.grad_count));
    }
  };
  auto acquire = [&](const OffloadPhase& p) {
    if (!bt.separate_weights()) return;
    for (const auto& n : p.needs) {
      add(weights(n.count));
      now -= fp32(n.count);
    }
  };
  auto finish = [&](const OffloadPhase& p) {
    for (const auto& n : p.needs) {
      now -= bt.separate_weights() ? weights(n.count) : fp32(n.count);
      if (!n.grads) continue;
      if (hold && n.final_grads) {
        now -= held;
        held = fp32(n.grad_count);
      } else {
        now -= fp32(n.grad_count);
      }
    }
  };
  if (prefetch && !phases.empty()) fetch(phases.front());
  for (std::size_t i = 0; i < phases.size(); ++i) {
    if (!prefetch) fetch(phases[i]);
    acquire(phases[i]);
    if (prefetch && i + 1 < phases.size()) fetch(phases[i + 1]);
    finish(phases[i]);
  }
  return peak;
}

}  // namespace

StrategyInfo offload_strategy() {
  StrategyInfo s;
  s.name = "offload";
  s.help = "data parallelism with the fp32 master weights and AdamW state in host memory";
  // Its host memory makes it worth trying on one device, where it fits what nothing else does.
  s.plain_at_one_device = false;
  s.make = [](const StrategySpec& spec) { return std::make_unique<OffloadStrategy>(spec); };
  return s;
}

OffloadStrategy::OffloadStrategy(StrategySpec spec)
    : Strategy(std::move(spec)),
      layout_(spec_.model, 1, backend_traits(spec_.backend).param_align) {}

OffloadStrategy::~OffloadStrategy() {
  // Copies in flight read the pinned host state (and write the gradients) this object frees;
  // after a failed step they may still be running.
  if (device_ == nullptr) return;
  try {
    reducing_.reset();
    device_->finish_copies("offload: tearing down");
  } catch (const std::exception& e) {
    log::error("offload: copies still in flight at teardown failed: {}", e.what());
  }
}

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
  const std::size_t tokens = TokenStage::bytes(bt, micro, T, rows / micro,
                                               {true, true, !spec_.train.packing.cross_attention});
  // The groups in flight, simulated over a training micro-batch (the last one of a step, whose
  // gradients are reduced at degree > 1: with overlap each group's stay until the next's are).
  const TiedHead tied(c, layout_);
  const bool reduce = spec_.degree > 1 && !spec_.train.reproducible;
  const std::size_t group_peak = phases_peak(
      schedule(layout_, L, tied.tied ? layout_.tensors()[0].numel : 0, tied.elements, true), bt,
      spec_.knobs.prefetch, reduce && spec_.knobs.overlap);
  // Parameters (P) and the trained tensors' gradients and moments (G: a LoRA job's adapters).
  const std::size_t P = layout_.total() * sizeof(float);
  const std::size_t G = layout_.grad_total() * sizeof(float);
  e.device_breakdown = {
      {"activations", acts}, {"tokens", tokens}, {"offloaded groups (peak)", group_peak}};
  e.device_bytes = acts + tokens + group_peak;
  e.host_bytes = P + 3 * G;
  const bool repro = spec_.train.reproducible;
  if (repro) e.host_bytes += 2 * G;  // the fp64 gradient accumulator
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  // Per micro-batch every group's parameters go to the device twice (forward, backward; the
  // head's once, the tied embedding's three times) and its gradients back to the host once
  // (the tied embedding's twice); gradients come to the device from the second micro-batch on
  // (the tied embedding's classifier part always: it is on the host between the head and the
  // embeddings' backward), or, in reproducible mode, never (they start from zero each time).
  const std::uint64_t m = static_cast<std::uint64_t>(e.micro_batches);
  const std::uint64_t head = layout_.group_size(L) * sizeof(float);
  const std::uint64_t wte = (tied.tied ? layout_.tensors()[0].numel : 0) * sizeof(float);
  const std::uint64_t wte_g = tied.elements * sizeof(float);  // 0: frozen
  const std::uint64_t grads_in = repro ? 0 : (m - 1) * (G + wte_g) + wte_g;
  e.host_transfer_bytes = m * (2 * P - head + wte) + m * (G + wte_g) + grads_in;
  if (spec_.degree > 1) e.comm_bytes = repro ? 2 * G : G;
  e.flops =
      static_cast<double>(rows) * T * (block_flops_per_token(c, T) * L + head_flops_per_token(c));
  e.layout = fmt::format("dp={}, parameters and optimizer on the host{}", spec_.degree,
                         spec_.knobs.prefetch ? ", next group prefetched" : "");
  // The cost: the replicas allreduce the gradients on the host side as DDP does (one call of
  // the fp64 sums when reproducible); AdamW runs over the host's copy.
  if (spec_.degree > 1)
    e.comm_schedule.push_back({comm::CollOp::kAllreduce, spec_.degree, repro ? 1.0 : L + 2.0,
                               static_cast<double>(e.comm_bytes), !repro && spec_.knobs.overlap,
                               true, 1.0});
  e.optimizer_elements = static_cast<double>(layout_.grad_total());
  if (repro) e.accumulated_elements = static_cast<double>(layout_.grad_total());
  finish_estimate(e, spec_, "offload");
  return e;
}

void OffloadStrategy::setup(comm::CommPair& comms, Device& device, MemoryPool& host) {
  check_setup(comms, device);
  // The host state streams through the device's copy engine: it must be the memory the device
  // copies from asynchronously (pinned on a GPU), not whatever pool the caller had at hand.
  if (BackingAllocator* pinned = device.host_allocator();
      pinned != nullptr && host.backing() != pinned)
    throw Error(fmt::format(
        "offload: the host pool '{}' is {}, not {}'s copy memory ({}): make it with "
        "MemoryPool(name, capacity, device.host_allocator())",
        host.name(), host.backing() != nullptr ? host.backing()->describe() : "plain host memory",
        device.describe(), pinned->describe()));
  comms_ = &comms;
  rank_ = comms.rank();
  size_ = comms.size();
  track(&comms);
  // Reproducible mode sums fp64 accumulators that live on the host (it runs on the CPU only):
  // over MPI on host buffers, on a communicator of their own.
  if (spec_.train.reproducible) {
    host_comm_ = comms.control().split(0, rank_);
    track(host_comm_.get());
  }
  device_ = &device;
  host_ = std::make_unique<cpu::CpuDevice>(host);
  const TiedHead tied(spec_.model, layout_);
  tied_weights_ = tied.tied ? layout_.tensors()[0].numel : 0;
  tied_elements_ = tied.elements;  // 0: untied, or frozen
  std::string why;
  const std::int64_t rows = spec_.train.batch_size / size_;
  micro_ = choose_micro_batch(spec_, rows, &why);
  if (micro_ == 0) throw InputError("offload: " + why);
  params_ = Buffer<float>(host, layout_.total(), "parameters");
  grads_ = Buffer<float>(host, layout_.grad_total(), "gradients");
  params_.zero();
  grads_.zero();
  opt_ =
      std::make_unique<AdamW>(spec_.train.optimizer, layout_, 0, layout_.grad_total(), *host_, 0);
  if (spec_.train.reproducible) acc_ = GradAccumulator(*host_, layout_.grad_total());
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  model_ = make_model(device, spec_.model, o);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  generate_canonical_weights(spec_.model, spec_.train.seed,
                             [&](std::size_t k, const ParamTensor&, const float* values) {
                               const ParamTensor& t = layout_.tensors()[k];
                               std::copy(values, values + t.numel, params_.data() + t.offset);
                             });
  slices_ = SliceSet(*host_);
  frozen_slices_ = SliceSet(*host_);
  opt_slices_ = SliceSet(*host_);
  for (const auto& t : layout_.tensors()) {
    (t.trainable ? slices_ : frozen_slices_).add_local_tensor(t, 0, 0, t.offset, rank_ == 0);
    if (t.trainable) opt_slices_.add_local_tensor(t, 0, 0, t.grad_offset, rank_ == 0);
  }
  tokens_ = TokenStage(device, spec_.model.vocab_size, micro_, spec_.train.seq_len, rows / micro_,
                       {true, true, !spec_.train.packing.cross_attention});
  loss_ = DeviceSum(device);
}

OffloadStrategy::Loaded OffloadStrategy::fetch(const Phase& phase, bool fresh) {
  Loaded loaded;
  for (const Phase::Need& n : phase.needs) {
    auto item = std::make_unique<Item>();
    item->need = n;
    const std::size_t b = layout_.group_begin(n.group), bytes = n.count * sizeof(float);
    item->master = Buffer<float>(device_->memory(), n.count, "offloaded parameters");
    item->ready = device_->upload_async(item->master.data(), params_.data() + b, bytes);
    stats_.host_transfer_bytes += bytes;
    if (n.grads) {
      const std::size_t gb = layout_.grad_group_begin(n.group),
                        gbytes = n.grad_count * sizeof(float);
      item->grads = Buffer<float>(device_->memory(), n.grad_count, "offloaded gradients");
      // The host's gradients of this step so far: none in its first micro-batch, except the tied
      // head's part of the token embedding, which went to the host between the head and the
      // embeddings' backward. Reproducible mode moves them into its accumulator after each
      // micro-batch, so every micro-batch starts from zero there.
      std::size_t in = n.grad_count;
      if (fresh || spec_.train.reproducible)
        in = phase.kind == Phase::kEmbedBackward && !spec_.train.reproducible ? tied_elements_ : 0;
      if (in < n.grad_count) device_->zero(item->grads.data(), gbytes);
      if (in > 0) {
        item->ready =
            device_->upload_async(item->grads.data(), grads_.data() + gb, in * sizeof(float));
        stats_.host_transfer_bytes += in * sizeof(float);
      }
    }
    loaded.push_back(std::move(item));
  }
  return loaded;
}

void OffloadStrategy::acquire(Loaded& loaded) {
  const BackendTraits& bt = device_->traits();
  for (auto& item : loaded) {
    device_->wait_copy(item->ready);
    const void* weights = item->master.data();
    if (bt.separate_weights()) {
      item->weights = Buffer<std::byte>(
          device_->memory(), item->need.count * dtype_size(bt.weights), "offloaded parameters");
      device_->to_weights(item->weights.data(), item->master.data(), item->need.count);
      item->master.reset();
      weights = item->weights.data();
    }
    model_->bind_group(item->need.group, weights, item->grads.data());
  }
}

void OffloadStrategy::run(const Phase& phase, const std::int32_t* tokens,
                          const std::int32_t* targets, float dloss) {
  Model& m = *model_;
  switch (phase.kind) {
    case Phase::kEmbedForward:
      m.embed_forward(tokens);
      break;
    case Phase::kBlockForward:
      m.block_forward(phase.layer);
      break;
    case Phase::kHead:
      m.head_forward(targets);
      if (phase.backward) m.head_backward(dloss);
      break;
    case Phase::kBlockBackward:
      m.block_backward(phase.layer);
      break;
    case Phase::kEmbedBackward:
      m.embed_backward();
      break;
  }
}

void OffloadStrategy::complete_reduction() {
  if (!reducing_) return;
  reducing_->reduction.wait();
  const Phase::Need& n = reducing_->need;
  device_->download_async(grads_.data() + layout_.grad_group_begin(n.group),
                          reducing_->grads.data(), n.grad_count * sizeof(float));
  stats_.host_transfer_bytes += n.grad_count * sizeof(float);
  reducing_.reset();
}

void OffloadStrategy::finish(Loaded& loaded, bool reduce) {
  for (auto& item : loaded) model_->unbind_group(item->need.group);
  for (auto& item : loaded) {
    item->weights.reset();
    item->master.reset();
    const Phase::Need& n = item->need;
    if (!n.grads) continue;
    if (reduce && n.final_grads) {
      comm::Communicator& data = comms_->data();
      if (spec_.knobs.overlap) {
        // The previous group's reduction ran during this phase; this one runs during the next.
        complete_reduction();
        item->reduction = data.iallreduce(item->grads.data(), n.grad_count, comm::ReduceOp::kSum);
        reducing_ = std::move(item);
        continue;
      }
      data.allreduce(item->grads.data(), n.grad_count, comm::ReduceOp::kSum);
    }
    // Released at once: the device's allocator keeps the block until the copy has read it.
    device_->download_async(grads_.data() + layout_.grad_group_begin(n.group), item->grads.data(),
                            n.grad_count * sizeof(float));
    stats_.host_transfer_bytes += n.grad_count * sizeof(float);
    item.reset();
  }
  loaded.clear();
}

void OffloadStrategy::micro_step(std::int64_t k, float dloss, bool backward, bool fresh,
                                 bool reduce) {
  const std::int32_t* tokens = tokens_.inputs(k);
  const std::int32_t* targets = tokens_.targets(k);
  model_->set_segments(tokens_.segments(k));
  const std::vector<Phase> phases =
      schedule(layout_, spec_.model.n_layer, tied_weights_, tied_elements_, backward);
  const bool prefetch = spec_.knobs.prefetch;
  const bool repro = spec_.train.reproducible;
  Loaded current, next;
  if (prefetch) next = fetch(phases.front(), fresh);
  for (std::size_t i = 0; i < phases.size(); ++i) {
    current = prefetch ? std::move(next) : fetch(phases[i], fresh);
    acquire(current);
    // Issued before this phase's compute, so the copies run beside it.
    if (prefetch && i + 1 < phases.size()) next = fetch(phases[i + 1], fresh);
    run(phases[i], tokens, targets, dloss);
    finish(current, reduce);
    // Reproducible mode: the tied embedding's classifier part is its own term
    // (parallel/repro.hpp), taken once it is on the host.
    if (repro && backward && tied_elements_ > 0 && phases[i].kind == Phase::kHead) {
      device_->finish_copies("offload: the tied head's gradients to the host");
      acc_.flush(grads_.data(), tied_elements_);
    }
  }
  complete_reduction();
  if (repro && backward) {
    device_->finish_copies("offload: gradients to the host");
    acc_.flush(grads_.data(), grads_.size());
  }
}

StepResult OffloadStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const RowRange rows = shard_rows(tc.batch_size, rank_, size_);
  const std::int64_t accum = rows.count / micro_;
  const LossScale per_target = loss_scale(batch);
  for (std::int64_t k = 0; k < accum; ++k) tokens_.stage(batch, k, rows.begin + k * micro_, micro_);
  tokens_.upload(accum);
  loss_.reset();
  for (std::int64_t k = 0; k < accum; ++k) {
    ScopedTimer compute(stats_.compute_s);
    // The last micro-batch's gradients are final: reduced on the device, group by group, before
    // they go to the host (reproducible mode reduces its fp64 sums below instead).
    const bool reduce = size_ > 1 && !tc.reproducible && k + 1 == accum;
    micro_step(k, per_target.dloss, true, k == 0, reduce);
    loss_.add(model_->loss(),
              static_cast<double>(trained_targets(batch, rows.begin + k * micro_, micro_)));
  }
  // The host reads the gradients, and the optimizer writes the weights the copies read.
  device_->finish_copies("offload: gradients to the host");
  double sq = 0;
  if (tc.reproducible) {
    if (size_ > 1) host_comm_->allreduce(acc_.data(), acc_.size(), comm::ReduceOp::kSum);
    ScopedTimer compute(stats_.compute_s);
    acc_.round_and_reset(grads_.data());
    ExactSquareSum exact;
    host_->add_exact_squares(exact, grads_.data(), grads_.size());
    sq = exact.value();
  } else {
    sq = host_->sum_of_squares(grads_.data(), grads_.size());
  }
  double loss_sum = loss_.read();
  comms_->control().allreduce(&loss_sum, 1, comm::ReduceOp::kSum);
  StepResult r;
  r.loss = loss_sum / per_target.divisor;
  r.grad_norm = std::sqrt(sq);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  {
    // On the host, where the master weights and moments are (docs/strategies.md, offload).
    ScopedTimer compute(stats_.compute_s);
    opt_->step(params_.data(), nullptr, grads_.data(), r.lr,
               clip_scale(r.grad_norm, tc.optimizer.grad_clip), step + 1);
  }
  ++stats_.steps;
  return r;
}

double OffloadStrategy::evaluate(const data::Batch& batch) {
  const RowRange rows = shard_rows(batch.batch_size, rank_, size_);
  loss_.reset();
  tokens_.for_each_micro(batch, rows.begin, rows.count, micro_, true,
                         [&](std::int64_t k, double weight) {
                           micro_step(k, 0.0f, false, true, false);
                           loss_.add(model_->loss(), weight);
                         });
  double sum = loss_.read();
  device_->finish_copies("offload: evaluation");
  comms_->control().allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / loss_scale(batch).divisor;
}

std::vector<float*> OffloadStrategy::segments(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
    case StateKind::kFrozen:
      return {params_.data()};
    case StateKind::kAdamM:
      return {opt_->m()};
    case StateKind::kAdamV:
      return {opt_->v()};
  }
  return {};
}

SliceSet& OffloadStrategy::slice_set(StateKind kind) {
  return kind == StateKind::kParams   ? slices_
         : kind == StateKind::kFrozen ? frozen_slices_
                                      : opt_slices_;
}

StateSlices OffloadStrategy::export_state(StateKind kind) {
  return slice_set(kind).export_from(segments(kind));
}

void OffloadStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slice_set(kind).import_into(segments(kind), slices);
}

}  // namespace saturn::parallel
