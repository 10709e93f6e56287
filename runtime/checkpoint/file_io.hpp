// Internal to checkpoints: the HDF5 file and its transfers. File access properties (parallel
// I/O over a communicator, collective metadata, the checksummed 1.8 object format), collective
// hyperslab transfers that every rank joins even after it failed, the check of a file's datasets
// against a model's layout, whole-dataset checksums read in parts, and fsync.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/checkpoint/agreement.hpp"
#include "runtime/checkpoint/h5.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/config.hpp"

namespace saturn::ckpt::detail {

// Throws std::runtime_error with `what` and the HDF5 error stack's cause.
[[noreturn]] void h5_fail(const std::string& what);
// `id`, or h5_fail(what) when it is negative.
hid_t check(hid_t id, const std::string& what);
// h5_fail(what) when rc is negative.
void check_err(herr_t rc, const std::string& what);

// meta_block: bytes of metadata to allocate together when creating a file (0: HDF5's default).
h5::Handle file_access(MPI_Comm comm, std::size_t meta_block = 0);
// Collective transfers; two_phase: see WriteOptions::two_phase_io.
h5::Handle transfer_props(bool two_phase);
// Opens `path` read-only over comm (collective); a failure is recorded in st.
h5::Handle open_file(MPI_Comm comm, const std::filesystem::path& path, Status& st);

// Checks that the file holds exactly the datasets of `model`'s layout (and, if it has an
// /optimizer group, the moments too), float32 with the layout's shapes. Returns whether the
// optimizer state is present. Collective (metadata reads only).
bool check_datasets(hid_t file, const ModelConfig& model, Status& st);

// One collective transfer of `n` elements between `data` and the selection `boxes` of `ds`.
// Every rank calls it equally often; a rank with nothing to move, or that has already failed,
// takes part with an empty selection, so no rank is left waiting in the collective.
void transfer(Status& st, const std::string& path, hid_t ds, hid_t dxpl,
              const std::vector<Box>& boxes, std::int64_t n, float* data, bool write);

// Checksum of a whole dataset, read in equal flat parts by the ranks (bounded buffers).
// Collective.
std::uint64_t split_hash(MPI_Comm comm, hid_t ds, const std::vector<std::int64_t>& shape,
                         hid_t dxpl, Status& st, const std::string& path);

// fsync of a file or a directory; throws std::runtime_error naming it.
void fsync_path(const std::filesystem::path& p, bool directory);

// Disk space set aside for a file before HDF5 writes it (rank 0 only). A full disk inside
// parallel HDF5 is not survivable: a rank whose metadata write fails at H5Fclose leaves the
// collective close early and the other ranks wait in it forever (seen with Open MPI 4.1 and
// HDF5 1.10 on a full tmpfs). So the blocks are allocated up front (fallocate with
// FALLOC_FL_KEEP_SIZE: the file's size stays 0, so H5Fcreate does not truncate them away), a
// full disk is found there, before any collective HDF5 call, and what HDF5 writes later lands
// in blocks it already has. Where the file system cannot preallocate, nothing is reserved.
class SpaceReservation {
 public:
  SpaceReservation() = default;
  // Creates (truncates) `path`.
  explicit SpaceReservation(const std::filesystem::path& path);
  SpaceReservation(const SpaceReservation&) = delete;
  SpaceReservation& operator=(const SpaceReservation&) = delete;
  ~SpaceReservation();

  // Allocates the first `bytes` of the file. std::runtime_error naming the file, the space
  // needed and the space free when the disk is full (or the quota exceeded).
  void reserve(std::uint64_t bytes);
  // After a failed write, before the collective close: frees the file's blocks, then sets
  // aside `keep` bytes again (best effort) for the metadata HDF5 writes while closing.
  void free_for_close(std::uint64_t keep) noexcept;
  // After a successful close: frees the reserved blocks past the end of the file.
  void trim() noexcept;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool supported_ = true;
};

}  // namespace saturn::ckpt::detail
