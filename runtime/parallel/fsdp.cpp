#include "runtime/parallel/fsdp.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

struct FsdpStrategy::Gathered {
  Buffer<float> buf;
  comm::Request req;
};

struct FsdpStrategy::Reduction {
  int group = 0;
  Buffer<float> grads;              // the full group gradient being reduce-scattered
  Buffer<float> shard;              // this rank's reduced part
  Buffer<double> grads64, shard64;  // the same in fp64 (reproducible mode)
  comm::Request req;
};

namespace {

// Padded shard length of a group of n elements over `ranks` ranks.
std::size_t shard_len(std::size_t n, int ranks) {
  return (n + static_cast<std::size_t>(ranks) - 1) / static_cast<std::size_t>(ranks);
}

// Bytes live at the peak of one FSDP micro-step (gathered parameters, gradient buffers and
// reduce-scatter results), replaying the allocation order of micro_step() without allocating.
std::size_t transient_peak(const ParameterLayout& layout, int ranks, bool tied, bool prefetch,
                           bool overlap, bool repro) {
  const int L = layout.num_groups() - 2;
  auto A = [&](int g) { return shard_len(layout.group_size(g), ranks) * ranks * sizeof(float); };
  auto R = [&](int g) { return shard_len(layout.group_size(g), ranks) * sizeof(float); };
  std::size_t live = 0, peak = 0;
  auto alloc = [&](std::size_t b) {
    live += b;
    peak = std::max(peak, live);
  };
  auto release = [&](std::size_t b) { live -= b; };
  // Forward: each group gathered, the next one prefetched, then freed.
  std::vector<int> fwd;
  for (int g = -1; g <= L - 1; ++g) fwd.push_back(g);
  std::vector<bool> held(static_cast<std::size_t>(L + 2), false);
  auto gather = [&](int g) {
    if (!held[static_cast<std::size_t>(g + 1)]) {
      alloc(A(g));
      held[static_cast<std::size_t>(g + 1)] = true;
    }
  };
  auto drop = [&](int g) {
    if (held[static_cast<std::size_t>(g + 1)]) {
      release(A(g));
      held[static_cast<std::size_t>(g + 1)] = false;
    }
  };
  for (int g : fwd) {
    gather(g);
    if (prefetch) gather(g + 1 <= L - 1 ? g + 1 : L);
    drop(g);
  }
  gather(L);
  if (tied) gather(-1);
  // Head backward.
  struct Pending {
    std::size_t bytes;
  };
  std::vector<Pending> pending;
  alloc(A(L));
  if (tied) alloc(A(-1));
  if (prefetch) gather(L - 1);
  drop(L);
  if (tied) drop(-1);
  auto reduce = [&](int g) {
    if (repro) {  // the fp32 gradient becomes an fp64 copy, reduced into an fp64 shard
      alloc(2 * A(g));
      release(A(g));
      alloc(2 * R(g));
      pending.push_back({2 * A(g) + 2 * R(g)});
    } else {
      alloc(R(g));
      pending.push_back({A(g) + R(g)});
    }
    if (!overlap) {
      for (auto& p : pending) release(p.bytes);
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
    for (auto& p : pending) release(p.bytes);
    pending.clear();
    reduce(l);
  }
  return peak;
}

}  // namespace

FsdpStrategy::FsdpStrategy(StrategySpec spec) : Strategy(std::move(spec)), layout_(spec_.model) {}

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
  std::size_t shards = 0;
  for (int g = -1; g <= L; ++g) shards += shard_len(layout_.group_size(g), N);
  shards *= sizeof(float);
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  const std::size_t acts = GptModel::activation_bytes(c, o, static_cast<int>(micro), T);
  const bool tied = c.arch == Arch::kGpt2;
  const bool repro = spec_.train.reproducible;
  const std::size_t transient =
      transient_peak(layout_, N, tied, spec_.knobs.prefetch, spec_.knobs.overlap, repro);
  e.device_breakdown = {{"parameters", shards},
                        {"gradients", shards},
                        {"optimizer state", 2 * shards},
                        {"activations", acts},
                        {"gathered (peak)", transient}};
  e.device_bytes = 4 * shards + acts + transient;
  if (repro) {
    e.device_breakdown["fp64 gradient accumulator"] = 2 * shards;
    e.device_bytes += 2 * shards;
  }
  e.micro_batch = micro;
  e.micro_batches = rows / micro;
  // Per micro-batch: every group gathered for forward and again for backward (the head's
  // groups once, GPT-2's embedding a third time for the tied head) and reduce-scattered once
  // (the tied embedding twice). CommStats counts a gather as the rank's shard, a
  // reduce-scatter as the whole buffer.
  std::uint64_t per_micro = 0;
  auto S = [&](int g) { return shard_len(layout_.group_size(g), N) * sizeof(float); };
  const std::uint64_t rs = repro ? 2 : 1;  // reduce-scatters carry fp64 when reproducible
  for (int g = -1; g <= L; ++g) {
    const std::uint64_t gathers = g == L ? 1 : 2;
    per_micro += gathers * S(g) + rs * static_cast<std::uint64_t>(N) * S(g);
  }
  if (tied) per_micro += S(-1) + rs * static_cast<std::uint64_t>(N) * S(-1);
  e.comm_bytes = per_micro * static_cast<std::uint64_t>(e.micro_batches);
  e.flops =
      static_cast<double>(rows) * T * (block_flops_per_token(c, T) * L + head_flops_per_token(c));
  e.layout = fmt::format("dp={} (sharded 1/{})", N, N);
  check_capacity(e, spec_.knobs, "fsdp");
  return e;
}

