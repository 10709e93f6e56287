// A LoRA checkpoint handed back (tools.hpp): its adapters as PEFT saves them, and its base with
// the adapters merged in, streamed from the base's Hugging Face directory into export_hf.
#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/output_dir.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/hf/safetensors.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;

namespace {

// PEFT keeps a model's modules under base_model.model (PeftModel → LoraModel → the model).
constexpr const char* kPeftPrefix = "base_model.model.";
constexpr const char* kPeftConfig = "adapter_config.json";
constexpr const char* kPeftWeights = "adapter_model.safetensors";

// An earlier PEFT export of Saturn's, which an export may replace without --force.
bool is_saturn_peft_export(const fs::path& dir) {
  std::error_code ec;
  bool has_weights = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) return false;
    if (name == kPeftConfig) continue;
    if (name != kPeftWeights || !written_by_saturn(entry.path())) return false;
    has_weights = true;
  }
  return has_weights && !ec;
}

// PEFT 0.12's LoraConfig fields, as PeftModel.save_pretrained writes them.
nlohmann::ordered_json adapter_config(const CheckpointMeta& meta) {
  const LoraConfig& l = meta.model.lora;
  std::vector<std::string> modules;
  for (const LoraLinear& x : lora_linears(meta.model)) modules.push_back(x.module);
  nlohmann::ordered_json j;
  j["alpha_pattern"] = nlohmann::ordered_json::object();
  j["auto_mapping"] = nullptr;
  j["base_model_name_or_path"] = meta.base_model.rfind('/', 0) == 0
                                     ? nlohmann::ordered_json(meta.base_model)
                                     : nlohmann::ordered_json(nullptr);
  j["bias"] = "none";
  // GPT-2's linears are Conv1D ([in, out] weights): PEFT merges into them transposed.
  j["fan_in_fan_out"] = meta.model.arch == Arch::kGpt2;
  j["inference_mode"] = true;
  j["init_lora_weights"] = true;
  j["layer_replication"] = nullptr;
  j["layers_pattern"] = nullptr;
  j["layers_to_transform"] = nullptr;
  j["loftq_config"] = nlohmann::ordered_json::object();
  j["lora_alpha"] = l.alpha;
  j["lora_dropout"] = l.dropout;
  j["megatron_config"] = nullptr;
  j["megatron_core"] = "megatron.core";
  j["modules_to_save"] = nullptr;
  j["peft_type"] = "LORA";
  j["r"] = l.rank;
  j["rank_pattern"] = nlohmann::ordered_json::object();
  j["revision"] = nullptr;
  // Suffixes of module names (PEFT matches a name equal to one or ending in "." + one):
  // attn.c_proj and mlp.c_proj stay apart.
  j["target_modules"] = modules;
  j["task_type"] = "CAUSAL_LM";
  j["use_dora"] = false;
  j["use_rslora"] = l.use_rslora;
  return j;
}

}  // namespace

PeftExportResult export_peft(const fs::path& file, const fs::path& target, bool force) {
  const CheckpointMeta meta = read_meta(MPI_COMM_SELF, file);
  if (!meta.model.lora.enabled())
    throw InputError(fmt::format(
        "{} is a full fine-tune's checkpoint: it has no adapters to export for PEFT (valid: "
        "--format hf or safetensors)",
        file.string()));
  OutputDirOptions out_options;
  out_options.force = force;
  out_options.is_ours = is_saturn_peft_export;
  StagedOutputDir out(target, out_options);
  const ParameterLayout layout(meta.model);
  hf::SafetensorsWriter::Declared declared;
  for (const auto& t : layout.tensors())
    if (t.trainable) declared.emplace_back(kPeftPrefix + t.name, t.shape);
  PeftExportResult result;
  {
    hf::SafetensorsWriter writer(out.path() / kPeftWeights, declared,
                                 {{"format", "pt"},
                                  {"source", "saturn-checkpoint"},
                                  {"job_id", meta.job_id},
                                  {"step", std::to_string(meta.step)}});
    visit_model_tensors(file, [&](const std::string& name, const std::vector<std::int64_t>&,
                                  const float* data, std::size_t n) {
      if (writer.write(kPeftPrefix + name, data, n)) ++result.tensors;
    });
    writer.finish();
  }
  write_file_atomic(out.path() / kPeftConfig, adapter_config(meta).dump(2) + "\n");
  out.commit();
  result.base_model = meta.base_model;
  result.model = meta.model;
  return result;
}

