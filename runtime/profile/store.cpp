#include "runtime/profile/store.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <hdf5.h>
#include <unistd.h>

#include <string>
#include <system_error>
#include <tuple>
#include <type_traits>

#include "runtime/checkpoint/h5.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/json_fields.hpp"
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
  // The llama variants likewise: biases (other GEMM epilogues, more parameters) and a sliding
  // window shorter than the sequence (less attention work). Rotary scaling costs nothing.
  const std::string bias = fmt::format("{}{}{}", m.qkv_bias ? " qkvb" : "", m.o_bias ? " ob" : "",
                                       m.mlp_bias ? " mlpb" : "");
  const std::string window = m.sliding_window > 0 && m.sliding_window < t.seq_len
                                 ? fmt::format(" win{}", m.sliding_window)
                                 : std::string();
  // Gemma's GeGLU and head width (another attention shape).
  const std::string gemma =
      fmt::format("{}{}", m.mlp_activation == GatedActivation::kGeluTanh ? " geglu" : "",
                  m.head_size > 0 ? fmt::format(" hd{}", m.head_size) : std::string());
  // Gemma 2's: the window on even layers only, post-norms and soft-capping (more work).
  const std::string gemma2 =
      fmt::format("{}{}{}{}", m.alternate_window && m.n_layer > 1 && !window.empty() ? " alt" : "",
                  m.post_norms ? " postnorm" : "", m.attn_softcap > 0 ? " attncap" : "",
                  m.final_softcap > 0 ? " logitcap" : "");
  // LoRA: the adapters' rank and targets change the work and the memory (alpha does not).
  const std::string lora = m.lora.enabled()
                               ? fmt::format(" lora-r{}-{}", m.lora.rank,
                                             fmt::join(lora_target_names(m.lora.targets), "+"))
                               : std::string();
  // Packing without cross-attention: block-diagonal attention (other work) and per-token
  // positions.
  const char* packing = t.packing.cross_attention ? "" : " nocross";
  return fmt::format("{} L{} H{} d{} ff{} V{} T{} B{} mb{} {}{}{}{}{}{}{}{}{}{}", arch_name(m.arch),
                     m.n_layer, m.n_head, m.d_model, m.ffn_dim(), m.vocab_size, t.seq_len,
                     t.batch_size, t.micro_batch_size, t.optimizer.type,
                     t.reproducible ? " repro" : "", kv, tied, bias, window, gemma, gemma2, lora,
                     packing);
}

std::string ProfileKey::text() const {
  return fmt::format("{} | {} | {} | d{} n{} | {}", signature, config.strategy,
                     config.knobs.empty() ? "-" : config.knobs_text(), config.degree, config.nodes,
                     hardware);
}

std::string ProfileKey::id() const {
  return hash_hex(text());
}

// ---- Field tables -----------------------------------------------------------------------------

namespace {

// A field of both forms of the store: its JSON key (broadcasts) and its HDF5 attribute on the
// entry's group (nullptr: not in the file).
template <class S, class T>
struct StoreField : json_fields::Field<S, T> {
  const char* attr;
};

template <class S, class T>
constexpr StoreField<S, T> stored(const char* key, const char* attr, T S::*member,
                                  bool required = true) {
  return {{key, member, required}, attr};
}

constexpr auto kEstimateFields = std::make_tuple(
    stored("feasible", "est_feasible", &CostEstimate::feasible),
    stored("reason", "est_reason", &CostEstimate::reason),
    stored("step_s", "est_step_s", &CostEstimate::step_s),
    stored("compute_s", "est_compute_s", &CostEstimate::compute_s),
    stored("bubble_s", "est_bubble_s", &CostEstimate::bubble_s),
    stored("comm_s", "est_comm_s", &CostEstimate::comm_s),
    stored("transfer_s", "est_transfer_s", &CostEstimate::transfer_s),
    stored("optimizer_s", "est_optimizer_s", &CostEstimate::optimizer_s),
    stored("eval_s", "est_eval_s", &CostEstimate::eval_s),
    stored("device_bytes", "est_device_bytes", &CostEstimate::device_bytes),
    stored("host_bytes", "est_host_bytes", &CostEstimate::host_bytes),
    stored("comm_bytes", "est_comm_bytes", &CostEstimate::comm_bytes),
    stored("host_transfer_bytes", "est_host_transfer_bytes", &CostEstimate::host_transfer_bytes),
    stored("flops", "est_flops", &CostEstimate::flops),
    stored("micro_batch", "micro_batch", &CostEstimate::micro_batch),
    stored("micro_batches", "micro_batches", &CostEstimate::micro_batches),
    stored("layout", "layout", &CostEstimate::layout));

// clock: optional in JSON (absent before device timers), never in the file.
constexpr auto kMeasurementFields = std::make_tuple(
    stored("feasible", "trial_feasible", &Measurement::feasible),
    stored("reason", "trial_reason", &Measurement::reason),
    stored("step_s", "trial_step_s", &Measurement::step_s),
    stored("step_min_s", "trial_step_min_s", &Measurement::step_min_s),
    stored("step_max_s", "trial_step_max_s", &Measurement::step_max_s),
    stored("steps", "trial_steps", &Measurement::steps),
    stored("eval_s", "trial_eval_s", &Measurement::eval_s),
    stored("comm_s", "trial_comm_s", &Measurement::comm_s),
    stored("peak_device_bytes", "trial_peak_device_bytes", &Measurement::peak_device_bytes),
    stored("peak_host_bytes", "trial_peak_host_bytes", &Measurement::peak_host_bytes),
    stored("device_capacity", "trial_device_capacity", &Measurement::device_capacity),
    stored("concurrent", "trial_concurrent", &Measurement::concurrent),
    stored("wall_s", "trial_wall_s", &Measurement::wall_s),
    stored("setup_s", "trial_setup_s", &Measurement::setup_s, false),
    stored("sync_s", "trial_sync_s", &Measurement::sync_s, false),
    stored("measured_utc", "measured_utc", &Measurement::measured_utc),
    stored("clock", nullptr, &Measurement::clock, false));

// The key's JSON, flat: these and the ConfigSpec's. Its attributes (the key text, knobs as text)
// are written by hand.
constexpr auto kKeyFields = std::make_tuple(json_fields::field("signature", &ProfileKey::signature),
                                            json_fields::field("hardware", &ProfileKey::hardware));
constexpr auto kSpecFields = std::make_tuple(json_fields::field("strategy", &ConfigSpec::strategy),
                                             json_fields::field("knobs", &ConfigSpec::knobs),
                                             json_fields::field("degree", &ConfigSpec::degree),
                                             json_fields::field("nodes", &ConfigSpec::nodes));

}  // namespace

