#include "runtime/profile/store.hpp"

#include <fmt/format.h>
#include <hdf5.h>
#include <unistd.h>

#include <string>
#include <system_error>

#include "runtime/checkpoint/h5.hpp"
#include "runtime/core/error.hpp"
#include "runtime/profile/util.hpp"

namespace saturn::profile {

namespace h5 = saturn::ckpt::h5;

std::string signature_of(const ModelConfig& m, const TrainConfig& t) {
  // Reproducible jobs run other micro-batches and an fp64 pass: profiled apart (the suffix
  // leaves the signatures of existing stores unchanged). So are grouped-query attention and a
  // tied LLaMA head (other shapes and another parameter count), with suffixes for the same
  // reason.
  const std::string kv =
      m.kv_heads() != m.n_head ? fmt::format(" kv{}", m.kv_heads()) : std::string();
  const char* tied = m.arch == Arch::kLlama && m.tied() ? " tied" : "";
  return fmt::format("{} L{} H{} d{} ff{} V{} T{} B{} mb{} {}{}{}{}", arch_name(m.arch), m.n_layer,
                     m.n_head, m.d_model, m.ffn_dim(), m.vocab_size, t.seq_len, t.batch_size,
                     t.micro_batch_size, t.optimizer.type, t.reproducible ? " repro" : "", kv,
                     tied);
}

std::string ProfileKey::text() const {
  return fmt::format("{} | {} | {} | d{} n{} | {}", signature, config.strategy,
                     config.knobs.empty() ? "-" : config.knobs_text(), config.degree, config.nodes,
                     hardware);
}

std::string ProfileKey::id() const {
  return hash_hex(text());
}

// ---- JSON (broadcasts) ------------------------------------------------------------------------

namespace {

nlohmann::json estimate_json(const CostEstimate& e) {
  return {{"feasible", e.feasible},
          {"reason", e.reason},
          {"step_s", e.step_s},
          {"compute_s", e.compute_s},
          {"bubble_s", e.bubble_s},
          {"comm_s", e.comm_s},
          {"transfer_s", e.transfer_s},
          {"optimizer_s", e.optimizer_s},
          {"eval_s", e.eval_s},
          {"device_bytes", e.device_bytes},
          {"host_bytes", e.host_bytes},
          {"comm_bytes", e.comm_bytes},
          {"host_transfer_bytes", e.host_transfer_bytes},
          {"flops", e.flops},
          {"micro_batch", e.micro_batch},
          {"micro_batches", e.micro_batches},
          {"layout", e.layout}};
}

CostEstimate estimate_from(const nlohmann::json& j) {
  CostEstimate e;
  e.feasible = j.at("feasible");
  e.reason = j.at("reason");
  e.step_s = j.at("step_s");
  e.compute_s = j.at("compute_s");
  e.bubble_s = j.at("bubble_s");
  e.comm_s = j.at("comm_s");
  e.transfer_s = j.at("transfer_s");
  e.optimizer_s = j.at("optimizer_s");
  e.eval_s = j.at("eval_s");
  e.device_bytes = j.at("device_bytes");
  e.host_bytes = j.at("host_bytes");
  e.comm_bytes = j.at("comm_bytes");
  e.host_transfer_bytes = j.at("host_transfer_bytes");
  e.flops = j.at("flops");
  e.micro_batch = j.at("micro_batch");
  e.micro_batches = j.at("micro_batches");
  e.layout = j.at("layout");
  return e;
}

}  // namespace

nlohmann::json measurement_to_json(const Measurement& m) {
  return {{"feasible", m.feasible},
          {"reason", m.reason},
          {"step_s", m.step_s},
          {"step_min_s", m.step_min_s},
          {"step_max_s", m.step_max_s},
          {"steps", m.steps},
          {"eval_s", m.eval_s},
          {"comm_s", m.comm_s},
          {"peak_device_bytes", m.peak_device_bytes},
          {"peak_host_bytes", m.peak_host_bytes},
          {"device_capacity", m.device_capacity},
          {"concurrent", m.concurrent},
          {"wall_s", m.wall_s},
          {"measured_utc", m.measured_utc},
          {"clock", m.clock}};
}

Measurement measurement_from_json(const nlohmann::json& j) {
  Measurement m;
  m.feasible = j.at("feasible");
  m.reason = j.at("reason");
  m.step_s = j.at("step_s");
  m.step_min_s = j.at("step_min_s");
  m.step_max_s = j.at("step_max_s");
  m.steps = j.at("steps");
  m.eval_s = j.at("eval_s");
  m.comm_s = j.at("comm_s");
  m.peak_device_bytes = j.at("peak_device_bytes");
  m.peak_host_bytes = j.at("peak_host_bytes");
  m.device_capacity = j.at("device_capacity");
  m.concurrent = j.at("concurrent");
  m.wall_s = j.at("wall_s");
  m.measured_utc = j.at("measured_utc");
  m.clock = j.value("clock", std::string("steady_clock"));
  return m;
}

namespace {

nlohmann::json key_json(const ProfileKey& k) {
  return {{"signature", k.signature},  {"strategy", k.config.strategy}, {"knobs", k.config.knobs},
          {"degree", k.config.degree}, {"nodes", k.config.nodes},       {"hardware", k.hardware}};
}

ProfileKey key_from(const nlohmann::json& j) {
  ProfileKey k;
  k.signature = j.at("signature");
  k.config.strategy = j.at("strategy");
  k.config.knobs = j.at("knobs").get<std::vector<std::string>>();
  k.config.degree = j.at("degree");
  k.config.nodes = j.at("nodes");
  k.hardware = j.at("hardware");
  return k;
}

}  // namespace

std::string ProfileStore::to_text() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [id, e] : entries_) {
    nlohmann::json j = {{"key", key_json(e.key)},
                        {"model_name", e.model_name},
                        {"estimate", estimate_json(e.estimate)},
                        {"estimated_utc", e.estimated_utc}};
    if (e.measured) j["measured"] = measurement_to_json(*e.measured);
    entries.push_back(std::move(j));
  }
  nlohmann::json hw = nlohmann::json::array();
  for (const auto& [id, r] : hardware_) {
    nlohmann::json j = {{"hardware", r.hardware.to_json()}};
    if (r.calibration) j["calibration"] = r.calibration->to_json();
    hw.push_back(std::move(j));
  }
  return nlohmann::json{{"entries", entries}, {"hardware", hw}}.dump();
}

