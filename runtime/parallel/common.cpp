#include "runtime/parallel/common.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/parallel/repro.hpp"

namespace saturn::parallel {

RowRange shard_rows(std::int64_t rows, int shard, int shards) {
  const std::int64_t b = shard * rows / shards, e = (shard + 1) * rows / shards;
  return {b, e - b};
}

std::int64_t choose_micro_batch(const StrategySpec& spec, std::int64_t rows, std::string* reason) {
  if (spec.train.reproducible) {
    std::string why = reproducible_rows_reason(spec, rows);
    if (!why.empty()) {
      if (reason) *reason = std::move(why);
      return 0;
    }
    return canonical_micro_batch(spec.train);
  }
  const std::int64_t configured =
      spec.knobs.micro_batch_size > 0 ? spec.knobs.micro_batch_size : spec.train.micro_batch_size;
  if (configured > 0) {
    if (rows % configured != 0) {
      if (reason)
        *reason = fmt::format(
            "micro_batch_size {} does not divide the {} sequences each rank (or replica) "
            "processes per step",
            configured, rows);
      return 0;
    }
    return configured;
  }
  for (std::int64_t m = std::min<std::int64_t>(8, rows); m >= 1; --m)
    if (rows % m == 0) return m;
  return 1;
}

void copy_rows(const data::Batch& batch, std::int64_t row, std::int64_t n, std::int64_t capacity,
               std::int32_t* inputs, std::int32_t* targets) {
  const std::size_t T = static_cast<std::size_t>(batch.seq_len);
  const std::size_t used = static_cast<std::size_t>(n) * T;
  const std::size_t total = static_cast<std::size_t>(capacity) * T;
  const std::size_t off = static_cast<std::size_t>(row) * T;
  if (inputs) {
    std::copy(batch.inputs.begin() + static_cast<std::ptrdiff_t>(off),
              batch.inputs.begin() + static_cast<std::ptrdiff_t>(off + used), inputs);
    std::fill(inputs + used, inputs + total, 0);
  }
  if (targets) {
    std::copy(batch.targets.begin() + static_cast<std::ptrdiff_t>(off),
              batch.targets.begin() + static_cast<std::ptrdiff_t>(off + used), targets);
    std::fill(targets + used, targets + total, -1);
  }
}

void SliceSet::add_local_tensor(const ParamTensor& t, int tp_rank, int segment, std::size_t offset,
                                bool writer) {
  for (const auto& b : canonical_boxes(t, tp_rank)) {
    Entry e;
    e.slice.name = t.name;
    e.slice.shape = t.canonical_shape;
    e.slice.start = b.start;
    e.slice.count = b.count;
    e.slice.writer = writer;
    e.segment = segment;
    e.offset = offset + static_cast<std::size_t>(b.local_row * b.local_cols + b.local_col);
    e.rows = b.rows;
    e.cols = b.cols;
    e.stride = b.local_cols;
    if (!b.contiguous()) e.staging.resize(static_cast<std::size_t>(b.rows * b.cols));
    add(std::move(e));
  }
}

bool SliceSet::staged(const Entry& e) const {
  return !e.staging.empty();
}

void SliceSet::add(Entry e) {
  if (device_ == nullptr) throw Error("SliceSet used without a device");
  if (!device_->memory().host_accessible() && e.staging.empty())
    e.staging.resize(static_cast<std::size_t>(e.rows * e.cols));
  entries_.push_back(std::move(e));
}

void SliceSet::add_flat_range(const ParamTensor& t, std::size_t begin, std::size_t end, int segment,
                              std::size_t offset, bool writer) {
  if (begin >= end) return;
  auto push = [&](std::vector<std::int64_t> start, std::vector<std::int64_t> count,
                  std::size_t from) {
    Entry e;
    e.slice.name = t.name;
    e.slice.shape = t.canonical_shape;
    e.slice.start = std::move(start);
    e.slice.count = std::move(count);
    e.slice.writer = writer;
    e.segment = segment;
    e.offset = offset + (from - begin);
    std::int64_t n = 1;
    for (auto c : e.slice.count) n *= c;
    e.rows = 1;
    e.cols = n;
    e.stride = n;
    add(std::move(e));
  };
  if (t.canonical_shape.size() == 1) {
    push({static_cast<std::int64_t>(begin)}, {static_cast<std::int64_t>(end - begin)}, begin);
    return;
  }
  const std::size_t W = static_cast<std::size_t>(t.canonical_shape[1]);
  std::size_t pos = begin;
  if (pos % W != 0) {  // partial first row
    const std::size_t stop = std::min(end, (pos / W + 1) * W);
    push({static_cast<std::int64_t>(pos / W), static_cast<std::int64_t>(pos % W)},
         {1, static_cast<std::int64_t>(stop - pos)}, pos);
    pos = stop;
  }
  if (pos < end && end - pos >= W) {  // whole rows
    const std::size_t rows = (end - pos) / W;
    push({static_cast<std::int64_t>(pos / W), 0},
         {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(W)}, pos);
    pos += rows * W;
  }
  if (pos < end)  // partial last row
    push({static_cast<std::int64_t>(pos / W), 0}, {1, static_cast<std::int64_t>(end - pos)}, pos);
}

StateSlices SliceSet::export_from(const std::vector<float*>& segments) {
  StateSlices out;
  out.reserve(entries_.size());
  std::vector<float> span;
  for (auto& e : entries_) {
    float* src = segments.at(static_cast<std::size_t>(e.segment)) + e.offset;
    if (!staged(e)) {
      e.slice.data = src;
    } else {
      // One copy of the box's whole span (rows `stride` apart), then its columns on the host.
      const std::size_t len = static_cast<std::size_t>((e.rows - 1) * e.stride + e.cols);
      span.resize(len);
      device_->download(span.data(), src, len * sizeof(float));
      for (std::int64_t r = 0; r < e.rows; ++r)
        std::memcpy(e.staging.data() + r * e.cols, span.data() + r * e.stride,
                    static_cast<std::size_t>(e.cols) * sizeof(float));
      e.slice.data = e.staging.data();
    }
    out.push_back(e.slice);
  }
  return out;
}

void SliceSet::import_into(const std::vector<float*>& segments, const StateSlices& slices) const {
  std::map<std::pair<std::string, std::vector<std::int64_t>>, const TensorSlice*> given;
  for (const auto& s : slices) given[{s.name, s.start}] = &s;
  for (const auto& e : entries_) {
    auto it = given.find({e.slice.name, e.slice.start});
    if (it == given.end())
      throw Error(fmt::format("import: no slice of {} at [{}] given (export_state lists it)",
                              e.slice.name, fmt::join(e.slice.start, ", ")));
    const TensorSlice& s = *it->second;
    if (s.count != e.slice.count)
      throw Error(fmt::format("import: slice of {} at [{}] has count [{}], expected [{}]", s.name,
                              fmt::join(s.start, ", "), fmt::join(s.count, ", "),
                              fmt::join(e.slice.count, ", ")));
    if (s.data == nullptr) throw Error(fmt::format("import: slice of {} has no data", s.name));
    float* dst = segments.at(static_cast<std::size_t>(e.segment)) + e.offset;
    if (s.data == dst) continue;              // filled in place
    if (e.rows == 1 || e.stride == e.cols) {  // contiguous on the device: one copy
      device_->upload(dst, s.data, static_cast<std::size_t>(e.rows * e.cols) * sizeof(float));
      continue;
    }
    for (std::int64_t r = 0; r < e.rows; ++r)
      device_->upload(dst + r * e.stride, s.data + r * e.cols,
                      static_cast<std::size_t>(e.cols) * sizeof(float));
  }
}

DeviceSum::DeviceSum(Device& device) : device_(&device), value_(device.memory(), 1, "loss sum") {
  reset();
}

void DeviceSum::reset() {
  device_->zero(value_.data(), value_.bytes());
}

void DeviceSum::add(const float* x, double weight) {
  device_->add_scaled(value_.data(), x, weight);
}

double DeviceSum::read() {
  double v = 0;
  device_->download(&v, value_.data(), sizeof v);
  return v;
}

double blocks_flops_per_token(const ModelConfig& c, int seq_len, int first, int end) {
  const double C = c.d_model, F = c.ffn_dim(), KV = c.kv_dim(), Q = c.q_dim();
  // llama: q and o are C x Q (Q = C but for Gemma), k and v C x KV (fewer with grouped-query
  // attention).
  const double matmul =
      c.arch == Arch::kGpt2 ? 4 * C * C + 2 * C * F : 2 * C * Q + 2 * C * KV + 3 * C * F;
  // A LoRA job's frozen linears skip their weight gradient: backward once the forward, not
  // twice. Each adapter costs 2·rank·(in + out) forward and 2·rank·(3·in + 2·out) backward
  // (A x recomputed, then B's and A's gradients and the input's).
  const bool lora = c.lora.enabled();
  double adapters = 0;
  for (const LoraLinear& x : lora_linears(c))
    adapters +=
        2.0 * c.lora.rank * (4.0 * static_cast<double>(x.in) + 3.0 * static_cast<double>(x.out));
  double flops = 0;
  for (int l = first; l < end; ++l) {
    // Keys per query: the sequence, or a sliding window shorter than it (Gemma 2: on its even
    // layers only).
    const double T = c.window(l) > 0 ? std::min(seq_len, c.window(l)) : seq_len;
    // forward 2 FLOPs per multiply-add, backward twice the forward; attention scores and values
    // cost 2·T·Q multiply-adds per token (causal: about half, counted whole as PaLM does).
    flops += (lora ? 2.0 : 3.0) * 2.0 * matmul + 3.0 * 4.0 * T * Q + adapters;
  }
  return flops;
}

double block_flops_per_token(const ModelConfig& c, int seq_len) {
  // Every layer alike but with Gemma 2's alternating window.
  if (!c.alternate_window || c.n_layer < 2) return blocks_flops_per_token(c, seq_len, 0, 1);
  return blocks_flops_per_token(c, seq_len, 0, c.n_layer) / c.n_layer;
}

double head_flops_per_token(const ModelConfig& c) {
  // Forward, and the input's gradient; the weight's too unless frozen (LoRA).
  return (c.lora.enabled() ? 2.0 : 3.0) * 2.0 * static_cast<double>(c.d_model) * c.vocab_size;
}

Estimate& infeasible(Estimate& e, const std::string& reason) {
  if (e.feasible) {
    e.feasible = false;
    e.reason = reason;
  }
  return e;
}

void check_capacity(Estimate& e, const Knobs& knobs, const std::string& what) {
  if (knobs.device_capacity > 0 && e.device_bytes > knobs.device_capacity)
    infeasible(
        e, fmt::format("out of memory: {} needs {} of device memory at its peak on the busiest "
                       "rank, more than the {} available (device_capacity)",
                       what, format_bytes(e.device_bytes), format_bytes(knobs.device_capacity)));
  if (knobs.host_capacity > 0 && e.host_bytes > knobs.host_capacity)
    infeasible(e, fmt::format("out of memory: {} needs {} of host memory per rank, more than the "
                              "{} available (host_capacity)",
                              what, format_bytes(e.host_bytes), format_bytes(knobs.host_capacity)));
}

void finish_estimate(Estimate& e, const StrategySpec& spec, const std::string& what) {
  // What the cost model's optimizer and reproducible-mode terms count, unless the strategy said
  // otherwise: AdamW's two moments per local parameter, the fp64 accumulator's elements.
  const auto bytes_of = [&](const char* tag) {
    const auto it = e.device_breakdown.find(tag);
    return it == e.device_breakdown.end() ? std::size_t{0} : it->second;
  };
  if (e.optimizer_elements == 0)
    e.optimizer_elements = static_cast<double>(bytes_of("optimizer state")) / (2.0 * sizeof(float));
  if (spec.train.reproducible && e.accumulated_elements == 0)
    e.accumulated_elements = static_cast<double>(bytes_of("fp64 gradient accumulator")) / 8.0;
  const std::size_t fixed = backend_traits(spec.backend).device_workspace;
  if (fixed > 0) {
    e.device_breakdown["backend workspace"] = fixed;
    e.device_bytes += fixed;
  }
  check_capacity(e, spec.knobs, what);
}

bool check_common(Estimate& e, const StrategySpec& spec, int replicas) {
  if (spec.degree < 1) {
    infeasible(e, fmt::format("degree {} must be >= 1", spec.degree));
    return false;
  }
  try {
    spec.model.validate();
  } catch (const InputError& err) {
    infeasible(e, err.what());
    return false;
  }
  if (spec.train.seq_len > spec.model.max_seq_len) {
    infeasible(e, fmt::format("seq_len {} exceeds the model's {} positions", spec.train.seq_len,
                              spec.model.max_seq_len));
    return false;
  }
  if (replicas < 1 || spec.train.batch_size % replicas != 0) {
    infeasible(e, fmt::format("batch_size {} is not divisible by the {} data-parallel replicas, "
                              "so replicas would train on unequal shares",
                              spec.train.batch_size, replicas));
    return false;
  }
  return true;
}

}  // namespace saturn::parallel