void visit_merged_tensors(const fs::path& file, const CheckpointMeta& meta, const fs::path& base,
                          const TensorVisitor& visit) {
  std::map<std::string, std::vector<float>> adapters;
  visit_model_tensors(
      file, [&](const std::string& name, const std::vector<std::int64_t>&, const float* data,
                std::size_t n) { adapters[name].assign(data, data + n); });
  // Base weight name -> its adapter's A and B.
  struct Adapted {
    const LoraLinear* linear;
    const std::vector<float>*a, *b;
  };
  const std::vector<LoraLinear> linears = lora_linears(meta.model);
  std::map<std::string, Adapted> adapted;
  const std::string block = meta.model.arch == Arch::kGpt2 ? "transformer.h." : "model.layers.";
  for (int l = 0; l < meta.model.n_layer; ++l)
    for (const LoraLinear& x : linears) {
      const std::string m = fmt::format("{}{}.{}", block, l, x.module);
      adapted[m + ".weight"] = {&x, &adapters.at(m + ".lora_A.weight"),
                                &adapters.at(m + ".lora_B.weight")};
    }
  const ModelConfig base_config = meta.model.base_model();
  const hf::HfWeights weights(base, base_config);
  const ParameterLayout layout(base_config);
  const int r = meta.model.lora.rank;
  const float scale = meta.model.lora.scale();
  const bool in_out = meta.model.arch == Arch::kGpt2;  // Conv1D weights are [in, out]
  std::uint64_t fingerprint = 0;
  std::vector<float> w;
  for (const auto& t : layout.tensors()) {
    w.resize(t.numel);
    TensorSlice whole;
    whole.name = t.name;
    whole.shape = t.shape;
    whole.start.assign(t.shape.size(), 0);
    whole.count = t.shape;
    whole.data = w.data();
    weights.fill({whole});
    fingerprint += base_fingerprint_term(t.name, t.shape, whole.start, t.shape, w.data());
    if (const auto it = adapted.find(t.name); it != adapted.end()) {
      // PEFT's merge: W += (B A) · scale, the product in fp32 (here summed in double, rounded).
      const LoraLinear& x = *it->second.linear;
      const float* A = it->second.a->data();
      const float* B = it->second.b->data();
      for (std::int64_t o = 0; o < x.out; ++o)
        for (std::int64_t i = 0; i < x.in; ++i) {
          double s = 0;
          for (int k = 0; k < r; ++k)
            s += static_cast<double>(B[o * r + k]) * static_cast<double>(A[k * x.in + i]);
          const float delta = static_cast<float>(s) * scale;
          float& dst = in_out ? w[static_cast<std::size_t>(i * x.out + o)]
                              : w[static_cast<std::size_t>(o * x.in + i)];
          dst = dst + delta;
        }
    }
    visit(t.name, t.shape, w.data(), t.numel);
  }
  if (format_checksum(fingerprint) != meta.base_checksum)
    throw InputError(fmt::format(
        "{}: the weights of {} (checksum {}) are not the base the adapters of {} were trained on "
        "({}, checksum {}); merging them would give another model (valid: --base the directory "
        "the job started from)",
        base.string(), base.string(), format_checksum(fingerprint), file.string(), meta.base_model,
        meta.base_checksum));
}

}  // namespace saturn::ckpt
