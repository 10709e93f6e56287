#include "runtime/checkpoint/tools.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/json_file.hpp"
#include "runtime/core/output_dir.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/hf/safetensors.hpp"
#include "runtime/model/config_diff.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little,
              "safetensors and the checkpoint's float32LE datasets are written from memory as is");

CheckpointInfo inspect_checkpoint(const fs::path& file, bool verify) {
  return scan_checkpoint(MPI_COMM_SELF, file, verify);
}

std::string format_inspection(const fs::path& file, const CheckpointInfo& info) {
  const CheckpointMeta& m = info.meta;
  std::string out;
  auto line = [&](const std::string& text) {
    out += text;
    out += '\n';
  };
  line(fmt::format("file:          {}", file.string()));
  line(fmt::format("format:        {} v{}", kFormat, kVersion));
  line(fmt::format("job:           {}", m.job_id));
  line(fmt::format("step:          {}{}", m.step,
                   m.schedule_step >= 0 && m.schedule_step != m.step
                       ? fmt::format(" (schedule at step {})", m.schedule_step)
                       : ""));
  line(fmt::format("tokens seen:   {}", m.tokens_seen));
  line(fmt::format("strategy:      {} on {} device{}", m.strategy, m.devices,
                   m.devices == 1 ? "" : "s"));
  line(fmt::format("created:       {}", m.created_utc));
  line(fmt::format(
      "model:         {} n_layer {} n_head {} n_kv_head {} d_model {} vocab {}{} ({} "
      "parameters)",
      arch_name(m.model.arch), m.model.n_layer, m.model.n_head, m.model.kv_heads(), m.model.d_model,
      m.model.vocab_size, m.model.tied() ? " tied" : "", m.model.num_parameters()));
  if (m.model.lora.enabled()) {
    line(fmt::format("lora:          {} ({} adapter parameters, trained; the base is frozen)",
                     describe_lora(m.model.lora), m.model.adapter_parameters()));
    line(fmt::format("base:          {} (weights checksum {})", m.base_model, m.base_checksum));
  }
  line(fmt::format("data position: {}", m.data_position));
  line(fmt::format("rng state:     {}", m.rng_state));
  line(fmt::format("metadata:      {}", m.meta_verified
                                            ? "OK (meta_checksum verified)"
                                            : "not checksummed (written before meta_checksum)"));
  const std::string inconsistent = check_consistency(m);
  line(fmt::format("consistency:   {}", inconsistent.empty()
                                            ? "step, tokens_seen and data_position agree"
                                            : "FAILED (" + inconsistent + ")"));
  std::size_t bytes = 0, width = 0;
  for (const auto& d : info.datasets) {
    bytes += static_cast<std::size_t>(numel(d.shape)) * sizeof(float);
    width = std::max(width, d.path.size());
  }
  line(fmt::format("tensors:       {} datasets, {}", info.datasets.size(), format_bytes(bytes)));
  std::size_t bad = 0, verified = 0;
  for (const auto& d : info.datasets) {
    const std::string shape = fmt::format("[{}]", fmt::join(d.shape, ", "));
    const std::string status = !d.verified ? "not verified" : d.ok ? "OK" : "MISMATCH";
    line(fmt::format("  {:<{}}  {:<14} {:>11}  {}  {}", d.path, width, shape,
                     format_bytes(static_cast<std::size_t>(numel(d.shape)) * sizeof(float)),
                     format_checksum(d.stored_checksum), status));
    if (d.verified) ++verified;
    if (d.verified && !d.ok) ++bad;
  }
  if (verified == 0)
    line(fmt::format("checksums:     not verified"));
  else if (bad == 0)
    line(fmt::format("checksums:     OK ({} of {} datasets verified)", verified,
                     info.datasets.size()));
  else
    line(fmt::format("checksums:     FAILED ({} of {} datasets do not match: the file is corrupt)",
                     bad, verified));
  return out;
}

