// The token ids a rank runs in one step, resident on its device: micro-batches are copied out
// of the global batch on the host (padded to full micro-batches with token 0 and target -1,
// which the loss ignores), their ids checked against the vocabulary there, and uploaded in one
// copy per step. The model then reads them from device memory (no copy per micro-batch).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"

namespace saturn::parallel {

// The loss of a batch is the mean over its trained targets (docs/engine.md, "The loss"): every
// target but the -1 a loss mask (instruction data) or padding leaves. Each micro-batch's mean
// loss enters the sum weighted by its trained targets, and the sum, like the loss gradient, is
// divided by the whole batch's, so every strategy and micro-batch size gives the same number.
// Without a mask that is B·T, as for plain text.
std::int64_t trained_targets(const data::Batch& batch, std::int64_t row, std::int64_t rows);
struct LossScale {
  double divisor = 1;  // the batch's trained targets (1 when it has none: no loss, no gradient)
  float dloss = 1;     // 1 / divisor: the loss gradient of one trained target
};
LossScale loss_scale(const data::Batch& batch);

// What a rank stages: the token ids (it runs the embedding), the targets (it runs the head),
// the records' segments (packed records, `packing: {cross_attention: false}`: every rank that
// runs blocks or the embedding, whose attention and positions follow the records).
struct StagedParts {
  bool inputs = false;
  bool targets = false;
  bool segments = false;
};

class TokenStage {
 public:
  TokenStage() = default;
  // Room for `capacity` micro-batches of `micro` rows of T tokens.
  TokenStage(Device& device, int vocab, std::int64_t micro, int T, std::int64_t capacity,
             StagedParts parts);
  // Device bytes such a stage takes on a backend (estimates), with the step's loss sum
  // (DeviceSum, common.hpp) that every strategy keeps beside it.
  static std::size_t bytes(const BackendTraits& traits, std::int64_t micro, int T,
                           std::int64_t capacity, StagedParts parts);

  std::int64_t capacity() const { return capacity_; }
  // Rows [row, row + n) of `batch` (n <= micro) into micro-batch k, on the host.
  void stage(const data::Batch& batch, std::int64_t k, std::int64_t row, std::int64_t n);
  // Checks micro-batches [0, count) (InputError naming an id outside the vocabulary) and
  // uploads them.
  void upload(std::int64_t count);
  const std::int32_t* inputs(std::int64_t k) const;  // device
  const std::int32_t* targets(std::int64_t k) const;
  // Micro-batch k's positions and segment ends, [2][micro*T] as Model::set_segments takes them;
  // null when the stage holds no segments. A padding row is one sequence (positions 0..T-1).
  const std::int32_t* segments(std::int64_t k) const;

  // Evaluation's walk over `rows` rows of `batch` from `first_row`, in micro-batches of `micro`
  // rows (the last may be shorter): staged and uploaded capacity() at a time (unless
  // `stage_tokens` is false: a middle pipeline stage reads none), then fn(k, weight) for each,
  // with k its slot in the group and weight its trained targets (the weight of its mean loss).
  template <class Fn>
  void for_each_micro(const data::Batch& batch, std::int64_t first_row, std::int64_t rows,
                      std::int64_t micro, bool stage_tokens, Fn&& fn) {
    const std::int64_t chunks = (rows + micro - 1) / micro;
    const auto rows_of = [&](std::int64_t chunk) { return std::min(micro, rows - chunk * micro); };
    for (std::int64_t first = 0; first < chunks; first += capacity_) {
      const std::int64_t count = std::min(capacity_, chunks - first);
      if (stage_tokens) {
        for (std::int64_t k = 0; k < count; ++k)
          stage(batch, k, first_row + (first + k) * micro, rows_of(first + k));
        upload(count);
      }
      for (std::int64_t k = 0; k < count; ++k)
        fn(k, static_cast<double>(
                  trained_targets(batch, first_row + (first + k) * micro, rows_of(first + k))));
    }
  }

 private:
  // Rows [row, row + n) of the batch's positions, and their segment ends, into `segments`.
  void stage_segments(const data::Batch& batch, std::int64_t row, std::int64_t n,
                      std::int32_t* segments) const;

  Device* device_ = nullptr;
  int vocab_ = 0;
  std::size_t per_micro_ = 0;  // ids per micro-batch
  std::int64_t capacity_ = 0;
  std::vector<std::int32_t> host_inputs_, host_targets_, host_segments_;
  Buffer<std::int32_t> inputs_, targets_, segments_;
};

}  // namespace saturn::parallel
