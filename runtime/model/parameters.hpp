// The parameter layout of a model: every tensor's Hugging Face name, shape and offset in one
// flat fp32 buffer. Tensors are ordered embeddings, layer 0 … layer L-1, final norm, head, and
// each layer's tensors are contiguous, so a strategy can move or shard a layer as one range.
//
// With tensor parallelism of degree tp, the layout is one rank's *local* layout: attention heads
// and MLP columns are split (Megatron), so some tensors hold 1/tp of the canonical tensor. Each
// tensor records how its local block maps onto the canonical tensor (split_dim, split_parts);
// canonical_boxes() turns that into boxes for checkpoints and initialisation.
//
// A backend may ask for aligned groups (BackendTraits::param_align): each group then starts at
// a multiple of `align` elements and the gaps are padding that belongs to no tensor. The same
// layout addresses host and device buffers, so DDP slices, FSDP shards and gradient buckets
// are the same ranges everywhere. Tensors inside a group stay adjacent (LLaMA's q, k and v
// weights are one GEMM operand).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/config.hpp"

namespace saturn {

struct ParamTensor {
  std::string name;                           // e.g. transformer.h.0.attn.c_attn.weight
  std::vector<std::int64_t> shape;            // local shape (the Hugging Face shape when tp = 1)
  std::vector<std::int64_t> canonical_shape;  // the whole tensor's Hugging Face shape
  std::size_t offset = 0;                     // in floats, into the flat buffer
  std::size_t numel = 0;                      // local elements
  bool decay = false;  // AdamW weight decay applies (matrices and embeddings)
  int layer = -1;      // -1: embeddings; 0..L-1: block; L: final norm and head
  // Tensor parallelism splits dimension split_dim across ranks (-1: replicated on every rank).
  // A split dimension made of split_parts equal parts (GPT-2's fused q|k|v) splits each part.
  int split_dim = -1;
  int split_parts = 1;
  // Trained (gradients and AdamW state), or frozen: a LoRA job's base model. A trainable
  // tensor's gradient, AdamW m and v live at grad_offset of the gradient layout.
  bool trainable = true;
  std::size_t grad_offset = 0;
};

// An adapter beside a linear of a block (null when that linear has none).
struct LoraTensors {
  const ParamTensor *a = nullptr, *b = nullptr;
  bool present() const { return a != nullptr; }
};

// The tensors of one transformer block, by role (the ones an architecture lacks are null).
struct BlockTensors {
  // gpt2
  const ParamTensor *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
      *fcprojb;
  // llama (qkvb, projb and the MLP biases only when the model has them)
  const ParamTensor *gatew, *gateb, *upw, *upb, *downw, *downb;
  // Gemma 2's norms of the attention and MLP outputs (post_norms only)
  const ParamTensor *post_attnw, *post_mlpw;
  // LoRA adapters, indexed by lora_index(LoraTarget)
  LoraTensors lora[10];
  const LoraTensors& adapter(LoraTarget t) const { return lora[lora_index(t)]; }
  static int lora_index(LoraTarget t);
};

// The tensors outside the blocks, by role (the ones an architecture lacks are null).
struct OuterTensors {
  const ParamTensor* token_embedding;     // wte / embed_tokens
  const ParamTensor* position_embedding;  // gpt2's wpe
  const ParamTensor* final_norm_weight;   // ln_f / model.norm
  const ParamTensor* final_norm_bias;     // gpt2's ln_f bias
  const ParamTensor* head;                // lm_head, or the token embedding when tied
};

class ParameterLayout {
 public:
  // tp_size > 1: the local layout of one tensor-parallel rank; n_head, kv_heads() and ffn_dim()
  // must be divisible by tp_size (InputError otherwise). align: elements each group starts at a
  // multiple of (1: no padding, the canonical flat layout).
  explicit ParameterLayout(const ModelConfig& config, int tp_size = 1, std::size_t align = 1);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t total() const { return total_; }
  int tp_size() const { return tp_size_; }
  std::size_t align() const { return align_; }
  int num_groups() const { return static_cast<int>(group_begin_.size()) - 1; }  // L + 2
  // [begin, end) in floats of a group: -1 embeddings, 0..L-1 blocks, L final norm + head.
  std::size_t group_begin(int group) const { return group_begin_[group + 1]; }
  std::size_t group_end(int group) const { return group_begin_[group + 2]; }
  std::size_t group_size(int group) const { return group_end(group) - group_begin(group); }
  std::size_t max_group_size() const;
  // ---- what is trained. Without LoRA every tensor is trainable and the gradient layout is
  // the parameter layout. With LoRA a block group holds its frozen base tensors, then (from
  // trainable_begin, aligned) its adapters; the gradient layout holds only the trainable
  // tensors, group by group: parameters [trainable_begin(g), group_end(g)) correspond element
  // by element to gradients [grad_group_begin(g), grad_group_end(g)).
  bool has_frozen() const { return has_frozen_; }
  std::size_t grad_total() const { return grad_begin_.back(); }
  std::size_t grad_group_begin(int group) const { return grad_begin_[group + 1]; }
  std::size_t grad_group_end(int group) const { return grad_begin_[group + 2]; }
  std::size_t grad_group_size(int group) const {
    return grad_group_end(group) - grad_group_begin(group);
  }
  std::size_t trainable_begin(int group) const { return trainable_begin_[group + 1]; }
  // The parameter element whose gradient is element x of group g's gradients.
  std::size_t weight_of_gradient(int group, std::size_t x) const {
    return trainable_begin(group) + (x - grad_group_begin(group));
  }
  // Index range [first, last) into tensors() of a group's tensors.
  std::size_t group_first_tensor(int group) const { return group_tensor_[group + 1]; }
  std::size_t group_last_tensor(int group) const { return group_tensor_[group + 2]; }
  const ParamTensor& find(const std::string& name) const;  // throws Error when absent
  // Block l's tensors, for every backend's model (one place knows the order they are added in).
  BlockTensors block(int l) const;
  // The embeddings, final norm and head, likewise.
  OuterTensors outer() const;

