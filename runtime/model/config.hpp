// Model and training hyper-parameters of one job, as the workload file gives them.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/backend/attention_params.hpp"
#include "runtime/backend/rotary.hpp"
#include "runtime/model/lora.hpp"

namespace saturn {

// The largest model shapes Saturn accepts, however a shape arrives (a workload's `models:`, a
// Hugging Face config.json through `from:` or `saturn ckpt import`, a checkpoint's attributes):
// ModelConfig::validate checks them before anything is sized from the shape, so that a hostile
// config.json (n_layer 10^9) is refused at once instead of growing memory until killed.
namespace model_limits {
inline constexpr std::int64_t kLayers = 256;
inline constexpr std::int64_t kDModel = 65536;  // also bounds the head counts
inline constexpr std::int64_t kDff = 262144;
inline constexpr std::int64_t kVocab = 1 << 24;
inline constexpr std::int64_t kPositions = 1 << 20;  // max_seq_len (a model's position count)
inline constexpr double kParameters = 1e12;
}  // namespace model_limits

// The gate of the llama MLP: SwiGLU (silu, LLaMA and most) or GeGLU (tanh GELU, Gemma).
enum class GatedActivation { kSilu, kGeluTanh };

enum class Arch {
  kGpt2,   // LayerNorm, GELU (tanh), learned positions, tied embeddings, biases
  kLlama,  // RMSNorm, SwiGLU, rotary positions, grouped-query attention, head tied or not,
           // no biases
};

struct ModelConfig {
  Arch arch = Arch::kGpt2;
  int n_layer = 4;
  int n_head = 4;
  // Key/value heads (grouped-query attention: query head h reads kv head h / (n_head /
  // n_kv_head)); 0 means n_head. gpt2 has n_head of each.
  int n_kv_head = 0;
  int d_model = 256;
  int d_ff = 0;           // 0: 4*d_model (gpt2); llama needs it given or uses 8/3*d_model rounded
  int vocab_size = 256;   // byte tokenizer
  int max_seq_len = 128;  // positions (gpt2 wpe rows); rotary needs no table
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // llama: the head reads model.embed_tokens.weight (no lm_head.weight tensor). gpt2 is always
  // tied, whatever this says (tied() is what the engine asks).
  bool tie_embeddings = false;
  // llama variants (Mistral, Qwen2, LLaMA's attention_bias and mlp_bias): biases on the q, k
  // and v projections, on the attention output projection, and on the three MLP projections.
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  // Sliding-window causal attention (Mistral): query i sees keys i - sliding_window < j <= i.
  // 0: every earlier key (plain causal).
  int sliding_window = 0;
  // nn.Embedding's padding_idx (transformers gives the llama family's embedding the config's
  // pad_token_id): that row of the token embedding gets no gradient from the lookup (a tied
  // head's gradient still reaches it). -1: none.
  int padding_idx = -1;
  // Gemma: GeGLU, RMSNorm weights applied as (1 + w), the embeddings scaled by sqrt(d_model)
  // (rounded to float32, as transformers does), and a head width of its own.
  GatedActivation mlp_activation = GatedActivation::kSilu;
  bool norm_unit_offset = false;
  bool scale_embeddings = false;
  int head_size = 0;  // a head's width; 0: d_model / n_head
  // Gemma 2: the sliding window on even layers only (odd layers see every earlier key); the
  // attention scores scaled by query_pre_attn_scalar^-0.5 (0: by 1/sqrt(head_dim)) and
  // soft-capped (attn_softcap * tanh(s / attn_softcap); 0: none); the logits likewise
  // (final_softcap); and norms after attention and after the MLP (post_norms: RMSNorm of each
  // branch's output before it joins the residual).
  bool alternate_window = false;
  float query_pre_attn_scalar = 0.0f;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  bool post_norms = false;
  // Rotary scaling (Llama 3.1/3.2's llama3, linear); kNone: plain rotary with rope_theta.
  RopeScalingKind rope_scaling = RopeScalingKind::kNone;
  float rope_factor = 1.0f;
  float rope_low_freq_factor = 1.0f;
  float rope_high_freq_factor = 4.0f;
  int rope_original_max_positions = 8192;
  // Low-rank adapters (model/lora.hpp): with lora.rank > 0 only the adapters train and every
  // other tensor is frozen.
  LoraConfig lora;
  // The Hugging Face class this model exports as (MistralForCausalLM, Qwen2ForCausalLM, ...);
  // empty: the one the fields above imply (hf/hf_model.cpp). Computes nothing.
  std::string hf_architecture;
  // config.json fields of the model it was imported from that the engine does not compute
  // (dropouts, initializer_range, token ids, ...), as a JSON object's text: written back on
  // export, so that a model continued in transformers keeps them. Computes nothing.
  std::string hf_extra_fields;

  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  // The model without its adapters: what a LoRA job's base is (a Hugging Face directory holds,
  // an export merges into).
  ModelConfig base_model() const {
    ModelConfig c = *this;
    c.lora = {};
    return c;
  }
  int q_dim() const { return n_head * head_dim(); }  // width of q (and of attention's output)
  float norm_offset() const { return norm_unit_offset ? 1.0f : 0.0f; }
  float embedding_scale() const;  // sqrt(d_model) as float32 with scale_embeddings, else 1
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int kv_dim() const { return kv_heads() * head_dim(); }  // width of k (and of v)
  bool tied() const { return arch == Arch::kGpt2 || tie_embeddings; }
  int ffn_dim() const;          // d_ff resolved
  RotaryParams rotary() const;  // rope_theta and the scaling, as the rotary ops take them
  // Layer `layer`'s attention: its window (alternate_window: even layers only), score scale and
  // softcap, as the attention ops take them.
  AttentionParams attention(int layer) const;
  int window(int layer) const { return alternate_window && layer % 2 != 0 ? 0 : sliding_window; }
  // Throws InputError naming the field when the shape is impossible or beyond model_limits
  // (what is valid, too).
  void validate() const;
  // After validate(), once max_seq_len is final (a workload's job sizes GPT-2's position table
  // by its seq_len): InputError when the model has more than model_limits::kParameters.
  void check_parameters() const;
  std::int64_t num_parameters() const;      // the base model's (adapters excluded)
  std::int64_t adapter_parameters() const;  // the adapters' (0 without lora)
};

struct OptimizerConfig {
  std::string type = "adamw";
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // global-norm clip; 0 disables
};

struct ScheduleConfig {
  std::int64_t warmup = 0;       // linear warmup steps
  std::string decay = "cosine";  // cosine | linear | constant | hf_cosine | hf_linear
  double min_lr_ratio = 0.1;     // final lr = lr * min_lr_ratio
};

// Everything that defines how one job trains (model shape excluded).
// `early_stop:` of a job (docs/workload.md, "early_stop"): `saturn run` stops a job whose loss
// diverged, or whose val_loss stopped improving, at that step boundary. Off by default.
struct EarlyStopConfig {
  bool diverged = false;      // a non-finite loss, or one past kDivergenceFactor x the first
  std::int64_t patience = 0;  // evaluations without a new best val_loss; 0: off
  // A loss (training or validation) above this multiple of the job's first training loss has
  // diverged.
  static constexpr double kDivergenceFactor = 2.0;
  bool enabled() const { return diverged || patience > 0; }
};

// `packing:` of a job (docs/workload.md, "Instruction data"): how records packed one after
// another in the token stream see each other.
struct PackingConfig {
  // true: causal attention across records within a window (as text). false: each record
  // attends only to itself and its positions restart at 0 (needs the data's record starts).
  bool cross_attention = true;
};

struct TrainConfig {
  std::int64_t batch_size = 16;       // global batch in sequences per optimizer step
  std::int64_t micro_batch_size = 0;  // 0: chosen by the runtime (memory permitting)
  int seq_len = 128;
  std::int64_t steps = 100;
  std::int64_t eval_every = 0;        // 0: only at the end
  std::int64_t eval_batches = 4;      // micro-batches of validation data per evaluation
  std::int64_t checkpoint_every = 0;  // 0: only final.h5
  std::uint64_t seed = 1234;
  // Bit-identical results under every strategy, degree and micro-batch split (see
  // docs/strategies.md, "Reproducible mode"): fixed canonical micro-batches, gradients summed in
  // fp64, no tensor parallelism.
  bool reproducible = false;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  EarlyStopConfig early_stop;
  PackingConfig packing;
};

// Reproducible mode's canonical micro-batch: every configuration processes the global batch as
// the micro-batches of rows [k·c, (k+1)·c). c is micro_batch_size when set, else the largest
// divisor of batch_size that is at most 8 and leaves at least 8 micro-batches (1 for batches
// under 16), so that data-parallel degrees dividing the micro-batch count (up to 8) fit. It
// depends on the batch only, never on the degree.
std::int64_t canonical_micro_batch(const TrainConfig& train);

// Validation rows per evaluation: eval_batches batches of micro_batch_size rows, else of the
// largest divisor of batch_size that is at most 8 — also for reproducible jobs, whose smaller
// canonical micro-batch would otherwise shrink the sample, so that val losses of one sweep
// compare.
std::int64_t eval_rows(const TrainConfig& train);

const char* arch_name(Arch a);
const char* rope_scaling_name(RopeScalingKind k);  // none | linear | llama3
// Throws InputError for an unknown name (lists the valid ones).
RopeScalingKind parse_rope_scaling(const std::string& name);
// Throws InputError for an unknown name (lists the valid ones).
Arch parse_arch(const std::string& name);

}  // namespace saturn
