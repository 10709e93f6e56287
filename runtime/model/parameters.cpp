#include "runtime/model/parameters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "runtime/core/error.hpp"

namespace saturn {

ParameterLayout::ParameterLayout(const ModelConfig& c, int tp_size, std::size_t align)
    : tp_size_(tp_size),
      align_(align < 1 ? 1 : align),
      arch_(c.arch),
      qkv_bias_(c.qkv_bias),
      o_bias_(c.o_bias),
      mlp_bias_(c.mlp_bias),
      post_norms_(c.post_norms),
      lora_targets_(c.lora.enabled() ? c.lora.targets : 0) {
  if (tp_size < 1) throw InputError(fmt::format("tensor-parallel degree {} must be >= 1", tp_size));
  if (c.n_head % tp_size != 0)
    throw InputError(fmt::format(
        "tensor-parallel degree {} must divide n_head ({}): attention heads are split across ranks",
        tp_size, c.n_head));
  if (c.kv_heads() % tp_size != 0)
    throw InputError(fmt::format(
        "tensor-parallel degree {} must divide n_kv_head ({}): key/value heads are split across "
        "ranks (each rank keeps the key/value heads of its query heads)",
        tp_size, c.kv_heads()));
  if (c.ffn_dim() % tp_size != 0)
    throw InputError(
        fmt::format("tensor-parallel degree {} must divide the MLP width d_ff ({}): MLP columns "
                    "are split across ranks",
                    tp_size, c.ffn_dim()));
  const std::int64_t C = c.d_model, V = c.vocab_size, L = c.n_layer;
  // Local widths: attention's (q and its output; d_model but for Gemma) and the MLP's.
  const std::int64_t Cl = static_cast<std::int64_t>(c.q_dim()) / tp_size,
                     Fl = c.ffn_dim() / tp_size;
  const std::int64_t KVl = static_cast<std::int64_t>(c.kv_dim()) / tp_size;
  has_frozen_ = c.lora.enabled();
  group_begin_.push_back(0);
  group_tensor_.push_back(0);
  grad_begin_.push_back(0);
  if (c.arch == Arch::kGpt2) {
    add("transformer.wte.weight", {V, C}, true, -1);
    add("transformer.wpe.weight", {c.max_seq_len, C}, true, -1);
    for (int l = 0; l < L; ++l) {
      close_group();
      const std::string p = fmt::format("transformer.h.{}.", l);
      add(p + "ln_1.weight", {C}, false, l);
      add(p + "ln_1.bias", {C}, false, l);
      // Conv1D weights are [in, out]. Column-parallel: q|k|v output columns of local heads.
      add(p + "attn.c_attn.weight", {C, 3 * Cl}, true, l, 1, 3);
      add(p + "attn.c_attn.bias", {3 * Cl}, false, l, 0, 3);
      // Row-parallel: input rows of local heads; its bias is added once, after the reduction.
      add(p + "attn.c_proj.weight", {Cl, C}, true, l, 0);
      add(p + "attn.c_proj.bias", {C}, false, l);
      add(p + "ln_2.weight", {C}, false, l);
      add(p + "ln_2.bias", {C}, false, l);
      add(p + "mlp.c_fc.weight", {C, Fl}, true, l, 1);
      add(p + "mlp.c_fc.bias", {Fl}, false, l, 0);
      add(p + "mlp.c_proj.weight", {Fl, C}, true, l, 0);
      add(p + "mlp.c_proj.bias", {C}, false, l);
      add_adapters(c, p, l);
    }
    close_group();
    add("transformer.ln_f.weight", {C}, false, static_cast<int>(L));
    add("transformer.ln_f.bias", {C}, false, static_cast<int>(L));
    // lm_head is tied to transformer.wte.weight (not a separate tensor, as in Hugging Face).
  } else {
    add("model.embed_tokens.weight", {V, C}, true, -1);
    for (int l = 0; l < L; ++l) {
      close_group();
      const std::string p = fmt::format("model.layers.{}.", l);
      add(p + "input_layernorm.weight", {C}, false, l);
      // q, k, v are adjacent: together they are one [C + 2·KV, C] nn.Linear weight (one GEMM;
      // KV = n_kv_head·head_dim); with tensor parallelism each holds its local heads' rows,
      // still adjacent.
      add(p + "self_attn.q_proj.weight", {Cl, C}, true, l, 0);
      add(p + "self_attn.k_proj.weight", {KVl, C}, true, l, 0);
      add(p + "self_attn.v_proj.weight", {KVl, C}, true, l, 0);
      if (c.qkv_bias) {  // adjacent too: one [C + 2·KV] bias of the fused GEMM
        add(p + "self_attn.q_proj.bias", {Cl}, false, l, 0);
        add(p + "self_attn.k_proj.bias", {KVl}, false, l, 0);
        add(p + "self_attn.v_proj.bias", {KVl}, false, l, 0);
      }
      add(p + "self_attn.o_proj.weight", {C, Cl}, true, l, 1);
      // Row-parallel outputs' biases are replicated and added once, after the reduction.
      if (c.o_bias) add(p + "self_attn.o_proj.bias", {C}, false, l);
      // LLaMA's MLP input norm; Gemma 2's norm of the attention output, whose MLP input norm is
      // pre_feedforward_layernorm.
      add(p + "post_attention_layernorm.weight", {C}, false, l);
      if (c.post_norms) add(p + "pre_feedforward_layernorm.weight", {C}, false, l);
      add(p + "mlp.gate_proj.weight", {Fl, C}, true, l, 0);
      if (c.mlp_bias) add(p + "mlp.gate_proj.bias", {Fl}, false, l, 0);
      add(p + "mlp.up_proj.weight", {Fl, C}, true, l, 0);
      if (c.mlp_bias) add(p + "mlp.up_proj.bias", {Fl}, false, l, 0);
      add(p + "mlp.down_proj.weight", {C, Fl}, true, l, 1);
      if (c.mlp_bias) add(p + "mlp.down_proj.bias", {C}, false, l);
      if (c.post_norms) add(p + "post_feedforward_layernorm.weight", {C}, false, l);
      add_adapters(c, p, l);
    }
    close_group();
    add("model.norm.weight", {C}, false, static_cast<int>(L));
    // Tied: the head reads model.embed_tokens.weight, as GPT-2's does (no tensor of its own).
    if (!c.tie_embeddings) add("lm_head.weight", {V, C}, true, static_cast<int>(L));
  }
  close_group();
}

void ParameterLayout::add_adapters(const ModelConfig& c, const std::string& prefix, int layer) {
  const std::vector<LoraLinear> linears = lora_linears(c);
  if (linears.empty()) return;
  // The adapters start aligned, so that the group's trainable range maps onto its gradient
  // group (which starts aligned) by a shift.
  total_ = (total_ + align_ - 1) / align_ * align_;
  group_trainable_ = total_;
  group_has_adapters_ = true;
  const std::int64_t r = c.lora.rank;
  for (const LoraLinear& x : linears) {
    const std::int64_t in = x.row_parallel ? x.in / tp_size_ : x.in;
    const std::int64_t out = x.row_parallel ? x.out : x.out / tp_size_;
    // Column-parallel base: B's rows follow the local outputs, A is whole. Row-parallel: A's
    // columns follow the local inputs, B is whole.
    add(prefix + x.module + ".lora_A.weight", {r, in}, true, layer, x.row_parallel ? 1 : -1);
    add(prefix + x.module + ".lora_B.weight", {out, r}, true, layer, x.row_parallel ? -1 : 0,
        x.parts);
    tensors_[tensors_.size() - 2].trainable = true;
    tensors_.back().trainable = true;
  }
}

void ParameterLayout::close_group() {
  const std::size_t begin = group_begin_.back();
  // The next group starts aligned; the gap is padding no tensor covers (kept zero).
  total_ = (total_ + align_ - 1) / align_ * align_;
  // The group's trainable range: all of it, or (LoRA) its adapters, or nothing.
  const std::size_t trainable = !has_frozen_          ? begin
                                : group_has_adapters_ ? group_trainable_
                                                      : total_;
  group_has_adapters_ = false;
  trainable_begin_.push_back(trainable);
  const std::size_t grad_begin = grad_begin_.back();
  for (std::size_t k = group_tensor_.back(); k < tensors_.size(); ++k)
    if (tensors_[k].trainable)
      tensors_[k].grad_offset = grad_begin + (tensors_[k].offset - trainable);
  grad_begin_.push_back(grad_begin + (total_ - trainable));
  group_begin_.push_back(total_);
  group_tensor_.push_back(tensors_.size());
}

void ParameterLayout::add(std::string name, std::vector<std::int64_t> shape, bool decay, int layer,
                          int split_dim, int split_parts) {
  ParamTensor t;
  t.name = std::move(name);
  t.numel = 1;
  for (auto d : shape) t.numel *= static_cast<std::size_t>(d);
  t.canonical_shape = shape;
  if (split_dim >= 0) t.canonical_shape[static_cast<std::size_t>(split_dim)] *= tp_size_;
  t.shape = std::move(shape);
  t.offset = total_;
  t.decay = decay;
  t.layer = layer;
  t.split_dim = split_dim;
  t.split_parts = split_parts;
  t.trainable = !has_frozen_;  // adapters are marked trainable by add_adapters
  total_ += t.numel;
  tensors_.push_back(std::move(t));
}

std::size_t ParameterLayout::max_group_size() const {
  std::size_t m = 0;
  for (int g = -1; g + 1 < num_groups(); ++g) m = std::max(m, group_size(g));
  return m;
}

const ParamTensor& ParameterLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw Error(fmt::format("no parameter named '{}' in this model", name));
}

