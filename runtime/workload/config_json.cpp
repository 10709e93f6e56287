#include "runtime/workload/config_json.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/core/json_fields.hpp"

namespace saturn {

using nlohmann::json;

namespace {

using json_fields::optional_field;

// Every key is optional: files written before a key existed read its default.
constexpr auto kModelFields = std::make_tuple(
    optional_field("n_layer", &ModelConfig::n_layer),
    optional_field("n_head", &ModelConfig::n_head),
    optional_field("d_model", &ModelConfig::d_model), optional_field("d_ff", &ModelConfig::d_ff),
    optional_field("vocab_size", &ModelConfig::vocab_size),
    optional_field("max_seq_len", &ModelConfig::max_seq_len),
    optional_field("norm_eps", &ModelConfig::norm_eps),
    optional_field("rope_theta", &ModelConfig::rope_theta));

// model_config.rope_scaling, present only when the model scales its rotary frequencies (its
// `type` is read and written beside these).
constexpr auto kRopeScalingFields = std::make_tuple(
    optional_field("factor", &ModelConfig::rope_factor),
    optional_field("low_freq_factor", &ModelConfig::rope_low_freq_factor),
    optional_field("high_freq_factor", &ModelConfig::rope_high_freq_factor),
    optional_field("original_max_position_embeddings", &ModelConfig::rope_original_max_positions));

constexpr auto kTrainFields = std::make_tuple(
    optional_field("batch_size", &TrainConfig::batch_size),
    optional_field("micro_batch_size", &TrainConfig::micro_batch_size),
    optional_field("seq_len", &TrainConfig::seq_len), optional_field("steps", &TrainConfig::steps),
    optional_field("eval_every", &TrainConfig::eval_every),
    optional_field("eval_batches", &TrainConfig::eval_batches),
    optional_field("checkpoint_every", &TrainConfig::checkpoint_every),
    optional_field("seed", &TrainConfig::seed),
    optional_field("reproducible", &TrainConfig::reproducible));

// betas, a pair in the file, are read and written apart.
constexpr auto kOptimizerFields = std::make_tuple(
    optional_field("type", &OptimizerConfig::type), optional_field("lr", &OptimizerConfig::lr),
    optional_field("eps", &OptimizerConfig::eps),
    optional_field("weight_decay", &OptimizerConfig::weight_decay),
    optional_field("grad_clip", &OptimizerConfig::grad_clip));

constexpr auto kScheduleFields =
    std::make_tuple(optional_field("warmup", &ScheduleConfig::warmup),
                    optional_field("decay", &ScheduleConfig::decay),
                    optional_field("min_lr_ratio", &ScheduleConfig::min_lr_ratio));

constexpr auto kEarlyStopFields =
    std::make_tuple(optional_field("diverged", &EarlyStopConfig::diverged),
                    optional_field("patience", &EarlyStopConfig::patience));

constexpr auto kPackingFields =
    std::make_tuple(optional_field("cross_attention", &PackingConfig::cross_attention));

constexpr auto kJobFields = std::make_tuple(optional_field("id", &JobSpec::id),
                                            optional_field("model_name", &JobSpec::model_name));

// One optional key outside the tables (read before validating it).
template <typename T>
void read(const json& j, const char* key, T& out, const char* what) {
  json_fields::read_value<InputError>(j, what, key, out, false);
}

}  // namespace

void to_json(json& j, const ModelConfig& m) {
  j = json_fields::object_of(m, kModelFields);
  j["arch"] = arch_name(m.arch);
  // The resolved values, not the members (0 heads: n_head; gpt2: always tied).
  j["n_kv_head"] = m.kv_heads();
  j["tie_embeddings"] = m.tied();
  // The llama variants' switches only when set, so that the files of other models stay as they
  // were.
  if (m.qkv_bias) j["qkv_bias"] = true;
  if (m.o_bias) j["o_bias"] = true;
  if (m.mlp_bias) j["mlp_bias"] = true;
  if (m.sliding_window > 0) j["sliding_window"] = m.sliding_window;
  if (m.padding_idx >= 0) j["padding_idx"] = m.padding_idx;
  if (m.mlp_activation == GatedActivation::kGeluTanh) j["mlp_activation"] = "geglu";
  if (m.norm_unit_offset) j["norm_unit_offset"] = true;
  if (m.scale_embeddings) j["scale_embeddings"] = true;
  if (m.head_size > 0) j["head_dim"] = m.head_size;
  if (m.alternate_window) j["alternate_window"] = true;
  if (m.query_pre_attn_scalar > 0) j["query_pre_attn_scalar"] = m.query_pre_attn_scalar;
  if (m.attn_softcap > 0) j["attn_softcap"] = m.attn_softcap;
  if (m.final_softcap > 0) j["final_softcap"] = m.final_softcap;
  if (m.post_norms) j["post_norms"] = true;
  if (m.rope_scaling != RopeScalingKind::kNone) {
    j["rope_scaling"] = json_fields::object_of(m, kRopeScalingFields);
    j["rope_scaling"]["type"] = rope_scaling_name(m.rope_scaling);
  }
  if (!m.hf_architecture.empty()) j["hf_architecture"] = m.hf_architecture;
  if (!m.hf_extra_fields.empty()) j["hf_extra_fields"] = json::parse(m.hf_extra_fields);
  if (m.lora.enabled())
    j["lora"] = {{"rank", m.lora.rank},
                 {"alpha", m.lora.alpha},
                 {"targets", lora_target_names(m.lora.targets)},
                 {"use_rslora", m.lora.use_rslora}};
}

void from_json(const json& j, ModelConfig& m) {
  const char* what = "model_config";
  m = ModelConfig{};
  json_fields::read_fields<InputError>(j, m, kModelFields, what);
  std::string arch = arch_name(m.arch);
  read(j, "arch", arch, what);
  try {
    m.arch = parse_arch(arch);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}.arch: {}", what, e.what()));
  }
  // Absent in files written before grouped-query attention and tied LLaMA heads: n_head
  // key/value heads, an untied LLaMA (GPT-2 is tied whatever the file says).
  read(j, "n_kv_head", m.n_kv_head, what);
  read(j, "tie_embeddings", m.tie_embeddings, what);
  for (const auto& [key, member] :
       {std::pair{"qkv_bias", &ModelConfig::qkv_bias}, std::pair{"o_bias", &ModelConfig::o_bias},
        std::pair{"mlp_bias", &ModelConfig::mlp_bias}})
    read(j, key, m.*member, what);
  read(j, "sliding_window", m.sliding_window, what);
  read(j, "padding_idx", m.padding_idx, what);
  read(j, "norm_unit_offset", m.norm_unit_offset, what);
  read(j, "scale_embeddings", m.scale_embeddings, what);
  read(j, "head_dim", m.head_size, what);
  read(j, "alternate_window", m.alternate_window, what);
  read(j, "query_pre_attn_scalar", m.query_pre_attn_scalar, what);
  read(j, "attn_softcap", m.attn_softcap, what);
  read(j, "final_softcap", m.final_softcap, what);
  read(j, "post_norms", m.post_norms, what);
  std::string activation = "swiglu";
  read(j, "mlp_activation", activation, what);
  if (activation != "swiglu" && activation != "geglu")
    throw InputError(
        fmt::format("{}.mlp_activation: '{}' (valid: swiglu, geglu)", what, activation));
  m.mlp_activation = activation == "geglu" ? GatedActivation::kGeluTanh : GatedActivation::kSilu;
  read(j, "hf_architecture", m.hf_architecture, what);
  if (j.contains("rope_scaling")) {
    const json& r = j.at("rope_scaling");
    json_fields::read_fields<InputError>(r, m, kRopeScalingFields, "model_config.rope_scaling");
    std::string type = "none";
    json_fields::read_value<InputError>(r, "model_config.rope_scaling", "type", type, true);
    try {
      m.rope_scaling = parse_rope_scaling(type);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}.rope_scaling.type: {}", what, e.what()));
    }
  }
  if (j.contains("hf_extra_fields")) {
    if (!j.at("hf_extra_fields").is_object())
      throw InputError(fmt::format("{}.hf_extra_fields: expected an object, got {}", what,
                                   j.at("hf_extra_fields").dump()));
    m.hf_extra_fields = j.at("hf_extra_fields").dump();
  }
  if (j.contains("lora")) {
    const json& l = j.at("lora");
    const char* lw = "model_config.lora";
    json_fields::read_value<InputError>(l, lw, "rank", m.lora.rank, true);
    json_fields::read_value<InputError>(l, lw, "alpha", m.lora.alpha, true);
    json_fields::read_value<InputError>(l, lw, "use_rslora", m.lora.use_rslora, false);
    std::vector<std::string> targets;
    json_fields::read_value<InputError>(l, lw, "targets", targets, true);
    try {
      m.lora.targets = parse_lora_targets(targets, m.arch);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}.targets: {}", lw, e.what()));
    }
  }
  if (j.contains("tie_embeddings") && m.arch == Arch::kGpt2 && !m.tie_embeddings)
    throw InputError(
        fmt::format("{}.tie_embeddings: false, but gpt2's head is always its token "
                    "embedding (valid: true)",
                    what));
}