 private:
  void add(std::string name, std::vector<std::int64_t> shape, bool decay, int layer,
           int split_dim = -1, int split_parts = 1);
  void add_adapters(const ModelConfig& c, const std::string& prefix, int layer);
  void close_group();
  std::vector<ParamTensor> tensors_;
  std::vector<std::size_t> group_begin_;      // size L+3
  std::vector<std::size_t> group_tensor_;     // size L+3
  std::vector<std::size_t> grad_begin_;       // size L+3
  std::vector<std::size_t> trainable_begin_;  // size L+2
  std::size_t group_trainable_ = 0;           // where the open group's adapters start
  bool group_has_adapters_ = false;
  bool has_frozen_ = false;
  std::size_t total_ = 0;
  int tp_size_ = 1;
  std::size_t align_ = 1;
  Arch arch_;
  bool qkv_bias_ = false, o_bias_ = false, mlp_bias_ = false, post_norms_ = false;
  std::uint32_t lora_targets_ = 0;
};

// A block of a local tensor and the box of the canonical tensor it holds. The local tensor is
// viewed as a row-major matrix [rows, cols] (1-D tensors: one row); the block is rows
// [local_row, local_row + rows) x columns [local_col, local_col + cols) of it.
struct CanonicalBox {
  std::vector<std::int64_t> start, count;  // in the canonical tensor, per dimension
  std::int64_t local_row = 0, local_col = 0;
  std::int64_t rows = 1, cols = 1;
  std::int64_t local_cols = 1;  // width of the local tensor (row stride of the block)
  bool contiguous() const { return cols == local_cols; }
};

// The canonical boxes tensor-parallel rank tp_rank holds of `t` (one box when not split).
std::vector<CanonicalBox> canonical_boxes(const ParamTensor& t, int tp_rank);

// Copies the parts of a whole canonical tensor that rank tp_rank holds into its local tensor.
void canonical_to_local(const ParamTensor& t, int tp_rank, const float* canonical, float* local);

}  // namespace saturn