std::size_t export_safetensors(const fs::path& file, const fs::path& out) {
  const CheckpointMeta meta = read_meta(MPI_COMM_SELF, file);
  const ParameterLayout layout(meta.model);
  // Offsets are known from the shapes, so the header goes first and tensors stream after it.
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"},
                            {"source", "saturn-checkpoint"},
                            {"job_id", meta.job_id},
                            {"step", std::to_string(meta.step)},
                            {"tokens_seen", std::to_string(meta.tokens_seen)},
                            {"arch", arch_name(meta.model.arch)},
                            {"model_config", to_json(meta.model).dump()}};
  std::uint64_t offset = 0;
  for (const auto& t : layout.tensors()) {
    if (!t.trainable) continue;  // a LoRA checkpoint holds its adapters, not its base
    const std::uint64_t n = t.numel * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  check_output_file(out);
  fs::path tmp = out;
  tmp += fmt::format(".tmp.{}", ::getpid());
  if (!out.parent_path().empty()) fs::create_directories(out.parent_path());
  std::size_t count = 0;
  try {
    std::ofstream os(tmp, std::ios::binary | std::ios::trunc);
    if (!os) throw IoError(fmt::format("cannot write {}", tmp.string()));
    const std::uint64_t len = text.size();  // little-endian on this (asserted) platform
    os.write(reinterpret_cast<const char*>(&len), sizeof len);
    os.write(text.data(), static_cast<std::streamsize>(text.size()));
    visit_model_tensors(file, [&](const std::string&, const std::vector<std::int64_t>&,
                                  const float* data, std::size_t n) {
      os.write(reinterpret_cast<const char*>(data),
               static_cast<std::streamsize>(n * sizeof(float)));
      ++count;
    });
    os.close();
    if (!os) throw IoError(fmt::format("cannot write {}", tmp.string()));
    std::error_code ec;
    fs::rename(tmp, out, ec);
    if (ec)
      throw IoError(
          fmt::format("cannot rename {} to {}: {}", tmp.string(), out.string(), ec.message()));
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  return count;
}

namespace {

void write_json_file(const fs::path& path, const nlohmann::ordered_json& j) {
  write_file_atomic(path, j.dump(2) + "\n");
}

// What an export carries from the model it was imported from (HfExportOptions::origin).
constexpr const char* kTokenizerFiles[] = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "tokenizer.model",       "added_tokens.json"};

bool is_weight_file(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.rfind("model-", 0) == 0 && ends(".safetensors"));
}

// Model fields an export's config.json and the checkpoint must agree on for `--from` to be the
// model the checkpoint was trained from (its tokenizer and special tokens are carried over).
void check_origin(const fs::path& origin, const ModelConfig& trained) {
  std::error_code ec;
  if (!fs::is_directory(origin, ec))
    throw InputError(fmt::format(
        "--from {}: is not a directory (valid: the Hugging Face model directory the job was "
        "imported from)",
        origin.string()));
  const hf::HfModel source = hf::read_config(origin);
  const ModelConfig& m = source.model;
  const std::optional<ModelDifference> d = first_difference(m, trained);
  if (!d) return;
  const auto named = source.field_names.find(d->field);
  throw InputError(fmt::format(
      "--from {}: its config.json has {} = {}, the checkpoint's model {} = {}: not the model "
      "the checkpoint was trained from, whose tokenizer and special tokens the export would "
      "carry (valid: the directory given as `from:`, or no --from)",
      origin.string(), named != source.field_names.end() ? named->second : d->field, d->first,
      d->field, d->second));
}