void to_json(json& j, const TrainConfig& t) {
  j = json_fields::object_of(t, kTrainFields);
  json o = json_fields::object_of(t.optimizer, kOptimizerFields);
  o["betas"] = {t.optimizer.beta1, t.optimizer.beta2};
  j["optimizer"] = std::move(o);
  j["schedule"] = json_fields::object_of(t.schedule, kScheduleFields);
  // Only when set: files of jobs without it stay as they were.
  if (t.early_stop.enabled())
    j["early_stop"] = json_fields::object_of(t.early_stop, kEarlyStopFields);
  if (!t.packing.cross_attention) j["packing"] = json_fields::object_of(t.packing, kPackingFields);
}

void from_json(const json& j, TrainConfig& t) {
  t = TrainConfig{};
  json_fields::read_fields<InputError>(j, t, kTrainFields, "train_config");
  if (j.contains("optimizer")) {
    const json& o = j.at("optimizer");
    const char* ow = "train_config.optimizer";
    json_fields::read_fields<InputError>(o, t.optimizer, kOptimizerFields, ow);
    if (o.contains("betas")) {
      const json& b = o.at("betas");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
        throw InputError(fmt::format("{}.betas: expected [beta1, beta2], got {}", ow, b.dump()));
      t.optimizer.beta1 = b[0].get<double>();
      t.optimizer.beta2 = b[1].get<double>();
    }
  }
  if (j.contains("schedule"))
    json_fields::read_fields<InputError>(j.at("schedule"), t.schedule, kScheduleFields,
                                         "train_config.schedule");
  if (j.contains("early_stop"))
    json_fields::read_fields<InputError>(j.at("early_stop"), t.early_stop, kEarlyStopFields,
                                         "train_config.early_stop");
  if (j.contains("packing"))
    json_fields::read_fields<InputError>(j.at("packing"), t.packing, kPackingFields,
                                         "train_config.packing");
}

