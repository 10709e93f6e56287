#include "runtime/parallel/tokens.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/parallel/common.hpp"

namespace saturn::parallel {

TokenStage::TokenStage(Device& device, int vocab, std::int64_t micro, int T, std::int64_t capacity,
                       bool inputs, bool targets)
    : device_(&device),
      vocab_(vocab),
      per_micro_(static_cast<std::size_t>(micro) * static_cast<std::size_t>(T)),
      capacity_(capacity) {
  const std::size_t n = per_micro_ * static_cast<std::size_t>(capacity);
  if (inputs) {
    host_inputs_.resize(n);
    inputs_ = Buffer<std::int32_t>(device.memory(), n, "tokens");
  }
  if (targets) {
    host_targets_.resize(n);
    targets_ = Buffer<std::int32_t>(device.memory(), n, "tokens");
  }
}

std::size_t TokenStage::bytes(const BackendTraits& traits, std::int64_t micro, int T,
                              std::int64_t capacity, bool inputs, bool targets) {
  const std::size_t n = static_cast<std::size_t>(micro) * static_cast<std::size_t>(T) *
                        static_cast<std::size_t>(capacity);
  const std::size_t one = traits.footprint(n * sizeof(std::int32_t));
  return ((inputs ? 1 : 0) + (targets ? 1 : 0)) * one + traits.footprint(sizeof(double));
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
}

const std::int32_t* TokenStage::inputs(std::int64_t k) const {
  return inputs_.data() + static_cast<std::size_t>(k) * per_micro_;
}

const std::int32_t* TokenStage::targets(std::int64_t k) const {
  return targets_.data() + static_cast<std::size_t>(k) * per_micro_;
}

}  // namespace saturn::parallel