std::vector<CanonicalBox> canonical_boxes(const ParamTensor& t, int tp_rank) {
  const bool matrix = t.shape.size() == 2;
  const std::int64_t rows = matrix ? t.shape[0] : 1;
  const std::int64_t cols = matrix ? t.shape[1] : t.shape[0];
  std::vector<CanonicalBox> boxes;
  auto box = [&](std::int64_t lr, std::int64_t lc, std::int64_t nr, std::int64_t nc,
                 std::int64_t cr, std::int64_t cc) {
    CanonicalBox b;
    b.local_row = lr;
    b.local_col = lc;
    b.rows = nr;
    b.cols = nc;
    b.local_cols = cols;
    if (matrix) {
      b.start = {cr, cc};
      b.count = {nr, nc};
    } else {
      b.start = {cc};
      b.count = {nc};
    }
    boxes.push_back(std::move(b));
  };
  if (t.split_dim < 0 || t.canonical_shape == t.shape) {
    box(0, 0, rows, cols, 0, 0);
    return boxes;
  }
  const int k = t.split_parts;
  // The split dimension in the [rows, cols] view: matrices split rows (dim 0) or columns
  // (dim 1); vectors split their only dimension, which the view holds as columns.
  const bool split_rows = matrix && t.split_dim == 0;
  const std::int64_t local_len = split_rows ? rows : cols;
  const std::int64_t canon_len = split_rows ? t.canonical_shape[0] : t.canonical_shape.back();
  const std::int64_t part_local = local_len / k, part_canon = canon_len / k;
  for (int j = 0; j < k; ++j) {
    const std::int64_t c0 = j * part_canon + tp_rank * part_local, l0 = j * part_local;
    if (split_rows)
      box(l0, 0, part_local, cols, c0, 0);
    else
      box(0, l0, rows, part_local, 0, c0);
  }
  return boxes;
}

