#include "runtime/checkpoint/metadata.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <stdexcept>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/h5.hpp"
#include "runtime/core/json_fields.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::ckpt::detail {

using nlohmann::json;

std::string dataset_path(int kind, const std::string& name) {
  return std::string(kGroup[kind]) + "/" + name;
}

namespace {

// model and train are written and read apart: their JSON is config_json's, and reading it
// validates the shape.
constexpr auto kMetaFields = std::make_tuple(
    json_fields::field("job_id", &CheckpointMeta::job_id),
    json_fields::field("step", &CheckpointMeta::step),
    json_fields::field("tokens_seen", &CheckpointMeta::tokens_seen),
    json_fields::field("schedule_step", &CheckpointMeta::schedule_step),
    json_fields::field("strategy", &CheckpointMeta::strategy),
    json_fields::field("devices", &CheckpointMeta::devices),
    json_fields::field("data_position", &CheckpointMeta::data_position),
    json_fields::field("rng_state", &CheckpointMeta::rng_state),
    json_fields::optional_field("compute_threads", &CheckpointMeta::compute_threads),
    json_fields::optional_field("base_model", &CheckpointMeta::base_model),
    json_fields::optional_field("base_checksum", &CheckpointMeta::base_checksum),
    json_fields::field("created_utc", &CheckpointMeta::created_utc));

}  // namespace

json meta_to_json(const CheckpointMeta& m) {
  json j = json_fields::object_of(m, kMetaFields);
  j["model"] = to_json(m.model);
  j["train"] = to_json(m.train);
  return j;
}

CheckpointMeta meta_from_json(const json& j) {
  CheckpointMeta m;
  json_fields::read_fields(j, m, kMetaFields, "");
  m.model = model_config_from_json(j.at("model"));
  m.train = train_config_from_json(j.at("train"));
  return m;
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// One root attribute as meta_checksum sees it: its name, and its value as text (an integer in
// decimal).
struct RootAttr {
  std::string name;
  std::string text;
  bool integer = false;
};

RootAttr str_attr(const char* name, std::string value) {
  return {name, std::move(value), false};
}
RootAttr int_attr(const char* name, std::int64_t value) {
  return {name, std::to_string(value), true};
}

// The attributes meta_checksum covers, in this order (optional ones only when present).
std::vector<RootAttr> root_attrs(const CheckpointMeta& m) {
  std::vector<RootAttr> a;
  a.push_back(str_attr("format", kFormat));
  a.push_back(int_attr("version", kVersion));
  a.push_back(str_attr("job_id", m.job_id));
  a.push_back(int_attr("step", m.step));
  a.push_back(int_attr("tokens_seen", m.tokens_seen));
  if (m.schedule_step >= 0 && m.schedule_step != m.step)
    a.push_back(int_attr("schedule_step", m.schedule_step));
  a.push_back(str_attr("model_config", to_json(m.model).dump()));
  a.push_back(str_attr("train_config", to_json(m.train).dump()));
  a.push_back(str_attr("strategy", m.strategy));
  a.push_back(int_attr("devices", m.devices));
  a.push_back(str_attr("data_position", m.data_position));
  a.push_back(str_attr("rng_state", m.rng_state));
  if (m.compute_threads > 0) a.push_back(int_attr("compute_threads", m.compute_threads));
  if (!m.base_checksum.empty()) {
    a.push_back(str_attr("base_model", m.base_model));
    a.push_back(str_attr("base_checksum", m.base_checksum));
  }
  a.push_back(str_attr("created_utc", m.created_utc));
  a.push_back(str_attr("checksum_algorithm", kChecksumAlgorithm));
  return a;
}

// FNV-1a (64 bit) of "name=text\n" for each attribute in order (docs/checkpoints.md).
std::uint64_t meta_checksum(const std::vector<RootAttr>& attrs) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto add = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  };
  for (const auto& a : attrs) add(a.name + "=" + a.text + "\n");
  return h;
}

}  // namespace

void write_root_attrs(hid_t file, const CheckpointMeta& m) {
  const std::vector<RootAttr> attrs = root_attrs(m);
  for (const auto& a : attrs) {
    if (a.integer)
      h5::write_int_attr(file, a.name.c_str(), std::stoll(a.text));
    else
      h5::write_string_attr(file, a.name.c_str(), a.text);
  }
  h5::write_u64_attr(file, kMetaChecksumAttr, meta_checksum(attrs));
}

