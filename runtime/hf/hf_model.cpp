#include "runtime/hf/hf_model.hpp"

#include <fmt/format.h>

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
  const json& at(const std::string& key) const { return j_.at(key); }

  int integer(const std::string& key, std::int64_t lo, std::int64_t hi) const {
    if (!has(key)) fail(key, "missing (the model's shape needs it)");
    return integer_value(key, lo, hi);
  }
  int integer_or(const std::string& key, int dflt, std::int64_t lo, std::int64_t hi) const {
    return has(key) ? integer_value(key, lo, hi) : dflt;
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

  // The family: `architectures` when given, else `model_type`.
  const std::string valid = fmt::format("{} or {}", kGpt2Arch, kLlamaArch);
  if (r.has("architectures")) {
    const json& a = r.at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string())
      r.fail("architectures",
             fmt::format("expected one architecture, got {} (valid: {})", a.dump(), valid));
    out.architecture = a[0].get<std::string>();
    if (out.architecture != kGpt2Arch && out.architecture != kLlamaArch)
      r.fail("architectures",
             fmt::format("{} is not supported (valid: {})", out.architecture, valid));
  } else {
    const std::string type = r.string_or("model_type", "");
    if (type == "gpt2")
      out.architecture = kGpt2Arch;
    else if (type == "llama")
      out.architecture = kLlamaArch;
    else
      r.fail("model_type",
             fmt::format("'{}' with no `architectures` (valid: gpt2 or llama)", type));
  }
  const std::string type = r.string_or("model_type", "");
  const std::string expected_type = out.architecture == kGpt2Arch ? "gpt2" : "llama";
  if (!type.empty() && type != expected_type)
    r.fail("model_type", fmt::format("'{}' does not match architectures {} (valid: {})", type,
                                     out.architecture, expected_type));

  ModelConfig& m = out.model;
  auto& names = out.field_names;
  // Saturn's limits (model_limits), checked field by field before any size is derived from them
  // (4 * n_embd, the layout), so that the message names config.json's own field.
  using namespace model_limits;
  if (out.architecture == kGpt2Arch) {
    m.arch = Arch::kGpt2;
    names = {{"arch", "architectures"},
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
  } else {
    m.arch = Arch::kLlama;
    names = {{"arch", "architectures"},
             {"n_layer", "num_hidden_layers"},
             {"n_head", "num_attention_heads"},
             {"n_kv_head", "num_key_value_heads"},
             {"tie_embeddings", "tie_word_embeddings"},
             {"d_model", "hidden_size"},
             {"d_ff", "intermediate_size"},
             {"vocab_size", "vocab_size"},
             {"norm_eps", "rms_norm_eps"},
             {"rope_theta", "rope_theta"},
             {"max_seq_len", "max_position_embeddings"}};
    m.vocab_size = r.integer("vocab_size", 2, kVocab);
    m.d_model = r.integer("hidden_size", 1, kDModel);
    m.d_ff = r.integer("intermediate_size", 1, kDff);
    m.n_layer = r.integer("num_hidden_layers", 1, kLayers);
    m.n_head = r.integer("num_attention_heads", 1, kDModel);
    m.max_seq_len = r.integer_or("max_position_embeddings", 2048, 1, kPositions);
    m.norm_eps = static_cast<float>(r.number_or("rms_norm_eps", 1e-6));
    m.rope_theta = static_cast<float>(r.number_or("rope_theta", 10000.0));
    // Grouped-query attention: any divisor of the query heads (transformers' default: equal).
    m.n_kv_head = r.integer_or("num_key_value_heads", m.n_head, 1, kDModel);
    if (m.n_head % m.n_kv_head != 0)
      r.fail("num_key_value_heads",
             fmt::format("{} does not divide num_attention_heads {} (valid: a divisor of it; each "
                         "key/value head serves an equal group of query heads)",
                         m.n_kv_head, m.n_head));
    if (r.has("head_dim") && m.d_model % m.n_head == 0) {
      const int hd = r.integer("head_dim", 1, kDModel);
      if (hd != m.d_model / m.n_head)
        r.fail("head_dim", fmt::format("{} is not hidden_size / num_attention_heads (valid: {})",
                                       hd, m.d_model / m.n_head));
    }
    if (r.has("rope_scaling")) {
      const json& s = r.at("rope_scaling");
      const bool plain =
          s.is_object() && ((s.contains("rope_type") && s["rope_type"] == "default") ||
                            (s.contains("type") && s["type"] == "default"));
      if (!plain)
        r.fail("rope_scaling",
               fmt::format("{} is not implemented by the engine (valid: null, plain rotary "
                           "positions with rope_theta)",
                           s.dump()));
    }
    const std::string act = r.string_or("hidden_act", "silu");
    if (act != "silu")
      r.fail("hidden_act", fmt::format("'{}' is not implemented by the engine (valid: silu)", act));
    r.require_bool("attention_bias", false, false, "LLaMA attention has no biases");
    r.require_bool("mlp_bias", false, false, "LLaMA's MLP has no biases");
    // transformers' LlamaConfig default: untied.
    m.tie_embeddings = r.boolean_or("tie_word_embeddings", false);
  }
  try {
    m.validate();
    m.check_parameters();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", file, e.what()));
  }
  return out;
}

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
    // The engine trains without dropout; 0 makes transformers' train mode compute the same.
    j["resid_pdrop"] = 0.0;
    j["embd_pdrop"] = 0.0;
    j["attn_pdrop"] = 0.0;
    j["scale_attn_weights"] = true;
    j["scale_attn_by_inverse_layer_idx"] = false;
    j["reorder_and_upcast_attn"] = false;
    j["add_cross_attention"] = false;
    j["initializer_range"] = 0.02;
    j["tie_word_embeddings"] = true;
  } else {
    j["architectures"] = {kLlamaArch};
    j["model_type"] = "llama";
    j["vocab_size"] = m.vocab_size;
    j["hidden_size"] = m.d_model;
    j["intermediate_size"] = m.ffn_dim();
    j["num_hidden_layers"] = m.n_layer;
    j["num_attention_heads"] = m.n_head;
    j["num_key_value_heads"] = m.kv_heads();
    j["head_dim"] = m.head_dim();
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = m.max_seq_len;
    j["rms_norm_eps"] = shortest(m.norm_eps);
    j["rope_theta"] = shortest(m.rope_theta);
    j["rope_scaling"] = nullptr;
    j["attention_bias"] = false;
    j["attention_dropout"] = 0.0;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    j["initializer_range"] = 0.02;
    j["tie_word_embeddings"] = m.tie_embeddings;
  }
  // Saturn does not know the tokenizer's special tokens: none rather than transformers'
  // defaults (GPT-2's 50256, LLaMA's 1 and 2), which may lie outside this vocabulary.
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = nullptr;
  j["pad_token_id"] = nullptr;
  j["use_cache"] = true;
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

