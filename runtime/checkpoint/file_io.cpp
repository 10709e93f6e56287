#include "runtime/checkpoint/file_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/metadata.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt::detail {

namespace fs = std::filesystem;

[[noreturn]] void h5_fail(const std::string& what) {
  const std::string cause = h5::take_error();
  throw std::runtime_error(cause.empty() ? what : what + ": " + cause);
}

hid_t check(hid_t id, const std::string& what) {
  if (id < 0) h5_fail(what);
  return id;
}

void check_err(herr_t rc, const std::string& what) {
  if (rc < 0) h5_fail(what);
}

h5::Handle file_access(MPI_Comm comm, std::size_t meta_block) {
  h5::Handle fapl = h5::plist(check(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate"));
  check_err(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  // Metadata is read by one rank and broadcast, and written collectively: every rank sees the
  // same metadata and none of them hammer the file system.
  check_err(H5Pset_all_coll_metadata_ops(fapl.get(), true), "H5Pset_all_coll_metadata_ops");
  check_err(H5Pset_coll_metadata_write(fapl.get(), true), "H5Pset_coll_metadata_write");
  // The 1.8+ object format checksums its metadata, so a flipped byte in a header is detected
  // too; h5py and every HDF5 >= 1.8 read it.
  check_err(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V110),
            "H5Pset_libver_bounds");
  // Object headers and attributes of hundreds of datasets are allocated together instead of
  // between the datasets' data: a cold open then reads them with a few sequential I/Os
  // (readahead) rather than hundreds of scattered small ones (strace: 700 reads of 0.5-3 KiB
  // spread over a 1.5 GB file before, within its first MiB after).
  if (meta_block > 0)
    check_err(H5Pset_meta_block_size(fapl.get(), meta_block), "H5Pset_meta_block_size");
  return fapl;
}

h5::Handle transfer_props(bool two_phase) {
  h5::Handle dxpl = h5::plist(check(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate"));
  check_err(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
  if (!two_phase)
    check_err(H5Pset_dxpl_mpio_collective_opt(dxpl.get(), H5FD_MPIO_INDIVIDUAL_IO),
              "H5Pset_dxpl_mpio_collective_opt");
  return dxpl;
}

h5::Handle open_file(MPI_Comm comm, const fs::path& path, Status& st) {
  h5::Handle f;
  attempt(st, "", [&] {
    // Not opened at all when it is a FIFO, a device or a directory: MPI-IO would block on a
    // FIFO, and HDF5's messages would not say what is wrong.
    std::error_code ec;
    const fs::file_status status = fs::status(path, ec);
    if (fs::exists(status) && !fs::is_regular_file(status))
      throw std::runtime_error(
          fmt::format("is {}, not a regular file", describe_file_type(status)));
    h5::Handle fapl = file_access(comm);
    f = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl.get()));
    if (!f) {
      if (!fs::exists(path, ec)) throw std::runtime_error("no such file");
      h5_fail("cannot open as HDF5");
    }
  });
  return f;
}

namespace {

// File space with the union of `boxes` selected (a flat range: the union's row-major order is
// the range's order, so one contiguous buffer receives it).
h5::Handle select_boxes(hid_t ds, const std::vector<Box>& boxes) {
  h5::Handle fs_ = h5::space(check(H5Dget_space(ds), "H5Dget_space"));
  if (boxes.empty()) check_err(H5Sselect_none(fs_.get()), "H5Sselect_none");
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    std::vector<hsize_t> start(boxes[i].start.begin(), boxes[i].start.end());
    std::vector<hsize_t> count(boxes[i].count.begin(), boxes[i].count.end());
    check_err(H5Sselect_hyperslab(fs_.get(), i == 0 ? H5S_SELECT_SET : H5S_SELECT_OR, start.data(),
                                  nullptr, count.data(), nullptr),
              "H5Sselect_hyperslab");
  }
  return fs_;
}

h5::Handle memory_space(std::int64_t elements) {
  const hsize_t n = elements > 0 ? static_cast<hsize_t>(elements) : 1;
  h5::Handle ms = h5::space(check(H5Screate_simple(1, &n, nullptr), "H5Screate_simple"));
  if (elements <= 0) check_err(H5Sselect_none(ms.get()), "H5Sselect_none");
  return ms;
}

std::vector<std::int64_t> dataset_shape(hid_t ds) {
  h5::Handle sp = h5::space(check(H5Dget_space(ds), "H5Dget_space"));
  const int nd = H5Sget_simple_extent_ndims(sp.get());
  if (nd < 0) h5_fail("H5Sget_simple_extent_ndims");
  std::vector<hsize_t> dims(static_cast<std::size_t>(nd));
  H5Sget_simple_extent_dims(sp.get(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

// Part k of `parts` equal parts of [0, n) (the first n % parts parts one longer).
std::pair<std::int64_t, std::int64_t> part(std::int64_t n, std::int64_t parts, std::int64_t k) {
  const std::int64_t q = n / parts, r = n % parts;
  return {k * q + std::min(k, r), (k + 1) * q + std::min(k + 1, r)};
}

// HDF5's error stack does not carry errno: a note when the file's disk is full (< 1 MiB free).
std::string full_disk_note(hid_t obj) {
  const ssize_t n = H5Fget_name(obj, nullptr, 0);
  if (n <= 0) return "";
  std::string name(static_cast<std::size_t>(n) + 1, '\0');
  if (H5Fget_name(obj, name.data(), name.size()) < 0) return "";
  name.resize(static_cast<std::size_t>(n));
  struct statvfs vs {};
  if (::statvfs(name.c_str(), &vs) != 0) return "";
  const std::size_t free_bytes = static_cast<std::size_t>(vs.f_bavail) * vs.f_frsize;
  if (free_bytes >= (std::size_t{1} << 20)) return "";
  return fmt::format(" ({}: {} free on its file system)", std::strerror(ENOSPC),
                     format_bytes(free_bytes));
}

}  // namespace

bool check_datasets(hid_t file, const ModelConfig& model, Status& st) {
  bool with_optimizer = false;
  attempt(st, "", [&] {
    with_optimizer = H5Lexists(file, "optimizer", H5P_DEFAULT) > 0;
    if (H5Lexists(file, "model", H5P_DEFAULT) <= 0) throw std::runtime_error("no /model group");
  });
  const ParameterLayout layout(model);
  for (int k = 0; k < (with_optimizer ? kKinds : 1) && !st.failed; ++k) {
    attempt(st, kGroup[k], [&] {
      if (k > 0 && H5Lexists(file, "optimizer", H5P_DEFAULT) > 0 &&
          H5Lexists(file, kGroup[k], H5P_DEFAULT) <= 0)
        throw std::runtime_error("group missing");
      h5::Handle g = h5::group(check(H5Gopen2(file, kGroup[k], H5P_DEFAULT), "cannot open"));
      const auto names = h5::list_group(g.get());
      for (const auto& t : layout.tensors()) {
        if (!t.trainable) continue;  // a LoRA job's base is not in its checkpoints
        if (!std::binary_search(names.begin(), names.end(), t.name))
          throw std::runtime_error(
              fmt::format("missing dataset {} ({} {} of the checkpoint's model_config has it)",
                          dataset_path(k, t.name), arch_name(model.arch), model.n_layer));
      }
      for (const auto& n : names) {
        bool known = false;
        for (const auto& t : layout.tensors()) known = known || (t.trainable && t.name == n);
        if (!known)
          throw std::runtime_error(fmt::format(
              "dataset {} is not a tensor of the checkpoint's model_config", dataset_path(k, n)));
      }
    });
    for (const auto& t : layout.tensors()) {
      if (st.failed) break;
      if (!t.trainable) continue;
      const std::string path = dataset_path(k, t.name);
      attempt(st, path, [&] {
        h5::Handle ds =
            h5::dataset(check(H5Dopen2(file, path.c_str(), H5P_DEFAULT), "cannot open"));
        h5::Handle ty = h5::type(check(H5Dget_type(ds.get()), "H5Dget_type"));
        if (H5Tget_class(ty.get()) != H5T_FLOAT || H5Tget_size(ty.get()) != 4)
          throw std::runtime_error("not float32");
        const auto shape = dataset_shape(ds.get());
        if (shape != t.shape)
          throw std::runtime_error(fmt::format("shape [{}], the model_config needs [{}]",
                                               fmt::join(shape, ", "), fmt::join(t.shape, ", ")));
      });
    }
  }
  return with_optimizer;
}

void transfer(Status& st, const std::string& path, hid_t ds, hid_t dxpl,
              const std::vector<Box>& boxes, std::int64_t n, float* data, bool write) {
  static float dummy = 0;
  const bool active = !st.failed && n > 0;
  h5::Handle fsel, ms;
  try {
    fsel = select_boxes(ds, active ? boxes : std::vector<Box>{});
    ms = memory_space(active ? n : 0);
  } catch (const std::exception& e) {
    st.fail(path, e.what());
    fsel = select_boxes(ds, {});
    ms = memory_space(0);
  }
  float* buf = active ? data : &dummy;
  const herr_t rc = write ? H5Dwrite(ds, H5T_NATIVE_FLOAT, ms.get(), fsel.get(), dxpl, buf)
                          : H5Dread(ds, H5T_NATIVE_FLOAT, ms.get(), fsel.get(), dxpl, buf);
  if (rc < 0) {
    const std::string cause = h5::take_error();
    st.fail(path, std::string(write ? "cannot write" : "cannot read") +
                      (cause.empty() ? "" : ": " + cause) + (write ? full_disk_note(ds) : ""));
  }
}

std::uint64_t split_hash(MPI_Comm comm, hid_t ds, const std::vector<std::int64_t>& shape,
                         hid_t dxpl, Status& st, const std::string& path) {
  const auto P = static_cast<std::int64_t>(size_of(comm));
  const auto me = static_cast<std::int64_t>(rank_of(comm));
  const std::int64_t n = numel(shape);
  constexpr std::int64_t kChunk = std::int64_t{1} << 22;  // 16 MiB of floats per read
  const std::int64_t rounds = std::max<std::int64_t>(1, (n + P * kChunk - 1) / (P * kChunk));
  const std::int64_t parts = rounds * P;
  std::vector<float> buf(static_cast<std::size_t>(n / parts + 1));
  std::uint64_t local = 0;
  for (std::int64_t c = 0; c < rounds; ++c) {
    const auto [lo, hi] = part(n, parts, c * P + me);
    transfer(st, path, ds, dxpl, flat_range_boxes(shape, lo, hi), hi - lo, buf.data(), false);
    if (!st.failed)
      local +=
          hash_run(static_cast<std::uint64_t>(lo), buf.data(), static_cast<std::size_t>(hi - lo));
  }
  std::uint64_t sum = 0;
  MPI_Allreduce(&local, &sum, 1, MPI_UINT64_T, MPI_SUM, comm);
  return sum;
}

void fsync_path(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), directory ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  if (fd < 0)
    throw std::runtime_error(
        fmt::format("cannot open {} to fsync: {}", p.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0)
    throw std::runtime_error(fmt::format("fsync {}: {}", p.string(), std::strerror(err)));
}

SpaceReservation::SpaceReservation(const fs::path& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error(
        fmt::format("cannot create {}: {}", path.string(), std::strerror(errno)));
}

SpaceReservation::~SpaceReservation() {
  if (fd_ >= 0) ::close(fd_);
}

void SpaceReservation::reserve(std::uint64_t bytes) {
  if (std::getenv(kTestNoReserveEnv) != nullptr) supported_ = false;
  if (fd_ < 0 || !supported_ || bytes == 0) return;
  int rc = 0;
  do {
    rc = ::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return;
  const int err = errno;
  if (err == EOPNOTSUPP || err == ENOSYS || err == EINVAL) {
    supported_ = false;  // e.g. a parallel file system: HDF5 then meets a full disk itself
    return;
  }
  // What the file could have: the space free, and what it holds already.
  struct statvfs vs {};
  struct stat st {};
  std::string available;
  if (::fstatvfs(fd_, &vs) == 0 && ::fstat(fd_, &st) == 0)
    available = fmt::format(", {} available",
                            format_bytes(static_cast<std::size_t>(vs.f_bavail) * vs.f_frsize +
                                         static_cast<std::size_t>(st.st_blocks) * 512));
  throw std::runtime_error(fmt::format("not enough disk space: the file needs {}{} ({})",
                                       format_bytes(static_cast<std::size_t>(bytes)), available,
                                       std::strerror(err)));
}

void SpaceReservation::free_for_close(std::uint64_t keep) noexcept {
  if (fd_ < 0) return;
  if (::ftruncate(fd_, 0) != 0) return;
  if (supported_ && keep > 0)
    (void)::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(keep));
}

void SpaceReservation::trim() noexcept {
  if (fd_ < 0 || !supported_) return;
  struct stat st {};
  // Truncating to its own size frees the blocks reserved past the end (ext4, xfs, tmpfs).
  if (::fstat(fd_, &st) == 0) (void)::ftruncate(fd_, st.st_size);
}

}  // namespace saturn::ckpt::detail