void FsdpStrategy::setup(comm::Communicator& comm, MemoryPool& device, MemoryPool& /*host*/) {
  if (comm.size() != spec_.degree)
    throw InputError(fmt::format("fsdp at degree {} needs {} ranks; the communicator has {}",
                                 spec_.degree, spec_.degree, comm.size()));
  comm_ = &comm;
  track(comm_);
  device_ = &device;
  rank_ = comm.rank();
  size_ = comm.size();
  const ModelConfig& c = spec_.model;
  const int L = c.n_layer;
  tied_ = c.arch == Arch::kGpt2;
  std::string why;
  micro_ = choose_micro_batch(spec_, spec_.train.batch_size / size_, &why);
  if (micro_ == 0) throw InputError("fsdp: " + why);

  std::size_t offset = 0;
  groups_.resize(static_cast<std::size_t>(L + 2));
  for (int g = -1; g <= L; ++g) {
    Group& G = group(g);
    G.begin = layout_.group_begin(g);
    G.size = layout_.group_size(g);
    G.shard = shard_len(G.size, size_);
    G.offset = offset;
    offset += G.shard;
    const std::size_t r = static_cast<std::size_t>(rank_);
    G.own_begin = G.begin + std::min(G.size, r * G.shard);
    G.own_end = G.begin + std::min(G.size, (r + 1) * G.shard);
  }
  params_ = Buffer<float>(device, offset, "parameters");
  grads_ = Buffer<float>(device, offset, "gradients");
  params_.zero();
  grads_.zero();
  repro_ = spec_.train.reproducible;
  if (repro_) acc_ = GradAccumulator(device, offset);
  opts_.resize(groups_.size());
  for (int g = -1; g <= L; ++g) {
    const Group& G = group(g);
    if (G.own_end > G.own_begin)
      opts_[static_cast<std::size_t>(g + 1)] =
          std::make_unique<AdamW>(spec_.train.optimizer, layout_, G.own_begin, G.own_end, device);
  }
  ModelOptions o;
  o.storage = ParamStorage::kBorrowed;
  o.recompute = spec_.knobs.recompute;
  model_ = std::make_unique<GptModel>(c, device, o);
  model_->reserve(static_cast<int>(micro_), spec_.train.seq_len);
  gathered_.resize(groups_.size());
  grad_buffers_.resize(groups_.size());

  // Each rank keeps only its part of every canonical tensor while the weights stream past.
  generate_canonical_weights(c, spec_.train.seed,
                             [&](std::size_t, const ParamTensor& t, const float* values) {
                               const Group& G = group(t.layer);
                               const std::size_t b = std::max(G.own_begin, t.offset);
                               const std::size_t e = std::min(G.own_end, t.offset + t.numel);
                               if (b < e)
                                 std::copy(values + (b - t.offset), values + (e - t.offset),
                                           params_.data() + G.offset + (b - G.own_begin));
                             });
  for (const auto& t : layout_.tensors()) {
    const Group& G = group(t.layer);
    const std::size_t b = std::max(G.own_begin, t.offset);
    const std::size_t e = std::min(G.own_end, t.offset + t.numel);
    if (b < e)
      slices_.add_flat_range(t, b - t.offset, e - t.offset, t.layer + 1, b - G.own_begin, true);
  }
  const std::size_t n = static_cast<std::size_t>(micro_) * spec_.train.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
}