void to_json(json& j, const JobSpec& job) {
  j = json_fields::object_of(job, kJobFields);
  j["model"] = job.model;
  j["train"] = job.train;
}

void from_json(const json& j, JobSpec& job) {
  job = JobSpec{};
  json_fields::read_fields<InputError>(j, job, kJobFields, "job");
  if (j.contains("model")) from_json(j.at("model"), job.model);
  if (j.contains("train")) from_json(j.at("train"), job.train);
}

json to_json(const ModelConfig& model) {
  json j;
  to_json(j, model);
  return j;
}
json to_json(const TrainConfig& train) {
  json j;
  to_json(j, train);
  return j;
}
json to_json(const JobSpec& job) {
  json j;
  to_json(j, job);
  return j;
}

ModelConfig model_config_from_json(const json& j) {
  ModelConfig m;
  from_json(j, m);
  // A shape read from a file (a checkpoint's attributes, a message) is checked like one from a
  // workload before anything is sized from it.
  try {
    m.validate();
    m.check_parameters();
  } catch (const InputError& e) {
    throw InputError(fmt::format("model_config: {}", e.what()));
  }
  return m;
}
TrainConfig train_config_from_json(const json& j) {
  TrainConfig t;
  from_json(j, t);
  return t;
}
JobSpec job_spec_from_json(const json& j) {
  JobSpec job;
  from_json(j, job);
  return job;
}

}  // namespace saturn