// ---- JSON (broadcasts) ------------------------------------------------------------------------

nlohmann::json measurement_to_json(const Measurement& m) {
  return json_fields::object_of(m, kMeasurementFields);
}

Measurement measurement_from_json(const nlohmann::json& j) {
  Measurement m;
  json_fields::read_fields(j, m, kMeasurementFields, "measurement");
  return m;
}

namespace {

nlohmann::json key_json(const ProfileKey& k) {
  nlohmann::json j = json_fields::object_of(k, kKeyFields);
  json_fields::write_fields(j, k.config, kSpecFields);
  return j;
}

ProfileKey key_from(const nlohmann::json& j) {
  ProfileKey k;
  json_fields::read_fields(j, k, kKeyFields, "key");
  json_fields::read_fields(j, k.config, kSpecFields, "key");
  return k;
}

}  // namespace

std::string ProfileStore::to_text() const {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& [id, e] : entries_) {
    nlohmann::json j = {{"key", key_json(e.key)},
                        {"model_name", e.model_name},
                        {"estimate", json_fields::object_of(e.estimate, kEstimateFields)},
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
      json_fields::read_fields(e.at("estimate"), p.estimate, kEstimateFields, "estimate");
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

// One attribute per field of the table, typed as the member: bool as an integer 0/1, floating
// point as a double, unsigned as u64, signed as int64, strings as strings.
template <class S, class... F>
void write_attrs(hid_t g, const S& s, const std::tuple<F...>& fields) {
  auto write = [g](const char* name, const auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (name == nullptr) return;
    if constexpr (std::is_same_v<T, bool>)
      h5::write_int_attr(g, name, v ? 1 : 0);
    else if constexpr (std::is_floating_point_v<T>)
      write_double(g, name, v);
    else if constexpr (std::is_unsigned_v<T>)
      h5::write_u64_attr(g, name, v);
    else if constexpr (std::is_integral_v<T>)
      h5::write_int_attr(g, name, v);
    else
      h5::write_string_attr(g, name, v);
  };
  std::apply([&](const auto&... f) { (write(f.attr, s.*(f.member)), ...); }, fields);
}

template <class S, class... F>
void read_attrs(hid_t g, S& s, const std::tuple<F...>& fields) {
  // An optional field a store written before it existed lacks keeps its default.
  auto read = [g](const char* name, bool required, auto& v) {
    using T = std::decay_t<decltype(v)>;
    if (name == nullptr || (!required && !h5::has_attr(g, name))) return;
    if constexpr (std::is_same_v<T, bool>)
      v = h5::read_int_attr(g, name) != 0;
    else if constexpr (std::is_floating_point_v<T>)
      v = read_double(g, name);
    else if constexpr (std::is_unsigned_v<T>)
      v = h5::read_u64_attr(g, name);
    else if constexpr (std::is_integral_v<T>)
      v = static_cast<T>(h5::read_int_attr(g, name));
    else
      v = h5::read_string_attr(g, name);
  };
  std::apply([&](const auto&... f) { (read(f.attr, f.required, s.*(f.member)), ...); }, fields);
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
  write_attrs(g, p.estimate, kEstimateFields);
  write_string_attr(g, "estimated_utc", p.estimated_utc);
  write_int_attr(g, "measured", p.measured ? 1 : 0);
  if (p.measured) write_attrs(g, *p.measured, kMeasurementFields);
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
  read_attrs(g, p.estimate, kEstimateFields);
  p.estimated_utc = read_string_attr(g, "estimated_utc");
  if (read_int_attr(g, "measured") == 0) return p;
  read_attrs(g, p.measured.emplace(), kMeasurementFields);
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