void FsdpStrategy::start_gather(int g) {
  auto& slot = gathered_[static_cast<std::size_t>(g + 1)];
  if (slot) return;
  const Group& G = group(g);
  slot = std::make_unique<Gathered>();
  slot->buf =
      Buffer<float>(*device_, G.shard * static_cast<std::size_t>(size_), "gathered parameters");
  slot->req = comm_->iall_gather(params_.data() + G.offset, slot->buf.data(), G.shard);
}

const float* FsdpStrategy::acquire(int g) {
  start_gather(g);
  auto& slot = gathered_[static_cast<std::size_t>(g + 1)];
  slot->req.wait();
  return slot->buf.data();
}

void FsdpStrategy::release(int g) {
  gathered_[static_cast<std::size_t>(g + 1)].reset();
}

float* FsdpStrategy::new_grad_buffer(int g) {
  const Group& G = group(g);
  auto& b = grad_buffers_[static_cast<std::size_t>(g + 1)];
  b = Buffer<float>(*device_, G.shard * static_cast<std::size_t>(size_), "gathered gradients");
  b.zero();
  return b.data();
}

void FsdpStrategy::launch_reduction(int g) {
  const Group& G = group(g);
  auto r = std::make_unique<Reduction>();
  r->group = g;
  if (repro_) {
    // This micro-batch's term, summed over ranks and micro-batches in fp64.
    Buffer<float>& g32 = grad_buffers_[static_cast<std::size_t>(g + 1)];
    r->grads64 = Buffer<double>(*device_, g32.size(), "gathered gradients");
    for (std::size_t i = 0; i < g32.size(); ++i) r->grads64[i] = static_cast<double>(g32[i]);
    g32.reset();
    r->shard64 = Buffer<double>(*device_, G.shard, "gathered gradients");
    r->req =
        comm_->ireduce_scatter(r->grads64.data(), r->shard64.data(), G.shard, comm::ReduceOp::kSum);
  } else {
    r->grads = std::move(grad_buffers_[static_cast<std::size_t>(g + 1)]);
    r->shard = Buffer<float>(*device_, G.shard, "gathered gradients");
    r->req =
        comm_->ireduce_scatter(r->grads.data(), r->shard.data(), G.shard, comm::ReduceOp::kSum);
  }
  reductions_.push_back(std::move(r));
  if (!spec_.knobs.overlap) complete_reductions();
}

void FsdpStrategy::complete_reductions() {
  for (auto& r : reductions_) {
    r->req.wait();
    const Group& G = group(r->group);
    if (repro_) {
      double* dst = acc_.data() + G.offset;
      const double* src = r->shard64.data();
      for (std::size_t i = 0; i < G.shard; ++i) dst[i] += src[i];
      continue;
    }
    float* dst = grads_.data() + G.offset;
    const float* src = r->shard.data();
    for (std::size_t i = 0; i < G.shard; ++i) dst[i] += src[i];
  }
  reductions_.clear();
}

float FsdpStrategy::micro_step(const std::int32_t* tokens, const std::int32_t* targets, float dloss,
                               bool backward) {
  GptModel& m = *model_;
  const int L = spec_.model.n_layer;
  const bool prefetch = spec_.knobs.prefetch;
  // Forward: one group resident at a time (plus the prefetched next one).
  m.bind_group(-1, acquire(-1), nullptr);
  if (prefetch) start_gather(L > 0 ? 0 : L);
  m.embed_forward(tokens);
  m.unbind_group(-1);
  release(-1);
  for (int l = 0; l < L; ++l) {
    m.bind_group(l, acquire(l), nullptr);
    if (prefetch) start_gather(l + 1 < L ? l + 1 : L);
    m.block_forward(l);
    m.unbind_group(l);
    release(l);
  }
  m.bind_group(L, acquire(L), nullptr);
  if (tied_) m.bind_group(-1, acquire(-1), nullptr);
  const float loss = m.head_forward(targets);
  if (!backward) {
    m.unbind_group(L);
    release(L);
    if (tied_) {
      m.unbind_group(-1);
      release(-1);
    }
    return loss;
  }
  // Head backward with the head's groups still gathered.
  m.bind_group(L, acquire(L), new_grad_buffer(L));
  if (tied_) m.bind_group(-1, acquire(-1), new_grad_buffer(-1));
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
    m.bind_group(l, acquire(l), new_grad_buffer(l));
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
  return loss;
}

