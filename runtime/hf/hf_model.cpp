#include "runtime/hf/hf_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "runtime/core/error.hpp"
#include "runtime/core/json_file.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::hf {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr const char* kGpt2Arch = "GPT2LMHeadModel";
constexpr const char* kLlamaArch = "LlamaForCausalLM";
constexpr const char* kMistralArch = "MistralForCausalLM";
constexpr const char* kQwen2Arch = "Qwen2ForCausalLM";
constexpr const char* kPhi3Arch = "Phi3ForCausalLM";
constexpr const char* kGemmaArch = "GemmaForCausalLM";
constexpr const char* kGemma2Arch = "Gemma2ForCausalLM";
constexpr std::uint64_t kMaxConfigBytes = 16u << 20;

// A float32 as the shortest decimal that reads back as the same float (1e-5f -> 1e-05, not
// 9.99999974737875e-06), so that config.json says what the user meant and round-trips.
double shortest(float f) {
  return std::strtod(fmt::format("{}", f).c_str(), nullptr);
}

// Typed access to config.json's fields with messages "FILE: FIELD: ...".
class ConfigReader {
 public:
  ConfigReader(const fs::path& file, const json& j) : file_(file.string()), j_(j) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw InputError(fmt::format("{}: {}: {}", file_, key, what));
  }
  bool has(const std::string& key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  bool contains(const std::string& key) const { return j_.contains(key); }  // null included
  const std::string& file() const { return file_; }
  const json& at(const std::string& key) const { return j_.at(key); }

  int integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    if (!has(key)) fail(key, "missing (the model's shape needs it)");
    return integer_value(key, lo, hi);
  }
  int integer_or(const std::string& key, int dflt, std::int64_t lo, std::int64_t hi) const {
    return has(key) ? integer_value(key, lo, hi) : dflt;
  }
  double number(const std::string& key) const {
    if (!has(key)) fail(key, "missing (a number > 0)");
    return number_or(key, 0.0);
  }
  double number_or(const std::string& key, double dflt) const {
    if (!has(key)) return dflt;
    const json& v = j_.at(key);
    if (!v.is_number()) fail(key, fmt::format("expected a number, got {}", v.dump()));
    const double d = v.get<double>();
    if (!(d > 0) || d > 1e12) fail(key, fmt::format("{} is out of range (valid: > 0)", v.dump()));
    return d;
  }
  bool boolean_or(const std::string& key, bool dflt) const {
    if (!has(key)) return dflt;
    if (!j_.at(key).is_boolean())
      fail(key, fmt::format("expected true or false, got {}", j_.at(key).dump()));
    return j_.at(key).get<bool>();
  }
  std::string string_or(const std::string& key, const std::string& dflt) const {
    if (!has(key)) return dflt;
    if (!j_.at(key).is_string())
      fail(key, fmt::format("expected a string, got {}", j_.at(key).dump()));
    return j_.at(key).get<std::string>();
  }
  // A field whose only value the engine implements is `want` (absent: transformers' default,
  // `dflt`).
  void require_bool(const std::string& key, bool dflt, bool want, const std::string& why) const {
    if (boolean_or(key, dflt) != want)
      fail(key,
           fmt::format("{} is not implemented by the engine ({}; valid: {})", !want, why, want));
  }

 private:
  int integer_value(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    const json& v = j_.at(key);
    if (!v.is_number_integer()) fail(key, fmt::format("expected an integer, got {}", v.dump()));
    const std::int64_t n = v.get<std::int64_t>();
    if (n < lo || n > hi) fail(key, fmt::format("{} is out of range (valid: {}..{})", n, lo, hi));
    return static_cast<int>(n);
  }
  std::string file_;
  const json& j_;
};

}  // namespace

