// The GPT decoder family (arch gpt2 or llama) on the CPU backend: parameters, gradients and
// activations in device buffers, forward and backward written per op (no autograd).
//
// One micro-batch: forward(tokens, targets) → mean loss; backward(dloss) accumulates parameter
// gradients, so calling forward/backward for every micro-batch and then one optimizer step is
// gradient accumulation. The passes are split into embed / block(l) / head stages so that
// strategies (pipeline stages, per-layer gathering) can run a subset.
//
// Strategies shape the model with ModelOptions:
//  - a shard: which blocks it runs (a pipeline stage), whether it runs the embedding and the
//    head, and its tensor-parallel rank (local heads and MLP columns, see ParameterLayout);
//  - parameter storage: owned (one flat buffer of the local layout, as for one device) or
//    borrowed (the strategy binds each group's parameters and gradients before using it, e.g.
//    an FSDP all-gather buffer or a layer copied in from host memory);
//  - activation slots: several micro-batches in flight (pipeline schedules);
//  - recomputation: blocks keep only their input and recompute the rest during backward.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn {

struct ModelShard {
  int tp_rank = 0;  // tensor-parallel rank and degree
  int tp_size = 1;
  int first_layer = 0;  // blocks [first_layer, end_layer) run here
  int end_layer = -1;   // -1: n_layer
  bool embed = true;    // runs the embedding (first pipeline stage)
  bool head = true;     // runs the final norm, head and loss (last pipeline stage)
};

enum class ParamStorage {
  kOwned,     // the model allocates its local layout's parameters and gradients
  kBorrowed,  // the caller binds each group's storage with bind_group()
};

struct ModelOptions {
  ModelShard shard;
  ParamStorage storage = ParamStorage::kOwned;
  bool recompute = false;  // activation recomputation
};

class GptModel {
 public:
  // The whole model on one device: owned parameters and gradients from `device`
  // (OutOfMemoryError if they do not fit).
  GptModel(const ModelConfig& config, MemoryPool& device);
  GptModel(const ModelConfig& config, MemoryPool& device, const ModelOptions& options);
  ~GptModel();
  GptModel(const GptModel&) = delete;
  GptModel& operator=(const GptModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelOptions& options() const { return options_; }
  // The local layout (tensor-parallel shapes when tp_size > 1).
  const ParameterLayout& layout() const { return layout_; }
  // Owned storage only: the flat local parameter and gradient buffers.
  float* params() { return params_.data(); }
  const float* params() const { return params_.data(); }
  float* grads() { return grads_.data(); }
  std::size_t num_params() const { return layout_.total(); }
  int first_layer() const { return first_; }
  int end_layer() const { return end_; }

  // Borrowed storage: group g's parameters (read) and gradients (accumulated into; may be null
  // for forward-only use) laid out as layout().group_begin(g)..group_end(g). GPT-2's head reads
  // the token embedding (group -1), so a head-running shard binds group -1 too.
  void bind_group(int group, const float* params, float* grads);
  void unbind_group(int group) { bind_group(group, nullptr, nullptr); }

  // Tensor parallelism: the sum over the tensor-parallel group, in place (set by the strategy;
  // needed when tp_size > 1).
  void set_tp_allreduce(std::function<void(float*, std::size_t)> allreduce) {
    tp_allreduce_ = std::move(allreduce);
  }

  // Deterministic initialisation from the seed (GPT-2 / LLaMA recipes: normal(0, 0.02),
  // residual projections scaled by 1/sqrt(2·n_layer), norms 1, biases 0). Every shard gets the
  // values the whole model would have (see generate_canonical_weights); fills bound groups.
  void init_weights(std::uint64_t seed);
  void zero_grads();  // owned storage

  // Allocates activations for micro-batches of B sequences of T tokens, `slots` micro-batches
  // in flight (done by forward on first use; call it up front to learn about out-of-memory
  // before training starts).
  void reserve(int B, int T, int slots = 1);
  // Bytes reserve(B, T, slots) allocates, without allocating (memory estimates); at most 2^60
  // (more than any device holds), so sums of a few estimates cannot wrap.
  static std::size_t activation_bytes(const ModelConfig& config, const ModelOptions& options, int B,
                                      int T, int slots = 1);
  // Which micro-batch slot the next stage-wise calls use (0 <= slot < slots).
  void set_slot(int slot);
  int slots() const;

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

  // The residual stream entering block l (l = n_layer: entering the final norm), [B*T, C], of
  // the current slot; l in [first_layer, end_layer].
  float* residual(int l);
  // Gradient w.r.t. the residual stream at the current point of the backward pass.
  float* dresidual();
  int batch() const { return B_; }
  int seq() const { return T_; }

 private:
  struct Activations;
  struct LayerActs;
  struct Slot;
  template <typename Alloc>
  static void build_activations(Activations& a, const ModelConfig& c, const ModelOptions& o,
                                int first, int end, int B, int T, int slots, Alloc&& alloc);
  const float* p(const ParamTensor& t) const;
  float* g(const ParamTensor& t);
  LayerActs& layer_acts(int l);
  void block_forward_into(int l, float* out);
  void reduce_tp(float* data, std::size_t n);

  ModelConfig config_;
  ModelOptions options_;
  ParameterLayout layout_;
  MemoryPool* device_;
  int first_ = 0, end_ = 0;
  Buffer<float> params_;
  Buffer<float> grads_;
  std::vector<const float*> group_params_;  // per group g at [g + 1]
  std::vector<float*> group_grads_;
  std::function<void(float*, std::size_t)> tp_allreduce_;
  std::unique_ptr<Activations> acts_;
  int slot_ = 0;
  int B_ = 0, T_ = 0;
};

// Streams the canonical (unsharded) initial weights tensor by tensor, in layout order, each
// passed as a whole canonical tensor: every strategy initialises exactly as one device would,
// without the whole model ever being resident. `tensor` is the canonical layout's entry.
void generate_canonical_weights(
    const ModelConfig& config, std::uint64_t seed,
    const std::function<void(std::size_t index, const ParamTensor& tensor, const float* values)>&
        visit);

}  // namespace saturn