StepResult FsdpStrategy::train_step(const data::Batch& batch, std::int64_t step) {
  ScopedTimer whole(stats_.step_s);
  const TrainConfig& tc = spec_.train;
  const int T = tc.seq_len;
  const RowRange rows = shard_rows(tc.batch_size, rank_, size_);
  const std::int64_t accum = rows.count / micro_;
  const float dloss = 1.0f / static_cast<float>(tc.batch_size * T);
  grads_.zero();
  double loss_sum = 0;
  for (std::int64_t k = 0; k < accum; ++k) {
    copy_rows(batch, rows.begin + k * micro_, micro_, micro_, inputs_.data(), targets_.data());
    ScopedTimer compute(stats_.compute_s);
    loss_sum += static_cast<double>(micro_step(inputs_.data(), targets_.data(), dloss, true)) *
                static_cast<double>(micro_);
  }
  double sums[2] = {loss_sum, 0.0};
  if (repro_) {
    {
      ScopedTimer compute(stats_.compute_s);
      acc_.round_and_reset(grads_.data());
    }
    ExactSquareSum exact;
    exact.add(grads_.data(), grads_.size());
    exact.allreduce(*comm_);
    sums[1] = exact.value();
    comm_->allreduce(sums, 1, comm::ReduceOp::kSum);
  } else {
    sums[1] = sum_squares(grads_.data(), grads_.size());
    comm_->allreduce(sums, 2, comm::ReduceOp::kSum);
  }
  StepResult r;
  r.loss = sums[0] / static_cast<double>(tc.batch_size);
  r.grad_norm = std::sqrt(sums[1]);
  r.lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
  const float scale = clip_scale(r.grad_norm, tc.optimizer.grad_clip);
  {
    ScopedTimer compute(stats_.compute_s);
    for (int g = -1; g <= spec_.model.n_layer; ++g) {
      auto& opt = opts_[static_cast<std::size_t>(g + 1)];
      if (!opt) continue;
      const Group& G = group(g);
      opt->step(params_.data() + G.offset, grads_.data() + G.offset, r.lr, scale, step + 1);
    }
  }
  ++stats_.steps;
  return r;
}

double FsdpStrategy::evaluate(const data::Batch& batch) {
  const int T = spec_.train.seq_len;
  const RowRange rows = shard_rows(batch.batch_size, rank_, size_);
  // Every rank must take part in every gather: all run the largest rank's number of
  // micro-batches, padding with ignored rows.
  const std::int64_t most = (batch.batch_size + size_ - 1) / size_;
  const std::int64_t chunks = (most + micro_ - 1) / micro_;
  double sum = 0;
  for (std::int64_t k = 0; k < chunks; ++k) {
    const std::int64_t r = k * micro_;
    const std::int64_t n = std::max<std::int64_t>(0, std::min(micro_, rows.count - r));
    copy_rows(batch, rows.begin + std::min(r, rows.count), n, micro_, inputs_.data(),
              targets_.data());
    const float mean = micro_step(inputs_.data(), targets_.data(), 0.0f, false);
    sum += static_cast<double>(mean) * static_cast<double>(n * T);
  }
  comm_->allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / static_cast<double>(batch.batch_size * T);
}

std::vector<float*> FsdpStrategy::segments(StateKind kind) {
  std::vector<float*> s(groups_.size(), nullptr);
  for (int g = -1; g <= spec_.model.n_layer; ++g) {
    const std::size_t i = static_cast<std::size_t>(g + 1);
    if (kind == StateKind::kParams)
      s[i] = params_.data() + group(g).offset;
    else if (opts_[i])
      s[i] = kind == StateKind::kAdamM ? opts_[i]->m() : opts_[i]->v();
  }
  return s;
}

StateSlices FsdpStrategy::export_state(StateKind kind) {
  return slices_.export_from(segments(kind));
}

void FsdpStrategy::import_state(StateKind kind, const StateSlices& slices) {
  slices_.import_into(segments(kind), slices);
}

}  // namespace saturn::parallel