void canonical_to_local(const ParamTensor& t, int tp_rank, const float* canonical, float* local) {
  const std::int64_t canon_cols =
      t.canonical_shape.size() == 2 ? t.canonical_shape[1] : t.canonical_shape[0];
  for (const auto& b : canonical_boxes(t, tp_rank)) {
    const std::int64_t cr = b.start.size() == 2 ? b.start[0] : 0;
    const std::int64_t cc = b.start.back();
    for (std::int64_t r = 0; r < b.rows; ++r)
      std::memcpy(local + (b.local_row + r) * b.local_cols + b.local_col,
                  canonical + (cr + r) * canon_cols + cc,
                  static_cast<std::size_t>(b.cols) * sizeof(float));
  }
}

BlockTensors ParameterLayout::block(int l) const {
  const ParamTensor* t = tensors_.data() + group_first_tensor(l);
  BlockTensors b{};
  if (arch_ == Arch::kGpt2) {
    b.ln1w = &t[0];
    b.ln1b = &t[1];
    b.qkvw = &t[2];
    b.qkvb = &t[3];
    b.projw = &t[4];
    b.projb = &t[5];
    b.ln2w = &t[6];
    b.ln2b = &t[7];
    b.fcw = &t[8];
    b.fcb = &t[9];
    b.fcprojw = &t[10];
    b.fcprojb = &t[11];
  } else {
    // In the order the constructor adds them; the optional biases only when configured.
    const ParamTensor* next = t;
    auto take = [&next] { return next++; };
    auto maybe = [&next](bool present) -> const ParamTensor* { return present ? next++ : nullptr; };
    b.ln1w = take();
    b.qkvw = take();  // q_proj, k_proj, v_proj adjacent: one [C + 2·KV, C] weight
    next += 2;
    b.qkvb = maybe(qkv_bias_);  // q, k, v biases adjacent likewise
    if (qkv_bias_) next += 2;
    b.projw = take();
    b.projb = maybe(o_bias_);
    b.post_attnw = maybe(post_norms_);
    b.ln2w = take();
    b.gatew = take();
    b.gateb = maybe(mlp_bias_);
    b.upw = take();
    b.upb = maybe(mlp_bias_);
    b.downw = take();
    b.downb = maybe(mlp_bias_);
    b.post_mlpw = maybe(post_norms_);
  }
  // The adapters close the group, an A and a B per target in LoraTarget order (lora_linears').
  const auto adapters = static_cast<std::size_t>(2 * std::popcount(lora_targets_));
  const ParamTensor* next = tensors_.data() + group_last_tensor(l) - adapters;
  for (int i = 0; i < 10; ++i)
    if ((lora_targets_ & (1u << i)) != 0) {
      b.lora[i] = {next, next + 1};
      next += 2;
    }
  return b;
}

int BlockTensors::lora_index(LoraTarget t) {
  const auto bits = static_cast<std::uint32_t>(t);
  int i = 0;
  while ((bits >> i) != 1u) ++i;
  return i;
}

OuterTensors ParameterLayout::outer() const {
  const int last = num_groups() - 2;  // the final norm and head's group
  const ParamTensor* emb = tensors_.data() + group_first_tensor(-1);
  const ParamTensor* fin = tensors_.data() + group_first_tensor(last);
  const std::size_t n_fin = group_last_tensor(last) - group_first_tensor(last);
  OuterTensors o{};
  o.token_embedding = &emb[0];
  o.final_norm_weight = &fin[0];
  if (arch_ == Arch::kGpt2) {
    o.position_embedding = &emb[1];
    o.final_norm_bias = &fin[1];
    o.head = &emb[0];  // always tied
  } else {
    o.head = n_fin > 1 ? &fin[1] : &emb[0];  // no lm_head.weight when tied
  }
  return o;
}

}  // namespace saturn
