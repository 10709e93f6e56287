#include "runtime/checkpoint/tools.hpp"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/slices.hpp"
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
  line(fmt::format("model:         {} n_layer {} n_head {} d_model {} vocab {} ({} parameters)",
                   arch_name(m.model.arch), m.model.n_layer, m.model.n_head, m.model.d_model,
                   m.model.vocab_size, layout.total()));
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

}  // namespace saturn::ckpt
