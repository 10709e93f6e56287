// The GPT decoder family (arch gpt2 or llama) on one CUDA device, op for op the same passes as
// GptModel (gpt.hpp) on the CUDA backend (runtime/backend/cuda/ops.hpp): bf16 weights and
// activations, fp32 master weights and gradients, fp32 loss.
//
// Scope: the whole model on one device (no shards, tensor parallelism, borrowed storage or
// recomputation yet: strategies still run on the CPU backend). Every buffer comes from the
// context's device MemoryPool, so its accounting reports the peaks as on the CPU.
//
// Device layout: tensors sit at the layout's order but each starts at a multiple of
// kDeviceAlign elements (cuBLASLt's fast kernels want aligned operands); host-side views
// (get_params, set_params, get_grads) use the plain flat layout.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/backend/cuda/ops.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn {

class CudaGptModel {
 public:
  static constexpr std::size_t kDeviceAlign = 128;  // elements

  CudaGptModel(const ModelConfig& config, cuda::Context& ctx);
  ~CudaGptModel();
  CudaGptModel(const CudaGptModel&) = delete;
  CudaGptModel& operator=(const CudaGptModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  std::size_t num_params() const { return layout_.total(); }
  cuda::Context& context() { return *ctx_; }

  // The same initial values as GptModel::init_weights(seed).
  void init_weights(std::uint64_t seed);
  // Flat host layout (layout().total() floats): master weights in, bf16 copy refreshed.
  void set_params(const float* host);
  void get_params(float* host);  // fp32 master weights
  void get_grads(float* host);
  void zero_grads();

  void reserve(int B, int T);
  static std::size_t activation_bytes(const ModelConfig& config, int B, int T);

  // Host tokens/targets [B*T]; returns the mean cross-entropy (waits for the device).
  float forward(const std::int32_t* tokens, const std::int32_t* targets, int B, int T);
  // Backward of the last forward(targets given): accumulates into the fp32 gradients.
  void backward(float dloss);
  // Forward without loss; logits() then copies the bf16 logits to the host as float.
  void forward_logits(const std::int32_t* tokens, int B, int T);
  void get_logits(float* host);

  // Device views for the optimizer: padded buffers of padded_total() elements; tensor k of the
  // layout starts at device_offset(k).
  float* master() { return master_.data(); }
  cuda::bf16* weights() { return weights_.data(); }
  float* grads() { return grads_.data(); }
  std::size_t padded_total() const { return padded_total_; }
  std::size_t device_offset(std::size_t k) const { return dev_offset_[k]; }

 private:
  struct LayerActs;
  struct Activations;
  template <typename Alloc>
  static void build_activations(Activations& a, const ModelConfig& c, int B, int T, Alloc&& alloc);
  const cuda::bf16* p(const ParamTensor& t) const;
  float* g(const ParamTensor& t);
  void embed_forward(const std::int32_t* tokens);
  void block_forward(int l);
  float head_forward(const std::int32_t* targets);
  void head_backward(float dloss);
  void block_backward(int l);
  void embed_backward();
  void zero(void* ptr, std::size_t bytes);
  void upload_master(const std::vector<float>& padded);

  ModelConfig config_;
  ParameterLayout layout_;
  cuda::Context* ctx_;
  std::vector<std::size_t> dev_offset_;
  std::size_t padded_total_ = 0;
  Buffer<float> master_;
  Buffer<cuda::bf16> weights_;
  Buffer<float> grads_;
  std::unique_ptr<Activations> acts_;
  int B_ = 0, T_ = 0;
  bool have_targets_ = false;
};

}  // namespace saturn