namespace {

// The Hugging Face classes the engine computes, and the model_type each config.json says.
// transformers 4.44's defaults for the fields a config.json may leave out (save_pretrained
// writes them all; a hand-written file may not): the position count, the norm epsilon, the
// key/value heads (0: as many as the query heads), the pad token (-1: none) and the tied head.
struct FamilyDefaults {
  int positions = 2048;
  double rms_norm_eps = 1e-6;
  int kv_heads = 0;
  int pad_token_id = -1;
  bool tied = false;
};
struct Family {
  const char* architecture;
  const char* model_type;
  Arch arch;
  FamilyDefaults defaults;
};
constexpr Family kFamilies[] = {
    {kGpt2Arch, "gpt2", Arch::kGpt2, {}},
    {"GPT2Model", "gpt2", Arch::kGpt2, {}},  // the bare model's files: its head is the embedding
    {kLlamaArch, "llama", Arch::kLlama, {2048, 1e-6, 0, -1, false}},
    {kMistralArch, "mistral", Arch::kLlama, {131072, 1e-6, 8, -1, false}},
    {kQwen2Arch, "qwen2", Arch::kLlama, {32768, 1e-6, 32, -1, false}},
    {kPhi3Arch, "phi3", Arch::kLlama, {4096, 1e-5, 0, 32000, false}},
    {kGemmaArch, "gemma", Arch::kLlama, {8192, 1e-6, 16, 0, true}},
    {kGemma2Arch, "gemma2", Arch::kLlama, {8192, 1e-6, 16, 0, true}},
};
constexpr const char* kValidFamilies =
    "GPT2LMHeadModel, GPT2Model, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
    "Phi3ForCausalLM, GemmaForCausalLM or Gemma2ForCausalLM";
// Rebuilt by the export for what it writes (a model's remote code is not copied with it).
constexpr const char* kDroppedFields[] = {"auto_map"};

const Family& family_of(const ConfigReader& r) {
  if (r.has("architectures")) {
    const json& a = r.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      r.fail("architectures", fmt::format("expected one architecture, got {} (valid: {})", a.dump(),
                                          kValidFamilies));
    const std::string name = a[0].get<std::string>();
    for (const Family& f : kFamilies)
      if (name == f.architecture) return f;
    r.fail("architectures", fmt::format("{} is not supported (valid: {})", name, kValidFamilies));
  }
  const std::string type = r.string_or("model_type", "");
  for (const Family& f : kFamilies)
    if (type == f.model_type) return f;
  r.fail("model_type", fmt::format("'{}' with no `architectures` (valid: gpt2, llama, mistral, "
                                   "qwen2, phi3, gemma or gemma2)",
                                   type));
}

void read_gpt2(const ConfigReader& r, HfModel& out) {
  using namespace model_limits;
  ModelConfig& m = out.model;
  m.arch = Arch::kGpt2;
  out.field_names = {{"arch", "architectures"},
                     {"n_layer", "n_layer"},
                     {"n_head", "n_head"},
                     {"n_kv_head", "n_head"},
                     {"tie_embeddings", "tie_word_embeddings"},
                     {"d_model", "n_embd"},
                     {"d_ff", "n_inner"},
                     {"vocab_size", "vocab_size"},
                     {"norm_eps", "layer_norm_epsilon"},
                     {"max_seq_len", "n_positions"}};
  m.vocab_size = r.integer("vocab_size", 2, kVocab);
  m.d_model = r.integer("n_embd", 1, kDModel);
  m.n_layer = r.integer("n_layer", 1, kLayers);
  m.n_head = r.integer("n_head", 1, kDModel);
  m.n_kv_head = m.n_head;
  m.tie_embeddings = true;
  m.max_seq_len = r.integer("n_positions", 1, kPositions);
  m.d_ff = r.integer_or("n_inner", 4 * m.d_model, 1, kDff);
  m.norm_eps = static_cast<float>(r.number_or("layer_norm_epsilon", 1e-5));
  const std::string act = r.string_or("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh")
    r.fail("activation_function",
           fmt::format("'{}' is not implemented by the engine (valid: gelu_new or "
                       "gelu_pytorch_tanh, the tanh approximation of GELU)",
                       act));
  r.require_bool("tie_word_embeddings", true, true, "GPT-2's head is its token embedding");
  r.require_bool("scale_attn_weights", true, true,
                 "attention scores are scaled by 1/sqrt(head_dim)");
  r.require_bool("scale_attn_by_inverse_layer_idx", false, false, "no per-layer scaling");
  r.require_bool("add_cross_attention", false, false, "a decoder-only model");
}

// rope_scaling of a LLaMA config: null or default (plain), linear, llama3 (Llama 3.1, 3.2).
void read_rope_scaling(const ConfigReader& r, ModelConfig& m) {
  if (!r.has("rope_scaling")) return;
  const json& s = r.at("rope_scaling");
  const std::string valid =
      "valid: null, {\"rope_type\": \"default\"}, {\"rope_type\": \"linear\", \"factor\": F} or "
      "{\"rope_type\": \"llama3\", \"factor\", \"low_freq_factor\", \"high_freq_factor\", "
      "\"original_max_position_embeddings\"}";
  if (!s.is_object())
    r.fail("rope_scaling", fmt::format("{} is not an object ({})", s.dump(), valid));
  const ConfigReader sr(fs::path(r.file() + ": rope_scaling"), s);
  // transformers reads `rope_type`, and the older `type` when it is absent.
  const std::string type =
      sr.has("rope_type") ? sr.string_or("rope_type", "") : sr.string_or("type", "");
  if (type == "default") return;
  if (type != "linear" && type != "llama3")
    r.fail("rope_scaling",
           fmt::format("rope_type '{}' is not implemented by the engine ({})", type, valid));
  m.rope_scaling = parse_rope_scaling(type);
  m.rope_factor = static_cast<float>(sr.number("factor"));
  if (m.rope_scaling == RopeScalingKind::kLlama3) {
    m.rope_low_freq_factor = static_cast<float>(sr.number("low_freq_factor"));
    m.rope_high_freq_factor = static_cast<float>(sr.number("high_freq_factor"));
    m.rope_original_max_positions =
        sr.integer("original_max_position_embeddings", 1, model_limits::kPositions);
  }
  for (const auto& [key, value] : s.items())
    if (key != "rope_type" && key != "type" && key != "factor" &&
        (m.rope_scaling == RopeScalingKind::kLinear ||
         (key != "low_freq_factor" && key != "high_freq_factor" &&
          key != "original_max_position_embeddings")))
      sr.fail(key, fmt::format("{} is not a field of rope_type {} the engine computes (valid: {})",
                               value.dump(), type,
                               m.rope_scaling == RopeScalingKind::kLinear
                                   ? "factor"
                                   : "factor, low_freq_factor, high_freq_factor, "
                                     "original_max_position_embeddings"));
}

// Gemma 2's own: the sliding window on even layers, the scores' scale, soft-capping of scores and
// logits (Gemma2Config's defaults when absent; null turns a cap off), and the post-norms.
void read_gemma2(const ConfigReader& r, ModelConfig& m) {
  using namespace model_limits;
  if (r.contains("sliding_window") && !r.has("sliding_window"))
    r.fail("sliding_window",
           "null, which transformers 4.44's Gemma 2 cannot compute (valid: the "
           "window of its even layers, default 4096)");
  m.sliding_window = r.integer_or("sliding_window", 4096, 1, kPositions);
  m.alternate_window = true;
  if (r.contains("query_pre_attn_scalar") && !r.has("query_pre_attn_scalar"))
    r.fail("query_pre_attn_scalar",
           "null (valid: a number > 0; the scores are scaled by its "
           "inverse square root)");
  const auto positive = [&](const char* key, double dflt) {
    const double v = r.number_or(key, dflt);
    // Checked as the float the engine computes with (a tiny value would round to 0: none).
    if (!(static_cast<float>(v) > 0 && v <= 1e6))
      r.fail(key, fmt::format("{} is out of range (valid: 0 < x <= 1e6)", v));
    return static_cast<float>(v);
  };
  m.query_pre_attn_scalar = positive("query_pre_attn_scalar", 224.0);
  const auto softcap = [&](const char* key, double dflt) {
    if (r.contains(key) && !r.has(key)) return 0.0f;  // null: no capping
    return positive(key, dflt);
  };
  m.attn_softcap = softcap("attn_logit_softcapping", 50.0);
  m.final_softcap = softcap("final_logit_softcapping", 30.0);
  m.post_norms = true;
}

// What sets the families apart beyond the shape: biases, the sliding window, rotary scaling.
void read_family_switches(const ConfigReader& r, const std::string& arch, ModelConfig& m) {
  using namespace model_limits;
  if (arch == kGemma2Arch) read_gemma2(r, m);
  if (arch == kLlamaArch || arch == kGemmaArch || arch == kGemma2Arch) {
    if (arch == kLlamaArch) read_rope_scaling(r, m);
    // attention_bias: q, k, v and o projections; mlp_bias (LLaMA's only): gate, up and down.
    m.qkv_bias = m.o_bias = r.boolean_or("attention_bias", false);
    if (arch == kLlamaArch) m.mlp_bias = r.boolean_or("mlp_bias", false);
  } else if (arch == kMistralArch) {
    // MistralConfig's default window is 4096; null turns it off.
    m.sliding_window = r.has("sliding_window")        ? r.integer("sliding_window", 1, kPositions)
                       : r.contains("sliding_window") ? 0
                                                      : 4096;
  } else if (arch == kPhi3Arch) {
    // Phi-3's sliding_window: transformers 4.44 applies it only under flash_attention_2 (as
    // W + 1 keys); its default attention (eager, sdpa) sees every earlier key, and so does the
    // engine. The field is kept as it came for the export (extra_fields).
  } else {  // Qwen2
    m.qkv_bias = true;
    r.require_bool("use_sliding_window", false, false,
                   "transformers 4.44 computes Qwen2's sliding window only under "
                   "flash_attention_2, and the engine not at all");
  }
  if (arch == kPhi3Arch && r.has("rope_scaling"))
    r.fail("rope_scaling", fmt::format("{} is not implemented by the engine (Phi-3's su/longrope "
                                       "scaling; valid: null)",
                                       r.at("rope_scaling").dump()));
  if (arch != kLlamaArch && r.has("rope_scaling"))
    r.fail("rope_scaling", fmt::format("{} is not read by transformers' {} (valid: null)",
                                       r.at("rope_scaling").dump(), arch));
}

// The LLaMA family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM,
// GemmaForCausalLM, Gemma2ForCausalLM): one engine architecture (RMSNorm, gated MLP, rotary,
// grouped-query attention) with each family's switches.
void read_llama_family(const ConfigReader& r, const Family& family, HfModel& out) {
  using namespace model_limits;
  ModelConfig& m = out.model;
  m.arch = Arch::kLlama;
  out.field_names = {{"arch", "architectures"},
                     {"n_layer", "num_hidden_layers"},
                     {"n_head", "num_attention_heads"},
                     {"n_kv_head", "num_key_value_heads"},
                     {"tie_embeddings", "tie_word_embeddings"},
                     {"d_model", "hidden_size"},
                     {"d_ff", "intermediate_size"},
                     {"vocab_size", "vocab_size"},
                     {"norm_eps", "rms_norm_eps"},
                     {"rope_theta", "rope_theta"},
                     {"max_seq_len", "max_position_embeddings"},
                     {"sliding_window", "sliding_window"},
                     {"query_pre_attn_scalar", "query_pre_attn_scalar"},
                     {"attn_softcap", "attn_logit_softcapping"},
                     {"final_softcap", "final_logit_softcapping"}};
  const std::string arch = family.architecture;
  m.vocab_size = r.integer("vocab_size", 2, kVocab);
  m.d_model = r.integer("hidden_size", 1, kDModel);
  m.d_ff = r.integer("intermediate_size", 1, kDff);
  m.n_layer = r.integer("num_hidden_layers", 1, kLayers);
  m.n_head = r.integer("num_attention_heads", 1, kDModel);
  const FamilyDefaults& dflt = family.defaults;
  m.max_seq_len = r.integer_or("max_position_embeddings", dflt.positions, 1, kPositions);
  m.norm_eps = static_cast<float>(r.number_or("rms_norm_eps", dflt.rms_norm_eps));
  m.rope_theta = static_cast<float>(r.number_or("rope_theta", 10000.0));
  // Grouped-query attention: any divisor of the query heads.
  m.n_kv_head =
      r.integer_or("num_key_value_heads", dflt.kv_heads > 0 ? dflt.kv_heads : m.n_head, 1, kDModel);
  if (m.n_head % m.n_kv_head != 0)
    r.fail("num_key_value_heads",
           fmt::format("{} does not divide num_attention_heads {} (valid: a divisor of it; each "
                       "key/value head serves an equal group of query heads)",
                       m.n_kv_head, m.n_head));
  const bool gemma = arch == kGemmaArch || arch == kGemma2Arch;
  if (gemma) {
    // A head width of its own (GemmaConfig's and Gemma2Config's default 256), not hidden_size /
    // heads.
    m.head_size = r.integer_or("head_dim", 256, 1, kDModel);
  } else if (arch == kMistralArch && r.has("head_dim")) {
    // MistralAttention reads head_dim (Mistral NeMo: 128 with 5120 / 32); kept only when it is
    // not the quotient, so that other models' configurations stay as they were.
    const int hd = r.integer("head_dim", 1, kDModel);
    if (m.d_model % m.n_head != 0 || hd != m.d_model / m.n_head) m.head_size = hd;
  } else if (r.has("head_dim") && arch != kPhi3Arch && m.d_model % m.n_head == 0) {
    const int hd = r.integer("head_dim", 1, kDModel);
    if (hd != m.d_model / m.n_head)
      r.fail("head_dim", fmt::format("{} is not hidden_size / num_attention_heads, which the "
                                     "engine computes for {} (valid: {})",
                                     hd, arch, m.d_model / m.n_head));
  }
  if (gemma) {
    // GeGLU with tanh GELU: transformers 4.44 reads hidden_activation (null: the tanh GELU) and
    // ignores hidden_act. RMSNorm weights apply as (1 + w); embeddings are scaled by sqrt(d).
    const std::string act = r.string_or("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh")
      r.fail("hidden_activation",
             fmt::format("'{}' is not implemented by the engine for Gemma (valid: "
                         "gelu_pytorch_tanh, or null)",
                         act));
    m.mlp_activation = GatedActivation::kGeluTanh;
    m.norm_unit_offset = true;
    m.scale_embeddings = true;
  } else {
    const std::string act = r.string_or("hidden_act", "silu");
    if (act != "silu")
      r.fail("hidden_act", fmt::format("'{}' is not implemented by the engine (valid: silu)", act));
  }
  m.tie_embeddings = r.boolean_or("tie_word_embeddings", dflt.tied);
  // Their embedding is nn.Embedding(vocab, hidden, padding_idx=pad_token_id): that row gets no
  // gradient from the lookup. (The field is also kept as it came, for the export.)
  // A negative id counts from the end, as torch's padding_idx does.
  if (r.has("pad_token_id")) {
    const int pad = r.integer("pad_token_id", -m.vocab_size, m.vocab_size - 1);
    m.padding_idx = pad < 0 ? m.vocab_size + pad : pad;
  } else if (!r.contains("pad_token_id") && dflt.pad_token_id >= 0) {
    if (dflt.pad_token_id >= m.vocab_size)
      r.fail("pad_token_id", fmt::format("absent, and {}'s default {} is outside the vocabulary "
                                         "of {} (valid: a token id, or null)",
                                         arch, dflt.pad_token_id, m.vocab_size));
    m.padding_idx = dflt.pad_token_id;
  }
  read_family_switches(r, arch, m);
}

// The config.json fields the engine computes from (read above, or written by config_json with
// the value the engine assumes), besides transformers' bookkeeping: everything else is the
// origin's to keep (dropouts, initializer_range, token ids, ...).
bool engine_field(const std::string& key) {
  static const std::set<std::string> kEngine = {
      // bookkeeping: written by the export itself
      "architectures", "model_type", "transformers_version", "_name_or_path", "torch_dtype",
      // GPT-2
      "vocab_size", "n_positions", "n_embd", "n_layer", "n_head", "n_inner", "activation_function",
      "layer_norm_epsilon", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
      "reorder_and_upcast_attn", "add_cross_attention", "tie_word_embeddings",
      // the LLaMA family
      "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
      "num_key_value_heads", "head_dim", "hidden_act", "max_position_embeddings", "rms_norm_eps",
      "rope_theta", "rope_scaling", "attention_bias", "mlp_bias", "sliding_window",
      "use_sliding_window", "hidden_activation",
      // Gemma 2
      "query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"};
  return kEngine.count(key) != 0;
}

// config.json fields the export writes back as they came (ModelConfig::hf_extra_fields).
constexpr std::size_t kMaxExtraFieldsBytes = 16u << 10;

std::string extra_fields(const ConfigReader& r, const json& j, const std::string& architecture) {
  json extra = json::object();
  for (const auto& [key, value] : j.items()) {
    const bool dropped = std::find(std::begin(kDroppedFields), std::end(kDroppedFields), key) !=
                         std::end(kDroppedFields);
    // Phi-3's window is not computed (read_llama_family): kept as it came.
    const bool phi3_window = architecture == kPhi3Arch && key == "sliding_window";
    if (!dropped && (!engine_field(key) || phi3_window)) extra[key] = value;
  }
  std::string text = extra.dump();
  if (text.size() > kMaxExtraFieldsBytes)
    r.fail("(fields the engine does not compute)",
           fmt::format("{} bytes of them, more than the {} a checkpoint keeps (valid: a "
                       "model's configuration, not data)",
                       text.size(), kMaxExtraFieldsBytes));
  return text;
}

}  // namespace

