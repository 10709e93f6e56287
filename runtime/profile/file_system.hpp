// How fast checkpoints reach the file system a run writes them to: the part of a job's time
// the device's calibration cannot know (a run directory on a node's SSD, on NFS or on Lustre
// writes at rates 100x apart). Measured once per run, in the run directory itself.
#pragma once

#include <filesystem>
#include <string>

namespace saturn::profile {

struct WriteRates {
  double latency_s = 0;    // a small file written, fsynced and renamed into place
  double bytes_per_s = 0;  // each further byte (0: not measured)
  double dataset_s = 0;    // each dataset of an HDF5 checkpoint: its header, attributes, checksum
  bool measured() const { return bytes_per_s > 0; }
  // One checkpoint file of `bytes` in `datasets` datasets, written as the checkpoint writer does.
  double seconds(double bytes, double datasets = 0) const;
};

// Which file system `path` is on (its nearest existing ancestor's), as a key the calibration
// keeps WriteRates under: its type (statfs magic) and device, e.g. "fs-ef53-dev-8:1". Empty
// when it cannot be told (then the rates are measured every run).
std::string file_system_id(const std::filesystem::path& path);

// Writes, fsyncs and renames probe files in `dir` (created if absent) the way a checkpoint is
// written, and removes them; the largest is 16 MiB or an eighth of the free space. IoError when
// `dir` cannot be written (full, read-only, not a directory).
WriteRates measure_write_rates(const std::filesystem::path& dir);

}  // namespace saturn::profile
