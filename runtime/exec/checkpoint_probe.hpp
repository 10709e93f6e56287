// What each dataset of a checkpoint file costs where a run writes its checkpoints: the part of
// a checkpoint's time that is neither bytes nor one file's creation (HDF5 headers, attributes,
// checksums), which for a model of hundreds of small tensors is most of it.
#pragma once

#include <filesystem>

#include "runtime/profile/file_system.hpp"

namespace saturn::exec {

// Writes (on this rank alone, durably, as a job's checkpoint is written) and removes a probe
// checkpoint of a small model with many tensors in `dir`, and returns the seconds per dataset
// beyond `rates`' file and bytes (the fastest of two writes). IoError (CheckpointError) when `dir`
// cannot take it.
double checkpoint_dataset_seconds(const std::filesystem::path& dir,
                                  const profile::WriteRates& rates);

}  // namespace saturn::exec