HfModel read_config(const fs::path& dir) {
  HfModel out;
  out.config_file = dir / "config.json";
  const std::string file = out.config_file.string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw InputError(
        fmt::format("{} is not a directory (expected a Hugging Face model directory "
                    "with config.json and model.safetensors)",
                    dir.string()));
  // A config.json is a few kilobytes; a larger one is not a model's configuration.
  const json j = read_json_file(out.config_file, kMaxConfigBytes);
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", file));
  const ConfigReader r(out.config_file, j);

  // The family: `architectures` when given, else `model_type`; both must agree.
  const Family& family = family_of(r);
  out.architecture = family.architecture;
  const std::string type = r.string_or("model_type", "");
  if (!type.empty() && type != family.model_type)
    r.fail("model_type", fmt::format("'{}' does not match architectures {} (valid: {})", type,
                                     out.architecture, family.model_type));
  // Saturn's limits (model_limits) are checked field by field before any size is derived from
  // them (4 * n_embd, the layout), so that the message names config.json's own field.
  if (family.arch == Arch::kGpt2)
    read_gpt2(r, out);
  else
    read_llama_family(r, family, out);
  ModelConfig& m = out.model;
  // A directory saved from GPT2Model exports as the model with its head, which is what
  // transformers' AutoModelForCausalLM makes of it.
  m.hf_architecture = out.architecture == std::string("GPT2Model") ? kGpt2Arch : out.architecture;
  m.hf_extra_fields = extra_fields(r, j, out.architecture);
  try {
    m.validate();
    m.check_parameters();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
  return out;
}

namespace {

// The class an export writes: the origin's, else the one the engine's switches imply. Throws
// InputError when that class cannot express the model.
std::string export_architecture(const ModelConfig& m) {
  if (m.arch == Arch::kGpt2) return kGpt2Arch;
  std::string a = m.hf_architecture;
  const bool gemma_switches =
      m.mlp_activation != GatedActivation::kSilu || m.norm_unit_offset || m.scale_embeddings;
  const bool gemma2_switches = m.post_norms || m.alternate_window || m.attn_softcap > 0 ||
                               m.final_softcap > 0 || m.query_pre_attn_scalar > 0;
  if (a.empty())
    a = gemma2_switches                          ? kGemma2Arch
        : gemma_switches                         ? kGemmaArch
        : m.sliding_window > 0                   ? kMistralArch
        : m.qkv_bias && !m.o_bias && !m.mlp_bias ? kQwen2Arch
                                                 : kLlamaArch;
  const auto cannot = [&](const char* what) {
    throw InputError(fmt::format("the model cannot be exported as {}: {}", a, what));
  };
  if (a == kGemmaArch || a == kGemma2Arch) {
    if (m.mlp_activation != GatedActivation::kGeluTanh || !m.norm_unit_offset ||
        !m.scale_embeddings)
      cannot("Gemma has GeGLU, RMSNorm weights applied as 1 + w and embeddings scaled by sqrt(d)");
    if (m.mlp_bias || m.qkv_bias != m.o_bias || m.rope_scaling != RopeScalingKind::kNone)
      cannot(
          "Gemma has no MLP biases or rope_scaling, and attention_bias covers q, k, v and o "
          "together");
    if (a == kGemmaArch && (gemma2_switches || m.sliding_window > 0))
      cannot(
          "Gemma has no sliding window, soft-capping, query_pre_attn_scalar or post-norms "
          "(Gemma2ForCausalLM has)");
    if (a == kGemma2Arch && (!m.post_norms || !m.alternate_window))
      cannot(
          "Gemma 2 has norms after attention and the MLP (post_norms) and a sliding window on "
          "its even layers (alternate_window)");
    // Without it the engine scales by 1/sqrt(head_dim) in float32, which transformers'
    // head_dim**-0.5 (a double, then rounded) may miss by one float step.
    if (a == kGemma2Arch && !(m.query_pre_attn_scalar > 0))
      cannot(
          "Gemma 2 scales its scores by query_pre_attn_scalar^-0.5: set query_pre_attn_scalar "
          "(e.g. the head width)");
    return a;
  }
  if (gemma2_switches)
    cannot(
        "soft-capping, query_pre_attn_scalar, post-norms and alternating windows are Gemma 2's "
        "(Gemma2ForCausalLM)");
  if (gemma_switches)
    cannot("GeGLU, the norm offset and the embedding scale are Gemma's (GemmaForCausalLM)");
  if (m.head_size != 0 && a != kMistralArch)
    cannot(
        "a head width other than hidden_size / num_attention_heads is Gemma's and "
        "Mistral's");
  if (a == kLlamaArch) {
    if (m.sliding_window > 0) cannot("LLaMA has no sliding window (MistralForCausalLM has)");
    if (m.qkv_bias != m.o_bias)
      cannot(m.mlp_bias ? "LLaMA's attention_bias covers q, k, v and o together"
                        : "LLaMA's attention_bias covers q, k, v and o together "
                          "(Qwen2ForCausalLM has q, k, v biases alone)");
  } else if (a == kMistralArch) {
    if (m.qkv_bias || m.o_bias || m.mlp_bias) cannot("Mistral has no biases");
    if (m.rope_scaling != RopeScalingKind::kNone) cannot("Mistral has no rope_scaling");
  } else if (a == kPhi3Arch) {
    if (m.qkv_bias || m.o_bias || m.mlp_bias) cannot("Phi-3 has no biases");
    if (m.rope_scaling != RopeScalingKind::kNone) cannot("Saturn computes Phi-3 without scaling");
  } else if (a == kQwen2Arch) {
    if (!m.qkv_bias || m.o_bias || m.mlp_bias) cannot("Qwen2 has biases on q, k and v only");
    if (m.sliding_window > 0 || m.rope_scaling != RopeScalingKind::kNone)
      cannot("Qwen2 under transformers 4.44 has neither a sliding window nor rope_scaling");
  } else {
    cannot(
        "not a class Saturn exports (valid: LlamaForCausalLM, MistralForCausalLM, "
        "Qwen2ForCausalLM, Phi3ForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM)");
  }
  return a;
}

// A float32 field: an integer when it is one (Gemma 2's query_pre_attn_scalar 224), else the
// shortest decimal.
ordered_json number_json(float f) {
  const double d = shortest(f);
  if (d == std::floor(d) && std::abs(d) < 1e9) return ordered_json(static_cast<std::int64_t>(d));
  return ordered_json(d);
}

ordered_json rope_scaling_json(const ModelConfig& m) {
  if (m.rope_scaling == RopeScalingKind::kNone) return nullptr;
  ordered_json s;
  s["rope_type"] = rope_scaling_name(m.rope_scaling);
  s["factor"] = shortest(m.rope_factor);
  if (m.rope_scaling == RopeScalingKind::kLlama3) {
    s["low_freq_factor"] = shortest(m.rope_low_freq_factor);
    s["high_freq_factor"] = shortest(m.rope_high_freq_factor);
    s["original_max_position_embeddings"] = m.rope_original_max_positions;
  }
  return s;
}

}  // namespace

ordered_json config_json(const ModelConfig& m) {
  ordered_json j;
  if (m.arch == Arch::kGpt2) {
    j["architectures"] = {kGpt2Arch};
    j["model_type"] = "gpt2";
    j["vocab_size"] = m.vocab_size;
    j["n_positions"] = m.max_seq_len;
    j["n_embd"] = m.d_model;
    j["n_layer"] = m.n_layer;
    j["n_head"] = m.n_head;
    j["n_inner"] = m.ffn_dim();
    j["activation_function"] = "gelu_new";
    j["layer_norm_epsilon"] = shortest(m.norm_eps);
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["add_cross_attention"] = false;
    j["tie_word_embeddings"] = true;
  } else {
    const std::string a = export_architecture(m);
    j["architectures"] = {a};
    j["model_type"] = a == kMistralArch  ? "mistral"
                      : a == kQwen2Arch  ? "qwen2"
                      : a == kPhi3Arch   ? "phi3"
                      : a == kGemmaArch  ? "gemma"
                      : a == kGemma2Arch ? "gemma2"
                                         : "llama";
    j["vocab_size"] = m.vocab_size;
    j["hidden_size"] = m.d_model;
    j["intermediate_size"] = m.ffn_dim();
    j["num_hidden_layers"] = m.n_layer;
    j["num_attention_heads"] = m.n_head;
    j["num_key_value_heads"] = m.kv_heads();
    const bool gemma = a == kGemmaArch || a == kGemma2Arch;
    if (a == kLlamaArch || a == kMistralArch || gemma) j["head_dim"] = m.head_dim();
    if (gemma) {
      j["hidden_act"] = "gelu_pytorch_tanh";
      j["hidden_activation"] = "gelu_pytorch_tanh";
    } else {
      j["hidden_act"] = "silu";
    }
    j["max_position_embeddings"] = m.max_seq_len;
    j["rms_norm_eps"] = shortest(m.norm_eps);
    j["rope_theta"] = shortest(m.rope_theta);
    if (a == kLlamaArch) {
      j["rope_scaling"] = rope_scaling_json(m);
      j["attention_bias"] = m.qkv_bias;
      j["mlp_bias"] = m.mlp_bias;
    } else if (gemma) {
      j["attention_bias"] = m.qkv_bias;
      if (a == kGemma2Arch) {
        j["sliding_window"] = m.sliding_window;
        j["query_pre_attn_scalar"] = number_json(m.query_pre_attn_scalar);
        j["attn_logit_softcapping"] =
            m.attn_softcap > 0 ? number_json(m.attn_softcap) : ordered_json(nullptr);
        j["final_logit_softcapping"] =
            m.final_softcap > 0 ? number_json(m.final_softcap) : ordered_json(nullptr);
      }
    } else if (a == kMistralArch || a == kPhi3Arch) {
      if (a == kPhi3Arch) j["rope_scaling"] = nullptr;
      if (m.sliding_window > 0)
        j["sliding_window"] = m.sliding_window;
      else
        j["sliding_window"] = nullptr;
    } else {
      j["use_sliding_window"] = false;
      j["sliding_window"] = nullptr;
    }
    j["tie_word_embeddings"] = m.tie_embeddings;
  }
  if (m.hf_extra_fields.empty()) {
    // A model Saturn made: no dropout (the engine trains without it, and 0 makes transformers'
    // train mode compute the same), and no special tokens, since Saturn does not know the
    // tokenizer's (transformers' defaults, GPT-2's 50256, LLaMA's 1 and 2, may lie outside this
    // vocabulary).
    if (m.arch == Arch::kGpt2) {
      j["resid_pdrop"] = 0.0;
      j["embd_pdrop"] = 0.0;
      j["attn_pdrop"] = 0.0;
    } else {
      j["attention_dropout"] = 0.0;
    }
    if (m.arch == Arch::kLlama && export_architecture(m) == kLlamaArch) j["pretraining_tp"] = 1;
    j["initializer_range"] = 0.02;
    j["bos_token_id"] = nullptr;
    j["eos_token_id"] = nullptr;
    j["pad_token_id"] = nullptr;
    j["use_cache"] = true;
  } else {
    // An imported model: the origin's fields the engine does not compute, as they came
    // (dropouts, initializer_range, token ids, ...); what the origin left out stays out, so that
    // transformers gives it the same default it gave the origin.
    const json extra = json::parse(m.hf_extra_fields);
    for (const auto& [key, value] : extra.items()) j[key] = value;
  }
  j["torch_dtype"] = "float32";
  return j;
}

ordered_json generation_config_json(const ModelConfig&) {
  ordered_json j;
  j["_from_model_config"] = true;
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  return j;
}

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Tensors transformers itself skips when loading (non-persistent buffers older files carry).
bool ignorable_buffer(const std::string& name) {
  return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
         ends_with(name, "rotary_emb.inv_freq");
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string first_few(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < 5; ++i) s += (i ? ", " : "") + v[i];
  if (v.size() > 5) s += fmt::format(" and {} more", v.size() - 5);
  return s;
}

}  // namespace

