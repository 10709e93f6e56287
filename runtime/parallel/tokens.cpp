#include "runtime/parallel/tokens.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/parallel/common.hpp"

namespace saturn::parallel {

TokenStage::TokenStage(Device& device, int vocab, std::int64_t micro, int T, std::int64_t capacity,
                       StagedParts parts)
    : device_(&device),
      vocab_(vocab),
      per_micro_(static_cast<std::size_t>(micro) * static_cast<std::size_t>(T)),
      capacity_(capacity) {
  const std::size_t n = per_micro_ * static_cast<std::size_t>(capacity);
  if (parts.inputs) {
    host_inputs_.resize(n);
    inputs_ = Buffer<std::int32_t>(device.memory(), n, "tokens");
  }
  if (parts.targets) {
    host_targets_.resize(n);
    targets_ = Buffer<std::int32_t>(device.memory(), n, "tokens");
  }
  if (parts.segments) {
    host_segments_.resize(2 * n);
    segments_ = Buffer<std::int32_t>(device.memory(), 2 * n, "tokens");
  }
}

std::size_t TokenStage::bytes(const BackendTraits& traits, std::int64_t micro, int T,
                              std::int64_t capacity, StagedParts parts) {
  const std::size_t n = static_cast<std::size_t>(micro) * static_cast<std::size_t>(T) *
                        static_cast<std::size_t>(capacity);
  const std::size_t one = traits.footprint(n * sizeof(std::int32_t));
  return ((parts.inputs ? 1 : 0) + (parts.targets ? 1 : 0)) * one +
         (parts.segments ? traits.footprint(2 * n * sizeof(std::int32_t)) : 0) +
         traits.footprint(sizeof(double));
}

std::int64_t trained_targets(const data::Batch& batch, std::int64_t row, std::int64_t rows) {
  const auto T = static_cast<std::size_t>(batch.seq_len);
  const auto begin = static_cast<std::size_t>(row) * T;
  const auto end = std::min(batch.targets.size(), begin + static_cast<std::size_t>(rows) * T);
  std::int64_t n = 0;
  for (std::size_t i = begin; i < end; ++i) n += batch.targets[i] >= 0 ? 1 : 0;
  return n;
}

LossScale loss_scale(const data::Batch& batch) {
  LossScale s;
  s.divisor =
      static_cast<double>(std::max<std::int64_t>(1, trained_targets(batch, 0, batch.batch_size)));
  s.dloss = 1.0f / static_cast<float>(s.divisor);
  return s;
}

void TokenStage::stage(const data::Batch& batch, std::int64_t k, std::int64_t row, std::int64_t n) {
  if (k < 0 || k >= capacity_)
    throw Error(fmt::format("token stage: micro-batch {} outside its {} slots", k, capacity_));
  const std::int64_t micro = static_cast<std::int64_t>(per_micro_) / batch.seq_len;
  const std::size_t off = static_cast<std::size_t>(k) * per_micro_;
  copy_rows(batch, row, n, micro, host_inputs_.empty() ? nullptr : host_inputs_.data() + off,
            host_targets_.empty() ? nullptr : host_targets_.data() + off);
  if (!host_segments_.empty()) stage_segments(batch, row, n, host_segments_.data() + 2 * off);
}

void TokenStage::stage_segments(const data::Batch& batch, std::int64_t row, std::int64_t n,
                                std::int32_t* segments) const {
  const int T = batch.seq_len;
  const std::size_t rows = per_micro_ / static_cast<std::size_t>(T);
  if (batch.positions.size() != batch.inputs.size())
    throw Error(
        fmt::format("token stage: a batch of {} tokens carries {} positions: packed "
                    "records need the loader's record starts",
                    batch.inputs.size(), batch.positions.size()));
  std::int32_t* positions = segments;
  std::int32_t* ends = segments + per_micro_;
  for (std::size_t r = 0; r < rows; ++r) {
    std::int32_t* pos = positions + r * static_cast<std::size_t>(T);
    if (static_cast<std::int64_t>(r) < n) {
      const auto from = batch.positions.begin() +
                        static_cast<std::ptrdiff_t>((static_cast<std::size_t>(row) + r) * T);
      std::copy(from, from + T, pos);
    } else {
      for (int t = 0; t < T; ++t) pos[t] = t;  // padding: one sequence, no loss
    }
    // A record ends where the next one starts (position 0) or at the row's end.
    std::int32_t* end = ends + r * static_cast<std::size_t>(T);
    end[T - 1] = T;
    for (int t = T - 2; t >= 0; --t) end[t] = pos[t + 1] == 0 ? t + 1 : end[t + 1];
  }
}

void TokenStage::upload(std::int64_t count) {
  const std::size_t n = static_cast<std::size_t>(count) * per_micro_;
  // Checked here, on the host: a kernel reading past a row cannot report which id was wrong.
  for (std::size_t i = 0; i < host_inputs_.size() && i < n; ++i) {
    const std::int32_t id = host_inputs_[i];
    if (id < 0 || id >= vocab_)
      throw InputError(fmt::format("token id {} at position {} is outside the vocabulary [0, {})",
                                   id, i % per_micro_, vocab_));
  }
  for (std::size_t i = 0; i < host_targets_.size() && i < n; ++i) {
    if (host_targets_[i] >= vocab_)
      throw InputError(fmt::format("target token {} is outside the vocabulary [0, {})",
                                   host_targets_[i], vocab_));
  }
  if (!host_inputs_.empty())
    device_->upload(inputs_.data(), host_inputs_.data(), n * sizeof(std::int32_t));
  if (!host_targets_.empty())
    device_->upload(targets_.data(), host_targets_.data(), n * sizeof(std::int32_t));
  // Both halves of micro-batches [0, count): [2][per_micro] each, contiguous.
  if (!host_segments_.empty())
    device_->upload(segments_.data(), host_segments_.data(), 2 * n * sizeof(std::int32_t));
}

const std::int32_t* TokenStage::inputs(std::int64_t k) const {
  return inputs_.data() + static_cast<std::size_t>(k) * per_micro_;
}

const std::int32_t* TokenStage::targets(std::int64_t k) const {
  return targets_.data() + static_cast<std::size_t>(k) * per_micro_;
}

const std::int32_t* TokenStage::segments(std::int64_t k) const {
  if (host_segments_.empty()) return nullptr;
  return segments_.data() + 2 * static_cast<std::size_t>(k) * per_micro_;
}

}  // namespace saturn::parallel
