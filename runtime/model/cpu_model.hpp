// The model program on the CPU, driven with host arrays: what tests, the PyTorch parity tool and
// the engine benchmark need (CPU device memory is host memory, so tokens, losses, parameters and
// gradients are read and written in place). Training goes through the strategies instead.
#pragma once

#include <cstdint>
#include <memory>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/model/model.hpp"

namespace saturn {

class CpuModel {
 public:
  // Whole model, owned storage, from `pool` (OutOfMemoryError when it does not fit).
  CpuModel(const ModelConfig& config, MemoryPool& pool, const ModelOptions& options = {})
      : device_(pool), model_(make_model(device_, config, options)) {}

  Model& model() { return *model_; }
  const ParameterLayout& layout() const { return model_->layout(); }
  std::size_t num_params() const { return model_->layout().total(); }
  float* params() { return model_->master(); }
  float* grads() { return model_->grads(); }
  void init_weights(std::uint64_t seed) { model_->init_weights(seed); }
  void zero_grads() { model_->zero_grads(); }
  void reserve(int B, int T, int slots = 1) { model_->reserve(B, T, slots); }

  // tokens, targets: [B*T] host arrays. The mean loss over the counted targets.
  float forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T) {
    ensure(B, T);
    model_->forward(tokens, targets);
    return *model_->loss();
  }
  void backward(float dloss) { model_->backward(dloss); }
  // Forward without the loss; logits() then holds [B*T, V].
  void forward_logits(const std::int32_t* tokens, int B, int T) {
    ensure(B, T);
    model_->forward(tokens, nullptr);
  }
  const float* logits() const { return static_cast<const float*>(model_->logits()); }

 private:
  void ensure(int B, int T) {
    if (model_->batch() != B || model_->seq() != T) model_->reserve(B, T);
  }
  cpu::CpuDevice device_;
  std::unique_ptr<Model> model_;
};

}  // namespace saturn