std::vector<FileTensor> file_tensors(const ModelConfig& adapted) {
  const ModelConfig model = adapted.base_model();  // the files hold no adapters
  const ParameterLayout layout(model);
  const bool phi3 = model.hf_architecture == kPhi3Arch;
  std::vector<FileTensor> out;
  const auto& ts = layout.tensors();
  for (std::size_t k = 0; k < ts.size(); ++k) {
    const ParamTensor& t = ts[k];
    const auto stacked = [&](const std::string& name, std::size_t n) {
      FileTensor f{name, t.canonical_shape, {}};
      f.shape[0] = 0;
      for (std::size_t i = k; i < k + n; ++i) {
        f.shape[0] += ts[i].canonical_shape[0];
        f.parts.push_back(ts[i].name);
      }
      out.push_back(std::move(f));
      k += n - 1;
    };
    // Phi-3: q|k|v in one qkv_proj, gate|up in one gate_up_proj (the layout keeps them
    // adjacent, in that order).
    if (phi3 && ends_with(t.name, ".self_attn.q_proj.weight")) {
      stacked(t.name.substr(0, t.name.size() - 13) + "qkv_proj.weight", 3);
    } else if (phi3 && ends_with(t.name, ".mlp.gate_proj.weight")) {
      stacked(t.name.substr(0, t.name.size() - 16) + "gate_up_proj.weight", 2);
    } else {
      out.push_back({t.name, t.canonical_shape, {t.name}});
    }
  }
  return out;
}

