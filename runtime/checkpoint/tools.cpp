#include "runtime/checkpoint/tools.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/core/atomic_file.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/hf/safetensors.hpp"
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
  const ParameterLayout layout(m.model);
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
      m.model.vocab_size, m.model.tied() ? " tied" : "", layout.total()));
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
    const std::uint64_t n = t.numel * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + n}}};
    offset += n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  fs::path tmp = out;
  tmp += ".tmp";
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

bool is_weight_file(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return name == "model.safetensors" || name == "model.safetensors.index.json" ||
         (name.rfind("model-", 0) == 0 && ends(".safetensors"));
}

// The special-token ids of the origin's config.json in the exported one, its
// generation_config.json as is, and its tokenizer files; returns the files copied.
std::vector<std::string> carry_origin(const fs::path& origin, const fs::path& dir,
                                      nlohmann::ordered_json& config,
                                      nlohmann::ordered_json& generation) {
  std::error_code ec;
  if (!fs::is_directory(origin, ec))
    throw InputError(fmt::format(
        "Hugging Face origin {} is not a directory (valid: the model directory the job was "
        "imported from)",
        origin.string()));
  auto read = [](const fs::path& file) {
    std::ifstream in(file);
    if (!in) throw IoError(fmt::format("cannot open {}", file.string()));
    try {
      return nlohmann::ordered_json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{} is not valid JSON: {}", file.string(), e.what()));
    }
  };
  const fs::path origin_config = origin / "config.json";
  if (fs::exists(origin_config, ec)) {
    const auto src = read(origin_config);
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
    generation = read(origin / "generation_config.json");
    carried.push_back("generation_config.json");
  }
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                           "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json"}) {
    const fs::path from = origin / name;
    if (!fs::is_regular_file(from, ec)) continue;
    std::ifstream in(from, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (!in.good() && !in.eof()) throw IoError(fmt::format("cannot read {}", from.string()));
    write_file_atomic(dir / name, bytes.str());
    carried.push_back(name);
  }
  return carried;
}

}  // namespace

HfExportResult export_hf(const fs::path& file, const fs::path& dir,
                         const HfExportOptions& options) {
  const CheckpointMeta meta = read_meta(MPI_COMM_SELF, file);
  const ParameterLayout layout(meta.model);
  HfExportResult result;
  result.model = meta.model;
  // Shards in layout order: a new one starts where the next tensor would overflow this one.
  std::vector<hf::SafetensorsWriter::Declared> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (const auto& t : layout.tensors()) {
    const std::uint64_t bytes = t.numel * sizeof(float);
    if (!shards.back().empty() && in_shard + bytes > options.max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(t.name, t.shape);
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
  fs::create_directories(dir);

  std::unique_ptr<hf::SafetensorsWriter> writer;
  int shard = -1;
  std::size_t in_current = 0;
  visit_model_tensors(file, [&](const std::string& name, const std::vector<std::int64_t>&,
                                const float* data, std::size_t elements) {
    while (writer == nullptr || in_current == shards[static_cast<std::size_t>(shard)].size()) {
      if (writer) writer->finish();
      ++shard;
      writer =
          std::make_unique<hf::SafetensorsWriter>(dir / names[static_cast<std::size_t>(shard)],
                                                  shards[static_cast<std::size_t>(shard)], st_meta);
      in_current = 0;
    }
    writer->write(name, data, elements);
    ++in_current;
    ++result.tensors;
  });
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
  nlohmann::ordered_json config = hf::config_json(meta.model);
  nlohmann::ordered_json generation = hf::generation_config_json(meta.model);
  if (!options.origin.empty())
    result.carried = carry_origin(options.origin, dir, config, generation);
  write_json_file(dir / "config.json", config);
  write_json_file(dir / "generation_config.json", generation);
  // Weight files of an earlier export that this one did not write would be read instead of,
  // or beside, the new ones (an index wins over model.safetensors).
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool written = std::find(names.begin(), names.end(), name) != names.end() ||
                         (n > 1 && name == "model.safetensors.index.json");
    if (is_weight_file(name) && !written) fs::remove(entry.path());
  }
  result.shards = n;
  return result;
}

CheckpointMeta import_hf(MPI_Comm comm, const fs::path& dir, const fs::path& out) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const hf::HfModel hm = hf::read_config(dir);
  const hf::HfWeights weights(dir, hm.model);
  const ParameterLayout layout(hm.model);
  const std::size_t total = layout.total();
  const std::size_t begin = total * static_cast<std::size_t>(rank) / static_cast<std::size_t>(size);
  const std::size_t end =
      total * static_cast<std::size_t>(rank + 1) / static_cast<std::size_t>(size);
  std::vector<float> part(end - begin);
  StateView view;
  view.params = flat_range_slices(layout, begin, end, part.data());
  weights.fill(view.params);
  CheckpointMeta meta;
  meta.job_id = "hf-import";
  meta.model = hm.model;
  meta.train.seq_len = hm.model.max_seq_len;
  meta.strategy = "hf-import";
  meta.devices = size;
  write_checkpoint(comm, out, meta, view);
  return meta;
}

}  // namespace saturn::ckpt