// The special-token ids of the origin's config.json in the exported one, its
// generation_config.json as is, and its tokenizer files; returns the files copied.
std::vector<std::string> carry_origin(const fs::path& origin, const fs::path& dir,
                                      nlohmann::ordered_json& config,
                                      nlohmann::ordered_json& generation) {
  std::error_code ec;
  const fs::path origin_config = origin / "config.json";
  if (fs::exists(origin_config, ec)) {
    const auto src = read_ordered_json_file(origin_config);
    // As they came, even an id beyond this vocabulary (a toy GPT-2 config keeps 50256):
    // transformers loaded the origin with them.
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
      const auto it = src.find(key);
      if (it == src.end()) continue;
      config[key] = *it;
      generation[key] = *it;
    }
  }
  std::vector<std::string> carried;
  if (fs::exists(origin / "generation_config.json", ec)) {
    generation = read_ordered_json_file(origin / "generation_config.json");
    carried.push_back("generation_config.json");
  }
  for (const char* name : kTokenizerFiles) {
    const fs::path from = origin / name;
    if (!fs::exists(from, ec)) continue;
    write_file_atomic(dir / name, read_input_file(from));
    carried.push_back(name);
  }
  return carried;
}

// An earlier export of Saturn's, which an export may replace without --force: only files an
// export writes, among them weights whose safetensors metadata says Saturn wrote them.
bool is_saturn_hf_export(const fs::path& dir) {
  std::error_code ec;
  bool has_weights = false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file(ec) || entry.is_symlink(ec)) return false;
    const bool tokenizer = std::find(std::begin(kTokenizerFiles), std::end(kTokenizerFiles),
                                     name) != std::end(kTokenizerFiles);
    if (name == "config.json" || name == "generation_config.json" ||
        name == "model.safetensors.index.json" || tokenizer)
      continue;
    if (!is_weight_file(name) || !written_by_saturn(entry.path())) return false;
    has_weights = true;
  }
  return has_weights && !ec;
}

}  // namespace

bool written_by_saturn(const fs::path& safetensors) {
  try {
    const hf::SafetensorsFile f(safetensors);
    const auto it = f.metadata().find("source");
    return it != f.metadata().end() && it->second == "saturn-checkpoint";
  } catch (const Error&) {
    return false;
  }
}