// Reads and checks the root attributes: format and version first, so that a foreign file is
// reported as such rather than as a missing attribute; then the checksum over all of them,
// before any is interpreted.
CheckpointMeta read_root_attrs(hid_t file) {
  if (!h5::has_attr(file, "format"))
    throw std::runtime_error(fmt::format("not a Saturn checkpoint (no 'format' attribute)"));
  const std::string format = h5::read_string_attr(file, "format");
  if (format != kFormat)
    throw std::runtime_error(
        fmt::format("not a Saturn checkpoint (format '{}', expected '{}')", format, kFormat));
  const std::int64_t version = h5::read_int_attr(file, "version");
  if (version != kVersion)
    throw std::runtime_error(
        fmt::format("format version {} is not supported by this build (it reads version {})",
                    version, kVersion));
  std::vector<RootAttr> attrs = {str_attr("format", format), int_attr("version", version)};
  auto text = [&](const char* name) -> const std::string& {
    attrs.push_back(str_attr(name, h5::read_string_attr(file, name)));
    return attrs.back().text;
  };
  auto integer = [&](const char* name) {
    const std::int64_t v = h5::read_int_attr(file, name);
    attrs.push_back(int_attr(name, v));
    return v;
  };
  CheckpointMeta m;
  m.job_id = text("job_id");
  m.step = integer("step");
  m.tokens_seen = integer("tokens_seen");
  m.schedule_step = h5::has_attr(file, "schedule_step") ? integer("schedule_step") : -1;
  const std::string model_text = text("model_config");
  const std::string train_text = text("train_config");
  m.strategy = text("strategy");
  m.devices = static_cast<int>(integer("devices"));
  m.data_position = text("data_position");
  m.rng_state = text("rng_state");
  if (h5::has_attr(file, "compute_threads"))
    m.compute_threads = static_cast<int>(integer("compute_threads"));
  if (h5::has_attr(file, "base_checksum")) {
    m.base_model = text("base_model");
    m.base_checksum = text("base_checksum");
  }
  m.created_utc = text("created_utc");
  if (h5::has_attr(file, "checksum_algorithm")) text("checksum_algorithm");
  // Strings live in HDF5's global heap, which HDF5 does not checksum: a flipped byte in
  // data_position would otherwise load as another position.
  if (h5::has_attr(file, kMetaChecksumAttr)) {
    const std::uint64_t stored = h5::read_u64_attr(file, kMetaChecksumAttr);
    const std::uint64_t computed = meta_checksum(attrs);
    if (stored != computed)
      throw std::runtime_error(
          fmt::format("the root attributes are corrupt ({} stored {}, computed {})",
                      kMetaChecksumAttr, format_checksum(stored), format_checksum(computed)));
    m.meta_verified = true;
  }
  try {
    m.model = model_config_from_json(json::parse(model_text));
    m.model.validate();
    m.train = train_config_from_json(json::parse(train_text));
  } catch (const json::exception& e) {
    throw std::runtime_error(
        fmt::format("model_config/train_config is not valid JSON: {}", e.what()));
  }
  return m;
}

}  // namespace saturn::ckpt::detail

namespace saturn::ckpt {

std::string check_consistency(const CheckpointMeta& m, std::uint64_t sequences_per_epoch) {
  const std::int64_t batch = m.train.batch_size, seq_len = m.train.seq_len;
  if (m.step < 0) return fmt::format("step {} is negative", m.step);
  if (batch <= 0 || seq_len <= 0)
    return fmt::format("train_config has batch_size {} and seq_len {}", batch, seq_len);
  // Overflow-checked: a corrupt step must not wrap around into a consistent-looking value.
  std::int64_t sequences = 0, tokens = 0;
  if (__builtin_mul_overflow(m.step, batch, &sequences) ||
      __builtin_mul_overflow(sequences, std::int64_t{seq_len}, &tokens))
    return fmt::format("step {} x batch_size {} x seq_len {} does not fit 64 bits", m.step, batch,
                       seq_len);
  if (tokens != m.tokens_seen)
    return fmt::format("tokens_seen {} is not step {} x batch_size {} x seq_len {} = {}",
                       m.tokens_seen, m.step, batch, seq_len, tokens);
  data::LoaderPosition p;
  try {
    p = data::parse_position(m.data_position);
  } catch (const std::exception& e) {
    return e.what();
  }
  // The training loader takes batch_size sequences per step from the concatenated epochs:
  // after S sequences it stands at epoch S / W, index S % W.
  const auto S = static_cast<std::uint64_t>(sequences);
  const std::uint64_t W = sequences_per_epoch, epoch = p.epoch, index = p.index;
  if (W > 0) {
    std::uint64_t at = 0;
    if (index >= W || __builtin_mul_overflow(epoch, W, &at) ||
        __builtin_add_overflow(at, index, &at) || at != S)
      return fmt::format(
          "data position {} is not where step {} x batch_size {} = {} sequences lead with {} "
          "sequences per epoch ({}:{})",
          m.data_position, m.step, batch, S, W, S / W, S % W);
  } else if (epoch == 0 ? index != S
                        : index >= S || (S - index) % epoch != 0 || (S - index) / epoch <= index) {
    return fmt::format(
        "data position {} cannot follow from step {} x batch_size {} = {} sequences (for any "
        "epoch length)",
        m.data_position, m.step, batch, S);
  }
  return "";
}

}  // namespace saturn::ckpt
