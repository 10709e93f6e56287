#include "runtime/workload/config_json.hpp"

#include <fmt/format.h>

#include <type_traits>

#include "runtime/core/error.hpp"

namespace saturn {

using nlohmann::json;

namespace {

// Reads j[key] into `out` when present; a wrong type is an InputError naming `what.key`.
template <typename T>
void read(const json& j, const char* key, T& out, const char* what) {
  if (!j.contains(key)) return;
  try {
    out = j.at(key).get<T>();
  } catch (const json::exception&) {
    throw InputError(fmt::format("{}.{}: expected {}, got {}", what, key,
                                 std::is_arithmetic_v<T> ? "a number" : "a string",
                                 j.at(key).dump()));
  }
  if constexpr (std::is_arithmetic_v<T>) {
    // get<int>() converts a float silently: reject it instead of truncating.
    if (std::is_integral_v<T> && !j.at(key).is_number_integer())
      throw InputError(
          fmt::format("{}.{}: expected an integer, got {}", what, key, j.at(key).dump()));
  }
}

void require_object(const json& j, const char* what) {
  if (!j.is_object())
    throw InputError(fmt::format("{}: expected a JSON object, got {}", what, j.dump()));
}

}  // namespace

void to_json(json& j, const ModelConfig& m) {
  j = json{{"arch", arch_name(m.arch)},
           {"n_layer", m.n_layer},
           {"n_head", m.n_head},
           {"d_model", m.d_model},
           {"d_ff", m.d_ff},
           {"vocab_size", m.vocab_size},
           {"max_seq_len", m.max_seq_len},
           {"norm_eps", m.norm_eps},
           {"rope_theta", m.rope_theta},
           {"n_kv_head", m.kv_heads()},
           {"tie_embeddings", m.tied()}};
}

void from_json(const json& j, ModelConfig& m) {
  const char* what = "model_config";
  require_object(j, what);
  m = ModelConfig{};
  std::string arch = arch_name(m.arch);
  read(j, "arch", arch, what);
  try {
    m.arch = parse_arch(arch);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}.arch: {}", what, e.what()));
  }
  read(j, "n_layer", m.n_layer, what);
  read(j, "n_head", m.n_head, what);
  read(j, "d_model", m.d_model, what);
  read(j, "d_ff", m.d_ff, what);
  read(j, "vocab_size", m.vocab_size, what);
  read(j, "max_seq_len", m.max_seq_len, what);
  read(j, "norm_eps", m.norm_eps, what);
  read(j, "rope_theta", m.rope_theta, what);
  // Absent in files written before grouped-query attention and tied LLaMA heads: n_head
  // key/value heads, an untied LLaMA (GPT-2 is tied whatever the file says).
  read(j, "n_kv_head", m.n_kv_head, what);
  if (j.contains("tie_embeddings")) {
    if (!j.at("tie_embeddings").is_boolean())
      throw InputError(fmt::format("{}.tie_embeddings: expected true or false, got {}", what,
                                   j.at("tie_embeddings").dump()));
    m.tie_embeddings = j.at("tie_embeddings").get<bool>();
    if (m.arch == Arch::kGpt2 && !m.tie_embeddings)
      throw InputError(
          fmt::format("{}.tie_embeddings: false, but gpt2's head is always its token "
                      "embedding (valid: true)",
                      what));
  }
}

void to_json(json& j, const TrainConfig& t) {
  const auto& o = t.optimizer;
  const auto& s = t.schedule;
  j = json{
      {"batch_size", t.batch_size},
      {"micro_batch_size", t.micro_batch_size},
      {"seq_len", t.seq_len},
      {"steps", t.steps},
      {"eval_every", t.eval_every},
      {"eval_batches", t.eval_batches},
      {"checkpoint_every", t.checkpoint_every},
      {"seed", t.seed},
      {"reproducible", t.reproducible},
      {"optimizer",
       {{"type", o.type},
        {"lr", o.lr},
        {"betas", {o.beta1, o.beta2}},
        {"eps", o.eps},
        {"weight_decay", o.weight_decay},
        {"grad_clip", o.grad_clip}}},
      {"schedule", {{"warmup", s.warmup}, {"decay", s.decay}, {"min_lr_ratio", s.min_lr_ratio}}}};
  // Only when set: files of jobs without it stay as they were.
  if (t.early_stop.enabled())
    j["early_stop"] = {{"diverged", t.early_stop.diverged}, {"patience", t.early_stop.patience}};
}

void from_json(const json& j, TrainConfig& t) {
  const char* what = "train_config";
  require_object(j, what);
  t = TrainConfig{};
  read(j, "batch_size", t.batch_size, what);
  read(j, "micro_batch_size", t.micro_batch_size, what);
  read(j, "seq_len", t.seq_len, what);
  read(j, "steps", t.steps, what);
  read(j, "eval_every", t.eval_every, what);
  read(j, "eval_batches", t.eval_batches, what);
  read(j, "checkpoint_every", t.checkpoint_every, what);
  read(j, "seed", t.seed, what);
  if (j.contains("reproducible")) {  // absent in files written before the key existed: false
    if (!j.at("reproducible").is_boolean())
      throw InputError(fmt::format("{}.reproducible: expected true or false, got {}", what,
                                   j.at("reproducible").dump()));
    t.reproducible = j.at("reproducible").get<bool>();
  }
  if (j.contains("optimizer")) {
    const json& o = j.at("optimizer");
    const char* ow = "train_config.optimizer";
    require_object(o, ow);
    read(o, "type", t.optimizer.type, ow);
    read(o, "lr", t.optimizer.lr, ow);
    if (o.contains("betas")) {
      const json& b = o.at("betas");
      if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number())
        throw InputError(fmt::format("{}.betas: expected [beta1, beta2], got {}", ow, b.dump()));
      t.optimizer.beta1 = b[0].get<double>();
      t.optimizer.beta2 = b[1].get<double>();
    }
    read(o, "eps", t.optimizer.eps, ow);
    read(o, "weight_decay", t.optimizer.weight_decay, ow);
    read(o, "grad_clip", t.optimizer.grad_clip, ow);
  }
  if (j.contains("schedule")) {
    const json& s = j.at("schedule");
    const char* sw = "train_config.schedule";
    require_object(s, sw);
    read(s, "warmup", t.schedule.warmup, sw);
    read(s, "decay", t.schedule.decay, sw);
    read(s, "min_lr_ratio", t.schedule.min_lr_ratio, sw);
  }
  if (j.contains("early_stop")) {
    const json& e = j.at("early_stop");
    const char* ew = "train_config.early_stop";
    require_object(e, ew);
    if (e.contains("diverged")) {
      if (!e.at("diverged").is_boolean())
        throw InputError(fmt::format("{}.diverged: expected true or false, got {}", ew,
                                     e.at("diverged").dump()));
      t.early_stop.diverged = e.at("diverged").get<bool>();
    }
    read(e, "patience", t.early_stop.patience, ew);
  }
}

void to_json(json& j, const JobSpec& job) {
  j = json{
      {"id", job.id}, {"model_name", job.model_name}, {"model", job.model}, {"train", job.train}};
}

void from_json(const json& j, JobSpec& job) {
  const char* what = "job";
  require_object(j, what);
  job = JobSpec{};
  read(j, "id", job.id, what);
  read(j, "model_name", job.model_name, what);
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