ProfileStore ProfileStore::from_text(const std::string& text) {
  ProfileStore s;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& e : j.at("entries")) {
      ProfileEntry p;
      p.key = key_from(e.at("key"));
      p.model_name = e.at("model_name");
      p.estimate = estimate_from(e.at("estimate"));
      p.estimated_utc = e.at("estimated_utc");
      if (e.contains("measured")) p.measured = measurement_from_json(e.at("measured"));
      s.put(p);
    }
    for (const auto& h : j.at("hardware")) {
      HardwareRecord r;
      r.hardware = Hardware::from_json(h.at("hardware"));
      if (h.contains("calibration")) r.calibration = Calibration::from_json(h.at("calibration"));
      s.put_hardware(r);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("profile store text: {}", e.what()));
  }
  return s;
}

const ProfileEntry* ProfileStore::find(const std::string& key_id) const {
  const auto it = entries_.find(key_id);
  return it == entries_.end() ? nullptr : &it->second;
}

const HardwareRecord* ProfileStore::hardware(const std::string& id) const {
  const auto it = hardware_.find(id);
  return it == hardware_.end() ? nullptr : &it->second;
}

void ProfileStore::merge_from(const ProfileStore& older) {
  for (const auto& [id, e] : older.entries_) {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      entries_[id] = e;
    } else if (!it->second.measured && e.measured) {
      it->second.measured = e.measured;
    }
  }
  for (const auto& [id, r] : older.hardware_) {
    auto it = hardware_.find(id);
    if (it == hardware_.end()) {
      hardware_[id] = r;
    } else if (!it->second.calibration && r.calibration) {
      it->second.calibration = r.calibration;
    }
  }
}

// ---- HDF5 -------------------------------------------------------------------------------------