HfExportResult export_hf(const fs::path& file, const fs::path& target,
                         const HfExportOptions& options) {
  const CheckpointMeta meta = read_meta(MPI_COMM_SELF, file);
  const bool adapters = meta.model.lora.enabled();
  if (adapters && !options.merge)
    throw InputError(fmt::format(
        "{} holds LoRA adapters ({}) trained on the base {}, not a whole model (valid: --format "
        "peft for the adapters, or --format hf --merge for the base with them merged in)",
        file.string(), describe_lora(meta.model.lora), meta.base_model));
  if (!adapters && options.merge)
    throw InputError(
        fmt::format("--merge: {} holds no LoRA adapters (a full fine-tune's weights "
                    "export as they are: leave --merge out)",
                    file.string()));
  fs::path base = options.base;
  if (adapters && base.empty()) {
    if (meta.base_model.rfind('/', 0) != 0)
      throw InputError(fmt::format(
          "{}: the adapters were trained on a randomly initialised base ({}), which no directory "
          "holds: there is nothing to merge them into (valid: --format peft)",
          file.string(), meta.base_model));
    base = meta.base_model;
  }
  if (!options.origin.empty()) check_origin(options.origin, meta.model.base_model());
  OutputDirOptions out_options;
  out_options.force = options.force;
  out_options.is_ours = is_saturn_hf_export;
  if (!options.origin.empty())
    out_options.protected_dirs.emplace_back(
        options.origin, fmt::format("--from {}, the model the checkpoint was imported from",
                                    options.origin.string()));
  StagedOutputDir out(target, out_options);
  const fs::path& dir = out.path();
  HfExportResult result;
  result.model = meta.model;
  // The family's file tensors (Phi-3 stacks q|k|v and gate|up), in layout order, so that the
  // checkpoint's tensors stream into them one after the other.
  const std::vector<hf::FileTensor> files = hf::file_tensors(meta.model);
  std::map<std::string, std::string> file_of;  // layout tensor -> file tensor
  for (const auto& f : files)
    for (const auto& part : f.parts) file_of[part] = f.name;
  // Shards in layout order: a new one starts where the next tensor would overflow this one.
  std::vector<hf::SafetensorsWriter::Declared> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (const auto& f : files) {
    std::uint64_t bytes = sizeof(float);
    for (auto d : f.shape) bytes *= static_cast<std::uint64_t>(d);
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(f.name, f.shape);
    in_shard += bytes;
    total += bytes;
  }
  const int n = static_cast<int>(shards.size());
  std::vector<std::string> names;
  for (int k = 0; k < n; ++k)
    names.push_back(n == 1 ? "model.safetensors"
                           : fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n));
  const std::map<std::string, std::string> st_meta = {
      {"format", "pt"},  // transformers refuses safetensors without it
      {"source", "saturn-checkpoint"},
      {"job_id", meta.job_id},
      {"step", std::to_string(meta.step)}};

  std::unique_ptr<hf::SafetensorsWriter> writer;
  int shard = -1;
  std::size_t in_current = 0;
  const TensorVisitor write_tensor = [&](const std::string& name, const std::vector<std::int64_t>&,
                                         const float* data, std::size_t elements) {
    while (writer == nullptr || in_current == shards[static_cast<std::size_t>(shard)].size()) {
      if (writer) writer->finish();
      ++shard;
      writer =
          std::make_unique<hf::SafetensorsWriter>(dir / names[static_cast<std::size_t>(shard)],
                                                  shards[static_cast<std::size_t>(shard)], st_meta);
      in_current = 0;
    }
    // A part of a stacked tensor continues it; the tensor counts once it is whole.
    if (writer->write(file_of.at(name), data, elements)) {
      ++in_current;
      ++result.tensors;
    }
  };
  if (adapters)
    visit_merged_tensors(file, meta, base, write_tensor);
  else
    visit_model_tensors(file, write_tensor);
  if (writer) writer->finish();
  if (n > 1) {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total}};
    nlohmann::ordered_json map = nlohmann::ordered_json::object();
    for (int k = 0; k < n; ++k)
      for (const auto& [name, shape] : shards[static_cast<std::size_t>(k)])
        map[name] = names[static_cast<std::size_t>(k)];
    index["weight_map"] = map;
    write_json_file(dir / "model.safetensors.index.json", index);
  }
  nlohmann::ordered_json config = hf::config_json(meta.model.base_model());
  nlohmann::ordered_json generation = hf::generation_config_json(meta.model.base_model());
  if (!options.origin.empty())
    result.carried = carry_origin(options.origin, dir, config, generation);
  result.architecture = config["architectures"][0].get<std::string>();
  write_json_file(dir / "config.json", config);
  write_json_file(dir / "generation_config.json", generation);
  out.commit();
  result.shards = n;
  return result;
}

CheckpointMeta import_hf(MPI_Comm comm, const fs::path& dir, const fs::path& out) {
  const auto world = comm::MpiCommunicator::borrow(comm);
  const int rank = world->rank(), size = world->size();
  // Everything about the input is checked, and every rank's part read, before the collective
  // write: a rank that fails (a bad shard, a non-finite value in its range) fails them all
  // alike, exit 2 naming the file, and nothing is written.
  CheckpointMeta meta;
  std::vector<float> part;
  StateView view;
  comm::agree_on(*world, [&] {
    check_output_file(out);
    const hf::HfModel hm = hf::read_config(dir);
    const hf::HfWeights weights(dir, hm.model);
    const ParameterLayout layout(hm.model);
    const std::size_t total = layout.total();
    const std::size_t begin =
        total * static_cast<std::size_t>(rank) / static_cast<std::size_t>(size);
    const std::size_t end =
        total * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(size);
    part.resize(end - begin);
    view.params = flat_range_slices(layout, begin, end, part.data());
    weights.fill(view.params);
    meta.job_id = "hf-import";
    meta.model = hm.model;
    meta.train.seq_len = hm.model.max_seq_len;
    meta.strategy = "hf-import";
    meta.devices = size;
  });
  write_checkpoint(comm, out, meta, view);
  return meta;
}

}  // namespace saturn::ckpt
