// The CUDA backend's element types and attention bookkeeping, without CUDA headers: what the
// model program's activations are made of on a GPU (bf16 activations and weights; flash-style
// attention keeps a [B, H, T] log-sum-exp and needs a [B, H, T] scratch, not [B, H, T, T]).
// Memory estimates for GPU configurations use it on any machine.
#pragma once

#include <cstddef>

#include "runtime/backend/device.hpp"
#include "runtime/core/dtype.hpp"

namespace saturn::cuda {

struct BackendTypes {
  static constexpr DeviceKind kKind = DeviceKind::kCuda;
  using Act = BFloat16;
  using Weight = BFloat16;
  using AttnSaved = float;
  static std::size_t attention_saved(std::size_t B, std::size_t H, std::size_t T) {
    return B * H * T;
  }
  static std::size_t attention_scratch(std::size_t B, std::size_t H, std::size_t T) {
    return B * H * T;
  }
};

}  // namespace saturn::cuda
