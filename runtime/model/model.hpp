// The GPT decoder family (arch gpt2 or llama) as the strategies drive it: one interface over
// the one model program (transformer.hpp) on any backend. Parameters, gradients, activations
// and tokens are device memory; the passes are enqueued on the device and nothing here waits
// for it (the loss stays on the device until a caller downloads it).
//
// One micro-batch: embed_forward / block_forward(l) / head_forward, then head_backward /
// block_backward(l) / embed_backward, which ACCUMULATE parameter gradients, so calling the
// passes for every micro-batch and then one optimizer step is gradient accumulation. The
// passes are split so that strategies (pipeline stages, per-layer gathering) run a subset.
//
// Strategies shape the model with ModelOptions:
//  - a shard: which blocks it runs (a pipeline stage), whether it runs the embedding and the
//    head, and its tensor-parallel rank (local heads and MLP columns, see ParameterLayout);
//  - parameter storage: owned (fp32 master weights, the kernels' copy where the backend keeps
//    one, and gradients, in one flat buffer each of the local layout, as for one device) or
//    borrowed (the strategy binds each group's weights and gradients before using it, e.g. an
//    FSDP all-gather buffer or a layer copied in from host memory);
//  - activation slots: several micro-batches in flight (pipeline schedules);
//  - recomputation: blocks keep only their input and recompute the rest during backward.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "runtime/backend/device.hpp"
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
  kOwned,     // the model allocates its local layout's weights and gradients
  kBorrowed,  // the caller binds each group's storage with bind_group()
};

struct ModelOptions {
  ModelShard shard;
  ParamStorage storage = ParamStorage::kOwned;
  bool recompute = false;  // activation recomputation
};

class Model {
 public:
  virtual ~Model() = default;
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual const ModelConfig& config() const = 0;
  virtual const ModelOptions& options() const = 0;
  // The local layout (tensor-parallel shapes when tp_size > 1; the backend's alignment).
  virtual const ParameterLayout& layout() const = 0;
  virtual const BackendTraits& traits() const = 0;
  virtual int first_layer() const = 0;
  virtual int end_layer() const = 0;

  // ---- owned storage: flat buffers of layout().total() elements
  virtual float* master() = 0;  // fp32 master weights
  // The weights the kernels read (traits().weights); master() itself when not separate.
  virtual void* weights() = 0;
  virtual float* grads() = 0;
  // After the master weights changed outside the optimizer (loading), refreshes the kernels'
  // copy.
  virtual void refresh_weights() = 0;
  // The canonical initial weights of `seed` (generate_canonical_weights), as one device would
  // hold them.
  virtual void init_weights(std::uint64_t seed) = 0;
  virtual void zero_grads() = 0;

  // ---- borrowed storage: group g's weights (traits().weights, read) and gradients (fp32,
  // accumulated into; null for forward-only use), laid out as layout().group_begin(g) ..
  // group_end(g). GPT-2's head reads the token embedding (group -1), so a head-running shard
  // binds group -1 too.
  virtual void bind_group(int group, const void* weights, float* grads) = 0;
  // A LoRA job's FSDP keeps a group's trained tensors (its adapters) apart from its frozen ones:
  // they are then read at `trained` (laid out as the group's parameters from
  // layout().trainable_begin(group)), the frozen ones at bind_group's weights. Null: all at
  // bind_group's weights.
  virtual void bind_group_trained(int group, const void* trained) = 0;
  void unbind_group(int group) {
    bind_group(group, nullptr, nullptr);
    bind_group_trained(group, nullptr);
  }

  // Tensor parallelism: the sum over the tensor-parallel group, in place, of `count`
  // activations (traits().activations) in device memory; set by the strategy, needed when
  // tp_size > 1.
  virtual void set_tp_allreduce(std::function<void(void* data, std::size_t count)> f) = 0;

  // Allocates activations for micro-batches of B sequences of T tokens, `slots` micro-batches
  // in flight (call it up front to learn about out-of-memory before training starts).
  virtual void reserve(int B, int T, int slots = 1) = 0;
  // Which micro-batch slot the next passes use (0 <= slot < slots).
  virtual void set_slot(int slot) = 0;
  virtual int slots() const = 0;
  virtual int batch() const = 0;
  virtual int seq() const = 0;

  // Packed records (`packing: {cross_attention: false}`): the current slot's positions and
  // segment ends, device memory [2][B*T] (parallel::TokenStage::segments: each token's position
  // in its record, then one past its record's last token in the row). Every pass of the slot
  // reads them until they are set again, so the caller keeps them alive meanwhile (a pipeline's
  // micro-batch from its forward to its backward). Null (after reserve): each row is one
  // sequence, positions 0..T-1.
  virtual void set_segments(const std::int32_t* segments) = 0;

  // ---- the passes. tokens, targets: device buffers of B*T ids, copied in (the caller may
  // reuse them once the pass is enqueued). Token ids must lie in [0, vocab) and targets below
  // vocab (< 0: ignored); callers check them on the host (parallel::TokenStage does).
  virtual void embed_forward(const std::int32_t* tokens) = 0;
  virtual void block_forward(int l) = 0;
  // Final norm, logits and, with targets, the loss: the slot's mean over its counted targets
  // lands in loss(). Without targets (null) only the logits are computed.
  virtual void head_forward(const std::int32_t* targets) = 0;
  virtual void head_backward(float dloss) = 0;
  virtual void block_backward(int l) = 0;
  virtual void embed_backward() = 0;
  // The whole micro-batch on the shard's layers (the shard runs the embedding and the head).
  void forward(const std::int32_t* tokens, const std::int32_t* targets) {
    embed_forward(tokens);
    for (int l = first_layer(); l < end_layer(); ++l) block_forward(l);
    head_forward(targets);
  }
  // dloss: weight of each token's loss in the objective (1/tokens of the whole global batch,
  // so micro-batch gradients add up to the mean).
  void backward(float dloss) {
    head_backward(dloss);
    for (int l = end_layer() - 1; l >= first_layer(); --l) block_backward(l);
    embed_backward();
  }

  // Device scalar: the current slot's mean loss of its last head_forward with targets.
  virtual const float* loss() const = 0;
  // The residual stream entering block l (l = n_layer: entering the final norm), [B*T, C] of
  // traits().activations, of the current slot; l in [first_layer, end_layer].
  virtual void* residual(int l) = 0;
  // Gradient w.r.t. the residual stream at the current point of the backward pass.
  virtual void* dresidual() = 0;
  // The current slot's logits [B*T, V] (traits().activations) after head_forward without
  // targets.
  virtual const void* logits() const = 0;
};

// The model program on `device`'s backend, its memory from device.memory() (OutOfMemoryError
// when owned storage does not fit).
std::unique_ptr<Model> make_model(Device& device, const ModelConfig& config,
                                  const ModelOptions& options = {});

// Bytes reserve(B, T, slots) allocates on a backend, without allocating (memory estimates).
std::size_t model_activation_bytes(DeviceKind backend, const ModelConfig& config,
                                   const ModelOptions& options, int B, int T, int slots = 1);

// Streams the canonical (unsharded) initial weights tensor by tensor, in layout order, each
// passed as a whole canonical tensor (host memory): every strategy initialises exactly as one
// device would, without the whole model ever being resident. `tensor` is the canonical
// layout's entry.
void generate_canonical_weights(
    const ModelConfig& config, std::uint64_t seed,
    const std::function<void(std::size_t index, const ParamTensor& tensor, const float* values)>&
        visit);

}  // namespace saturn