namespace {

constexpr const char* kFormat = "saturn-profiles";
constexpr std::int64_t kVersion = 1;

void write_double(hid_t obj, const char* name, double value) {
  if (H5Aexists(obj, name) > 0) H5Adelete(obj, name);
  h5::Handle sp = h5::space(H5Screate(H5S_SCALAR));
  h5::Handle a =
      h5::attr(H5Acreate2(obj, name, H5T_IEEE_F64LE, sp.get(), H5P_DEFAULT, H5P_DEFAULT));
  if (!a || H5Awrite(a.get(), H5T_NATIVE_DOUBLE, &value) < 0)
    throw std::runtime_error(
        fmt::format("attribute '{}': cannot write: {}", name, h5::take_error()));
}

double read_double(hid_t obj, const char* name) {
  h5::Handle a = h5::attr(H5Aopen(obj, name, H5P_DEFAULT));
  double v = 0;
  if (!a || H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0)
    throw std::runtime_error(
        fmt::format("attribute '{}': cannot read: {}", name, h5::take_error()));
  return v;
}

h5::Handle make_group(hid_t parent, const std::string& name) {
  h5::Handle g = h5::group(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!g)
    throw std::runtime_error(fmt::format("cannot create group {}: {}", name, h5::take_error()));
  return g;
}

h5::Handle open_group(hid_t parent, const std::string& name) {
  h5::Handle g = h5::group(H5Gopen2(parent, name.c_str(), H5P_DEFAULT));
  if (!g) throw std::runtime_error(fmt::format("cannot open group {}: {}", name, h5::take_error()));
  return g;
}

void write_entry(hid_t g, const ProfileEntry& p) {
  using namespace h5;
  write_string_attr(g, "key", p.key.text());
  write_string_attr(g, "signature", p.key.signature);
  write_string_attr(g, "model_name", p.model_name);
  write_string_attr(g, "strategy", p.key.config.strategy);
  write_string_attr(g, "knobs", p.key.config.knobs_text());
  write_int_attr(g, "degree", p.key.config.degree);
  write_int_attr(g, "nodes", p.key.config.nodes);
  write_string_attr(g, "hardware", p.key.hardware);
  const CostEstimate& e = p.estimate;
  write_int_attr(g, "est_feasible", e.feasible ? 1 : 0);
  write_string_attr(g, "est_reason", e.reason);
  write_double(g, "est_step_s", e.step_s);
  write_double(g, "est_compute_s", e.compute_s);
  write_double(g, "est_bubble_s", e.bubble_s);
  write_double(g, "est_comm_s", e.comm_s);
  write_double(g, "est_transfer_s", e.transfer_s);
  write_double(g, "est_optimizer_s", e.optimizer_s);
  write_double(g, "est_eval_s", e.eval_s);
  write_u64_attr(g, "est_device_bytes", e.device_bytes);
  write_u64_attr(g, "est_host_bytes", e.host_bytes);
  write_u64_attr(g, "est_comm_bytes", e.comm_bytes);
  write_u64_attr(g, "est_host_transfer_bytes", e.host_transfer_bytes);
  write_double(g, "est_flops", e.flops);
  write_int_attr(g, "micro_batch", e.micro_batch);
  write_int_attr(g, "micro_batches", e.micro_batches);
  write_string_attr(g, "layout", e.layout);
  write_string_attr(g, "estimated_utc", p.estimated_utc);
  write_int_attr(g, "measured", p.measured ? 1 : 0);
  if (!p.measured) return;
  const Measurement& m = *p.measured;
  write_int_attr(g, "trial_feasible", m.feasible ? 1 : 0);
  write_string_attr(g, "trial_reason", m.reason);
  write_double(g, "trial_step_s", m.step_s);
  write_double(g, "trial_step_min_s", m.step_min_s);
  write_double(g, "trial_step_max_s", m.step_max_s);
  write_int_attr(g, "trial_steps", m.steps);
  write_double(g, "trial_eval_s", m.eval_s);
  write_double(g, "trial_comm_s", m.comm_s);
  write_u64_attr(g, "trial_peak_device_bytes", m.peak_device_bytes);
  write_u64_attr(g, "trial_peak_host_bytes", m.peak_host_bytes);
  write_u64_attr(g, "trial_device_capacity", m.device_capacity);
  write_int_attr(g, "trial_concurrent", m.concurrent ? 1 : 0);
  write_double(g, "trial_wall_s", m.wall_s);
  write_string_attr(g, "measured_utc", m.measured_utc);
}

ProfileEntry read_entry(hid_t g) {
  using namespace h5;
  ProfileEntry p;
  p.key.signature = read_string_attr(g, "signature");
  p.model_name = read_string_attr(g, "model_name");
  p.key.config.strategy = read_string_attr(g, "strategy");
  const std::string knobs = read_string_attr(g, "knobs");
  for (std::size_t b = 0; b < knobs.size();) {
    const std::size_t e = std::min(knobs.find(',', b), knobs.size());
    if (e > b) p.key.config.knobs.push_back(knobs.substr(b, e - b));
    b = e + 1;
  }
  p.key.config.degree = static_cast<int>(read_int_attr(g, "degree"));
  p.key.config.nodes = static_cast<int>(read_int_attr(g, "nodes"));
  p.key.hardware = read_string_attr(g, "hardware");
  CostEstimate& e = p.estimate;
  e.feasible = read_int_attr(g, "est_feasible") != 0;
  e.reason = read_string_attr(g, "est_reason");
  e.step_s = read_double(g, "est_step_s");
  e.compute_s = read_double(g, "est_compute_s");
  e.bubble_s = read_double(g, "est_bubble_s");
  e.comm_s = read_double(g, "est_comm_s");
  e.transfer_s = read_double(g, "est_transfer_s");
  e.optimizer_s = read_double(g, "est_optimizer_s");
  e.eval_s = read_double(g, "est_eval_s");
  e.device_bytes = read_u64_attr(g, "est_device_bytes");
  e.host_bytes = read_u64_attr(g, "est_host_bytes");
  e.comm_bytes = read_u64_attr(g, "est_comm_bytes");
  e.host_transfer_bytes = read_u64_attr(g, "est_host_transfer_bytes");
  e.flops = read_double(g, "est_flops");
  e.micro_batch = read_int_attr(g, "micro_batch");
  e.micro_batches = read_int_attr(g, "micro_batches");
  e.layout = read_string_attr(g, "layout");
  p.estimated_utc = read_string_attr(g, "estimated_utc");
  if (read_int_attr(g, "measured") == 0) return p;
  Measurement m;
  m.feasible = read_int_attr(g, "trial_feasible") != 0;
  m.reason = read_string_attr(g, "trial_reason");
  m.step_s = read_double(g, "trial_step_s");
  m.step_min_s = read_double(g, "trial_step_min_s");
  m.step_max_s = read_double(g, "trial_step_max_s");
  m.steps = static_cast<int>(read_int_attr(g, "trial_steps"));
  m.eval_s = read_double(g, "trial_eval_s");
  m.comm_s = read_double(g, "trial_comm_s");
  m.peak_device_bytes = read_u64_attr(g, "trial_peak_device_bytes");
  m.peak_host_bytes = read_u64_attr(g, "trial_peak_host_bytes");
  m.device_capacity = read_u64_attr(g, "trial_device_capacity");
  m.concurrent = read_int_attr(g, "trial_concurrent") != 0;
  m.wall_s = read_double(g, "trial_wall_s");
  m.measured_utc = read_string_attr(g, "measured_utc");
  p.measured = m;
  return p;
}

}  // namespace

