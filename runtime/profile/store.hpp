// The profile store: one HDF5 file that remembers, per hardware fingerprint, the calibration and
// every configuration ever estimated or tried, so later runs (and `saturn plan` on a login node)
// reuse them instead of trying again. Layout (no compound types; h5py reads it directly):
//
//   /                      attrs format="saturn-profiles", version=1, updated_utc
//   /hardware/<hw-id>      attrs fingerprint (JSON), description, calibration (JSON),
//                                calibrated_utc
//   /profiles/<key-id>     attrs key, signature, model_name, strategy, knobs, degree, nodes,
//                                hardware, est_* (the analytic estimate), estimated_utc,
//                                measured (0/1) and trial_* (the measurement), measured_utc
//
// <key-id> is a hash of the key text: the model/batch/shape signature (not the job: jobs that
// differ only in learning rate or seed share an entry), strategy, knobs, degree, nodes and the
// hardware fingerprint. The file is written by one rank to a temporary name and renamed, after
// merging what other runs wrote in the meantime.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "runtime/model/config.hpp"
#include "runtime/profile/calibration.hpp"
#include "runtime/profile/cost_model.hpp"
#include "runtime/profile/hardware.hpp"

namespace saturn::profile {

// What decides a job's speed and memory: the model's shape and the batch's, not its learning
// rate, schedule, seed or step count. E.g. "gpt2 L2 H4 d128 ff512 V256 T64 B16 mb0 adamw".
std::string signature_of(const ModelConfig& model, const TrainConfig& train);

struct ProfileKey {
  std::string signature;
  ConfigSpec config;
  std::string hardware;  // Hardware::id()

  std::string text() const;
  std::string id() const;  // 16 hex digits
};

// A real trial's outcome.
struct Measurement {
  bool feasible = true;
  std::string reason;  // the failure (out of memory, an error), or why a feasible trial ended early
  double step_s = 0;   // median over the measured steps (slowest rank of each step)
  double step_min_s = 0;
  double step_max_s = 0;
  int steps = 0;
  double eval_s = 0;  // one evaluation
  double comm_s = 0;  // per step, inside communication calls (busiest rank)
  std::size_t peak_device_bytes = 0;
  std::size_t peak_host_bytes = 0;
  std::size_t device_capacity = 0;  // capacity of the trial's device pool (0: unlimited)
  bool concurrent = false;          // other trials ran beside it
  double wall_s = 0;                // the whole trial: set-up, warm-up, steps, evaluation
  double setup_s = 0;  // devices, communicators and the strategy's set-up (0: not measured)
  // One synchronisation of a group of this size (a tiny allreduce right after another, as a
  // checkpoint's collectives come) while the node's other ranks compute; 0 on one rank, across
  // nodes, or not measured.
  double sync_s = 0;
  std::string measured_utc;
  // The clock the step times came from: "cuda events" on a GPU's compute stream, or
  // "steady_clock" (the CPU backend; stores written before device timers).
  std::string clock = "steady_clock";
};

nlohmann::json measurement_to_json(const Measurement& m);
Measurement measurement_from_json(const nlohmann::json& j);  // throws nlohmann::json errors

struct ProfileEntry {
  ProfileKey key;
  std::string model_name;  // the workload's name of the model (for reading the file)
  CostEstimate estimate;
  std::string estimated_utc;
  std::optional<Measurement> measured;
};

struct HardwareRecord {
  Hardware hardware;
  std::optional<Calibration> calibration;
};

class ProfileStore {
 public:
  // An absent file is an empty store. IoError when the file cannot be read or is not a store.
  static ProfileStore load(const std::filesystem::path& path);
  // Writes the store to path.tmp.<pid> and renames it over `path`, after merging entries another
  // run added to the file since (ours win where both have a key, unless only theirs is measured).
  void save(const std::filesystem::path& path) const;

  // JSON text of the whole store, to broadcast it to other ranks.
  std::string to_text() const;
  static ProfileStore from_text(const std::string& text);

  const ProfileEntry* find(const std::string& key_id) const;
  void put(const ProfileEntry& entry) { entries_[entry.key.id()] = entry; }
  const HardwareRecord* hardware(const std::string& id) const;
  void put_hardware(const HardwareRecord& record) { hardware_[record.hardware.id()] = record; }

  const std::map<std::string, ProfileEntry>& entries() const { return entries_; }
  const std::map<std::string, HardwareRecord>& hardware_records() const { return hardware_; }
  void merge_from(const ProfileStore& older);

 private:
  std::map<std::string, ProfileEntry> entries_;
  std::map<std::string, HardwareRecord> hardware_;
};

}  // namespace saturn::profile
