// Internal to checkpoints: the file's layout names (the three kinds of dataset and their
// groups) and its root attributes (CheckpointMeta): writing, reading and checking them, and
// their JSON form (how rank 0's metadata reaches every rank).
#pragma once

#include <hdf5.h>

#include <nlohmann/json.hpp>
#include <string>

#include "runtime/checkpoint/checkpoint.hpp"

namespace saturn::ckpt::detail {

enum Kind { kParams = 0, kMoment1 = 1, kMoment2 = 2 };
inline constexpr int kKinds = 3;
inline constexpr const char* kGroup[kKinds] = {"/model", "/optimizer/m", "/optimizer/v"};

// "/model/<name>", "/optimizer/m/<name>", ...
std::string dataset_path(int kind, const std::string& name);

nlohmann::json meta_to_json(const CheckpointMeta& m);
CheckpointMeta meta_from_json(const nlohmann::json& j);

// Now, as ISO 8601 UTC ("2026-11-30T00:08:48Z").
std::string utc_now();

// Writes the root attributes (collective in parallel HDF5: identical values on every rank).
void write_root_attrs(hid_t file, const CheckpointMeta& m);
// Reads and checks the root attributes; throws std::runtime_error naming what is wrong.
CheckpointMeta read_root_attrs(hid_t file);

}  // namespace saturn::ckpt::detail