HfWeights::HfWeights(const fs::path& dir, const ModelConfig& adapted) : set_(dir) {
  const ModelConfig model = adapted.base_model();  // a LoRA job's base: the files hold no adapters
  const std::string src = set_.source().string();
  const ParameterLayout layout(model);
  std::vector<std::string> missing;
  std::map<std::string, bool> used;
  for (const FileTensor& ft : file_tensors(model)) {
    std::string name = ft.name;
    if (set_.find(name) == nullptr && model.arch == Arch::kGpt2 &&
        name.rfind("transformer.", 0) == 0 && set_.find(name.substr(12)) != nullptr)
      name = name.substr(12);  // saved from GPT2Model: no "transformer." prefix
    const StTensor* f = set_.find(name);
    if (f == nullptr) {
      missing.push_back(ft.name);
      continue;
    }
    used[name] = true;
    if (!readable_as_float(f->dtype))
      throw InputError(fmt::format("{}: tensor '{}' has dtype {} (valid: F32, F16, BF16)",
                                   set_.file_of(name).path().string(), name, dtype_name(f->dtype)));
    const bool positions = ends_with(ft.name, "wpe.weight");
    const bool fits =
        positions ? f->shape.size() == 2 && f->shape[1] == ft.shape[1] && f->shape[0] >= ft.shape[0]
                  : f->shape == ft.shape;
    if (!fits)
      throw InputError(fmt::format(
          "{}: tensor '{}' has shape {}, the model of config.json needs {}{}",
          set_.file_of(name).path().string(), name, shape_text(f->shape), shape_text(ft.shape),
          positions ? " (at least that many position rows)" : ""));
    std::int64_t row = 0;
    for (const std::string& part : ft.parts) {
      names_[part] = {name, row};
      row += layout.find(part).canonical_shape[0];
    }
  }
  if (!missing.empty())
    throw InputError(fmt::format("{}: {} tensor{} of the model missing: {}", src, missing.size(),
                                 missing.size() == 1 ? "" : "s", first_few(missing)));
  std::vector<std::string> unexpected;
  for (const auto& n : set_.names())
    if (!used.count(n) && !ignorable_buffer(n) && !(model.tied() && n == "lm_head.weight"))
      unexpected.push_back(n);
  if (!unexpected.empty())
    throw InputError(fmt::format("{}: {} tensor{} the engine's {} model has no place for: {}", src,
                                 unexpected.size(), unexpected.size() == 1 ? "" : "s",
                                 arch_name(model.arch), first_few(unexpected)));
}