ProfileStore ProfileStore::load(const std::filesystem::path& path) {
  ProfileStore s;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return s;
  const h5::QuietErrors quiet;
  try {
    h5::Handle f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
    if (!f) throw std::runtime_error(h5::take_error());
    if (!h5::has_attr(f.get(), "format") || h5::read_string_attr(f.get(), "format") != kFormat)
      throw std::runtime_error(fmt::format("not a profile store (no format=\"{}\")", kFormat));
    const std::int64_t version = h5::read_int_attr(f.get(), "version");
    if (version > kVersion)
      throw std::runtime_error(
          fmt::format("store version {} is newer than this build's {}", version, kVersion));
    h5::Handle hw = open_group(f.get(), "hardware");
    for (const auto& id : h5::list_group(hw.get())) {
      h5::Handle g = open_group(hw.get(), id);
      HardwareRecord r;
      r.hardware =
          Hardware::from_json(nlohmann::json::parse(h5::read_string_attr(g.get(), "fingerprint")));
      if (h5::has_attr(g.get(), "calibration"))
        r.calibration = Calibration::from_json(
            nlohmann::json::parse(h5::read_string_attr(g.get(), "calibration")));
      s.put_hardware(r);
    }
    h5::Handle pr = open_group(f.get(), "profiles");
    for (const auto& id : h5::list_group(pr.get())) {
      h5::Handle g = open_group(pr.get(), id);
      s.put(read_entry(g.get()));
    }
  } catch (const std::exception& e) {
    throw IoError(fmt::format("profile store {}: {}", path.string(), e.what()));
  }
  return s;
}

void ProfileStore::save(const std::filesystem::path& path) const {
  ProfileStore merged = *this;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    try {
      merged.merge_from(load(path));
    } catch (const IoError&) {
      // An unreadable old file is replaced: the store is a cache of measurements, and this
      // run's are at least as good.
    }
  }
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp = path.string() + fmt::format(".tmp.{}", getpid());
  const h5::QuietErrors quiet;
  try {
    {
      h5::Handle f = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
      if (!f) throw std::runtime_error(h5::take_error());
      h5::write_string_attr(f.get(), "format", kFormat);
      h5::write_int_attr(f.get(), "version", kVersion);
      h5::write_string_attr(f.get(), "updated_utc", utc_now());
      h5::Handle hw = make_group(f.get(), "hardware");
      for (const auto& [id, r] : merged.hardware_) {
        h5::Handle g = make_group(hw.get(), id);
        h5::write_string_attr(g.get(), "fingerprint", r.hardware.to_json().dump());
        h5::write_string_attr(g.get(), "description", r.hardware.describe());
        if (r.calibration) {
          h5::write_string_attr(g.get(), "calibration", r.calibration->to_json().dump());
          h5::write_string_attr(g.get(), "calibrated_utc", r.calibration->created_utc);
        }
      }
      h5::Handle pr = make_group(f.get(), "profiles");
      for (const auto& [id, e] : merged.entries_) {
        h5::Handle g = make_group(pr.get(), id);
        write_entry(g.get(), e);
      }
      if (!f.reset()) throw std::runtime_error("closing the file: " + h5::take_error());
    }
    std::filesystem::rename(tmp, path);
  } catch (const std::exception& e) {
    std::filesystem::remove(tmp, ec);
    throw IoError(fmt::format("profile store {}: cannot write: {}", path.string(), e.what()));
  }
}

}  // namespace saturn::profile
