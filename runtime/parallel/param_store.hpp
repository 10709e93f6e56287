// A strategy's parameters on a device: fp32 master weights (what the optimizer updates and
// checkpoints hold) and, on a backend whose kernels read another type (bf16 on CUDA), the
// kernels' copy, refreshed after every change. On the CPU both are one buffer.
#pragma once

#include <cstddef>

#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"

namespace saturn::parallel {

class ParamStore {
 public:
  ParamStore() = default;
  // n elements of each, zeroed, from device.memory() (tag for the accounting).
  ParamStore(Device& device, std::size_t n, const char* tag = "parameters");

  std::size_t size() const { return master_.size(); }
  float* master() { return master_.data(); }
  // The kernels' weights: the master buffer itself when the backend keeps no separate copy.
  void* weights();
  void* weights_at(std::size_t element);
  // Converts master[begin, begin + n) into the kernels' copy (after loading or initialising).
  void refresh(std::size_t begin, std::size_t n);
  void refresh() { refresh(0, size()); }
  // Bytes a store of n elements takes on a backend (estimates).
  static std::size_t bytes(const BackendTraits& traits, std::size_t n);

 private:
  Device* device_ = nullptr;
  Buffer<float> master_;
  Buffer<std::byte> weights_;  // separate copy only
};

}  // namespace saturn::parallel
