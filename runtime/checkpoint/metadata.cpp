#include "runtime/checkpoint/metadata.hpp"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <stdexcept>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/h5.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::ckpt::detail {

using nlohmann::json;

std::string dataset_path(int kind, const std::string& name) {
  return std::string(kGroup[kind]) + "/" + name;
}

json meta_to_json(const CheckpointMeta& m) {
  return json{{"job_id", m.job_id},
              {"step", m.step},
              {"tokens_seen", m.tokens_seen},
              {"schedule_step", m.schedule_step},
              {"model", to_json(m.model)},
              {"train", to_json(m.train)},
              {"strategy", m.strategy},
              {"devices", m.devices},
              {"data_position", m.data_position},
              {"rng_state", m.rng_state},
              {"compute_threads", m.compute_threads},
              {"created_utc", m.created_utc}};
}

CheckpointMeta meta_from_json(const json& j) {
  CheckpointMeta m;
  m.job_id = j.at("job_id").get<std::string>();
  m.step = j.at("step").get<std::int64_t>();
  m.tokens_seen = j.at("tokens_seen").get<std::int64_t>();
  m.schedule_step = j.at("schedule_step").get<std::int64_t>();
  m.model = model_config_from_json(j.at("model"));
  m.train = train_config_from_json(j.at("train"));
  m.strategy = j.at("strategy").get<std::string>();
  m.devices = j.at("devices").get<int>();
  m.data_position = j.at("data_position").get<std::string>();
  m.rng_state = j.at("rng_state").get<std::string>();
  m.compute_threads = j.value("compute_threads", 0);
  m.created_utc = j.at("created_utc").get<std::string>();
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

void write_root_attrs(hid_t file, const CheckpointMeta& m) {
  h5::write_string_attr(file, "format", kFormat);
  h5::write_int_attr(file, "version", kVersion);
  h5::write_string_attr(file, "job_id", m.job_id);
  h5::write_int_attr(file, "step", m.step);
  h5::write_int_attr(file, "tokens_seen", m.tokens_seen);
  if (m.schedule_step >= 0 && m.schedule_step != m.step)
    h5::write_int_attr(file, "schedule_step", m.schedule_step);
  h5::write_string_attr(file, "model_config", to_json(m.model).dump());
  h5::write_string_attr(file, "train_config", to_json(m.train).dump());
  h5::write_string_attr(file, "strategy", m.strategy);
  h5::write_int_attr(file, "devices", m.devices);
  h5::write_string_attr(file, "data_position", m.data_position);
  h5::write_string_attr(file, "rng_state", m.rng_state);
  if (m.compute_threads > 0) h5::write_int_attr(file, "compute_threads", m.compute_threads);
  h5::write_string_attr(file, "created_utc", m.created_utc);
  h5::write_string_attr(file, "checksum_algorithm", kChecksumAlgorithm);
}

// Reads and checks the root attributes: format and version first, so that a foreign file is
// reported as such rather than as a missing attribute.
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
  CheckpointMeta m;
  m.job_id = h5::read_string_attr(file, "job_id");
  m.step = h5::read_int_attr(file, "step");
  m.tokens_seen = h5::read_int_attr(file, "tokens_seen");
  m.schedule_step =
      h5::has_attr(file, "schedule_step") ? h5::read_int_attr(file, "schedule_step") : -1;
  try {
    m.model = model_config_from_json(json::parse(h5::read_string_attr(file, "model_config")));
    m.model.validate();
    m.train = train_config_from_json(json::parse(h5::read_string_attr(file, "train_config")));
  } catch (const json::exception& e) {
    throw std::runtime_error(
        fmt::format("model_config/train_config is not valid JSON: {}", e.what()));
  }
  m.strategy = h5::read_string_attr(file, "strategy");
  m.devices = static_cast<int>(h5::read_int_attr(file, "devices"));
  m.data_position = h5::read_string_attr(file, "data_position");
  m.rng_state = h5::read_string_attr(file, "rng_state");
  if (h5::has_attr(file, "compute_threads"))
    m.compute_threads = static_cast<int>(h5::read_int_attr(file, "compute_threads"));
  m.created_utc = h5::read_string_attr(file, "created_utc");
  return m;
}

}  // namespace saturn::ckpt::detail