const HfWeights::Place& HfWeights::place(const std::string& layout_name) const {
  const auto it = names_.find(layout_name);
  if (it == names_.end())
    throw Error(fmt::format("{}: no tensor for '{}'", set_.source().string(), layout_name));
  return it->second;
}

const std::string& HfWeights::file_name(const std::string& layout_name) const {
  return place(layout_name).name;
}

void HfWeights::read_box(const std::string& layout_name, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& count, float* out) const {
  const Place& at = place(layout_name);
  if (at.row == 0) return set_.read_box(at.name, start, count, out);
  std::vector<std::int64_t> shifted = start;  // a part of a stacked tensor: its rows
  shifted[0] += at.row;
  set_.read_box(at.name, shifted, count, out);
}

void HfWeights::fill(const StateSlices& slices) const {
  for (const auto& s : slices) {
    read_box(s.name, s.start, s.count, s.data);
    std::int64_t n = 1;
    for (auto c : s.count) n *= c;
    for (std::int64_t i = 0; i < n; ++i)
      if (!std::isfinite(s.data[i]))
        throw InputError(fmt::format(
            "{}: tensor '{}' holds a non-finite value ({}): Saturn trains only from finite "
            "weights (a loss of NaN from the first step)",
            set_.file_of(file_name(s.name)).path().string(), file_name(s.name), s.data[i]));
  }
}

std::set<std::string> HfWeights::used_names() const {
  std::set<std::string> used;
  for (const auto& [layout_name, at] : names_) used.insert(at.name);
  return used;
}

ModelDirChecksums scan_model_dir(const fs::path& dir, const ModelConfig& model) {
  const HfWeights weights(dir, model);
  const std::set<std::string> used = weights.used_names();
  ModelDirChecksums out;
  const auto record = [&](const fs::path& file, const ByteHash& h) {
    out.files[file.filename().string()] = h.value();
    out.bytes += h.bytes();
  };
  for (const fs::path& small : {dir / "config.json", weights.files().source()}) {
    if (small.filename() == "model.safetensors") continue;  // scanned below
    ByteHash h;
    const std::string text = read_input_file(small);
    h.update(text.data(), text.size());
    record(small, h);
  }
  for (const auto& f : weights.files().files()) {
    ByteHash h;
    f->scan(h, used);
    record(f->path(), h);
  }
  return out;
}

}  // namespace saturn::hf