HfWeights::HfWeights(const fs::path& dir, const ModelConfig& model) : set_(dir) {
  const std::string src = set_.source().string();
  const ParameterLayout layout(model);
  std::vector<std::string> missing;
  std::map<std::string, bool> used;
  for (const auto& t : layout.tensors()) {
    std::string name = t.name;
    if (set_.find(name) == nullptr && model.arch == Arch::kGpt2 &&
        name.rfind("transformer.", 0) == 0 && set_.find(name.substr(12)) != nullptr)
      name = name.substr(12);  // saved from GPT2Model: no "transformer." prefix
    const StTensor* f = set_.find(name);
    if (f == nullptr) {
      missing.push_back(t.name);
      continue;
    }
    used[name] = true;
    if (!readable_as_float(f->dtype))
      throw InputError(fmt::format("{}: tensor '{}' has dtype {} (valid: F32, F16, BF16)",
                                   set_.file_of(name).path().string(), name, dtype_name(f->dtype)));
    const bool positions = ends_with(t.name, "wpe.weight");
    const bool fits = positions ? f->shape.size() == 2 && f->shape[1] == t.canonical_shape[1] &&
                                      f->shape[0] >= t.canonical_shape[0]
                                : f->shape == t.canonical_shape;
    if (!fits)
      throw InputError(fmt::format(
          "{}: tensor '{}' has shape {}, the model of config.json needs {}{}",
          set_.file_of(name).path().string(), name, shape_text(f->shape),
          shape_text(t.canonical_shape), positions ? " (at least that many position rows)" : ""));
    names_[t.name] = name;
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

const std::string& HfWeights::file_name(const std::string& layout_name) const {
  const auto it = names_.find(layout_name);
  if (it == names_.end())
    throw Error(fmt::format("{}: no tensor for '{}'", set_.source().string(), layout_name));
  return it->second;
}

void HfWeights::read_box(const std::string& layout_name, const std::vector<std::int64_t>& start,
                         const std::vector<std::int64_t>& count, float* out) const {
  set_.read_box(file_name(layout_name), start, count, out);
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
  for (const auto& [layout_name, file_name] : names_) used.insert(file_name);
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
