// The GPT decoder family (arch gpt2 or llama) on the CPU backend: parameters, gradients and
// activations in device buffers, forward and backward written per op (no autograd).
//
// One micro-batch: forward(tokens, targets) → mean loss; backward(dloss) accumulates parameter
// gradients, so calling forward/backward for every micro-batch and then one optimizer step is
// gradient accumulation. The passes are split into embed / block(l) / head stages so that
// strategies (pipeline stages, per-layer gathering) can run a subset.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn {

class GptModel {
 public:
  // Allocates parameters and gradients from `device` (OutOfMemoryError if they do not fit).
  GptModel(const ModelConfig& config, MemoryPool& device);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  std::size_t num_params() const { return layout_.total(); }

  // Deterministic initialisation from the seed (GPT-2 / LLaMA recipes: normal(0, 0.02),
  // residual projections scaled by 1/sqrt(2·n_layer), norms 1, biases 0).
  void init_weights(std::uint64_t seed);
  void zero_grads();

  // Allocates activations for micro-batches of B sequences of T tokens (done by forward on
  // first use; call it up front to learn about out-of-memory before training starts).
  void reserve(int B, int T);
  // tokens, targets: [B*T]. Returns the mean cross-entropy over the micro-batch's tokens.
  float forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T);
  // Backward of the last forward. dloss: weight of each token's loss in the objective
  // (1/tokens of the whole global batch, so micro-batch gradients add up to the mean).
  void backward(float dloss);
  // Logits of the last forward, [B*T, V] — only valid after forward_logits().
  const float* logits() const;
  // Forward without the loss, leaving logits readable (tests, generation).
  void forward_logits(const std::int32_t* tokens, int B, int T);

  // Stage-wise passes (used by forward/backward and by pipeline strategies).
  void embed_forward(const std::int32_t* tokens);
  void block_forward(int l);
  float head_forward(const std::int32_t* targets);  // returns mean loss (targets may be null)
  void head_backward(float dloss);
  void block_backward(int l);
  void embed_backward();

  // The residual stream entering block l (l = n_layer: entering the final norm), [B*T, C].
  float* residual(int l);
  // Gradient w.r.t. the residual stream at the current point of the backward pass.
  float* dresidual();
  int batch() const { return B_; }
  int seq() const { return T_; }

 private:
  struct Activations;
  const float* p(const ParamTensor& t) const { return params_.data() + t.offset; }
  float* g(const ParamTensor& t) { return grads_.data() + t.offset; }
  struct BlockParams;
  BlockParams block_params(int l) const;

  ModelConfig config_;
  ParameterLayout layout_;
  MemoryPool* device_;
  Buffer<float> params_;
  Buffer<float> grads_;
  std::unique_ptr<Activations> acts_;
  int B_ = 0, T_ = 0;
  const std::int32_t* tokens_ = nullptr;
  const std::int32_t* targets_ = nullptr;
};

}  // namespace saturn
