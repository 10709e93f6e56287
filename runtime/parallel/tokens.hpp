// The token ids a rank runs in one step, resident on its device: micro-batches are copied out
// of the global batch on the host (padded to full micro-batches with token 0 and target -1,
// which the loss ignores), their ids checked against the vocabulary there, and uploaded in one
// copy per step. The model then reads them from device memory (no copy per micro-batch).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"

namespace saturn::parallel {

class TokenStage {
 public:
  TokenStage() = default;
  // Room for `capacity` micro-batches of `micro` rows of T tokens: inputs and/or targets.
  TokenStage(Device& device, int vocab, std::int64_t micro, int T, std::int64_t capacity,
             bool inputs, bool targets);
  // Device bytes such a stage takes on a backend (estimates), with the step's loss sum
  // (DeviceSum, common.hpp) that every strategy keeps beside it.
  static std::size_t bytes(const BackendTraits& traits, std::int64_t micro, int T,
                           std::int64_t capacity, bool inputs, bool targets);

  std::int64_t capacity() const { return capacity_; }
  // Rows [row, row + n) of `batch` (n <= micro) into micro-batch k, on the host.
  void stage(const data::Batch& batch, std::int64_t k, std::int64_t row, std::int64_t n);
  // Checks micro-batches [0, count) (InputError naming an id outside the vocabulary) and
  // uploads them.
  void upload(std::int64_t count);
  const std::int32_t* inputs(std::int64_t k) const;  // device
  const std::int32_t* targets(std::int64_t k) const;

 private:
  Device* device_ = nullptr;
  int vocab_ = 0;
  std::size_t per_micro_ = 0;  // ids per micro-batch
  std::int64_t capacity_ = 0;
  std::vector<std::int32_t> host_inputs_, host_targets_;
  Buffer<std::int32_t> inputs_, targets_;
};

}  // namespace saturn::parallel
