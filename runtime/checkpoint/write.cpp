// Writing a checkpoint: collective, sliced, atomic (checkpoint.hpp, docs/checkpoints.md).
#include <fmt/format.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "runtime/checkpoint/agreement.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/file_io.hpp"
#include "runtime/checkpoint/metadata.hpp"
#include "runtime/checkpoint/plan.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace detail;

namespace {

// The test hook's "RANK:N[:SUBSTRING]": rank RANK kills itself after N datasets of a file whose
// path contains SUBSTRING (any file when absent). {-1, -1} when unset or not for this file.
std::pair<int, int> test_kill_point(const fs::path& file) {
  const char* v = std::getenv(kTestKillEnv);
  if (!v || !*v) return {-1, -1};
  int r = -1, n = -1, used = 0;
  if (std::sscanf(v, "%d:%d%n", &r, &n, &used) != 2) return {-1, -1};
  const std::string only = v[used] == ':' ? std::string(v + used + 1) : std::string();
  if (!only.empty() && file.string().find(only) == std::string::npos) return {-1, -1};
  return {r, n};
}

}  // namespace

void write_checkpoint(MPI_Comm comm, const fs::path& path, const CheckpointMeta& meta,
                      const StateView& state, const WriteOptions& options) {
  const StateSlices* lists[kKinds] = {&state.params, &state.m, &state.v};
  write_checkpoint(
      comm, path, meta, [&](StatePart part) { return *lists[static_cast<int>(part)]; }, options);
}

void write_checkpoint(MPI_Comm comm, const fs::path& path, const CheckpointMeta& meta,
                      const SliceSource& source, const WriteOptions& options) {
  h5::QuietErrors quiet;
  const int me = rank_of(comm);
  // Everyone writes rank 0's metadata: attribute writes must be identical on all ranks.
  CheckpointMeta m = meta;
  std::string meta_text;
  if (me == 0) {
    m.created_utc = utc_now();
    meta_text = meta_to_json(m).dump();
  }
  bcast_string(comm, 0, meta_text);
  m = meta_from_json(json::parse(meta_text));

  fs::path tmp = path;
  tmp += ".tmp";
  Status st;
  if (me == 0)
    attempt(st, "", [&] {
      if (!path.parent_path().empty()) fs::create_directories(path.parent_path());
    });
  agree(comm, path, st);

  const auto [kill_rank, kill_after] = test_kill_point(path);
  const ParameterLayout layout(m.model);
  // About 2 KiB of headers and attributes per dataset (three per tensor).
  const std::size_t block = std::clamp<std::size_t>(3 * layout.tensors().size() * 2048,
                                                    std::size_t{64} << 10, std::size_t{4} << 20);
  // Disk space (SpaceReservation): the weights, then the moments when they come, and room for
  // the metadata (allocated in blocks of `block`; a block or two in practice).
  const std::uint64_t tensor_bytes = layout.grad_total() * sizeof(float);  // trained tensors
  const std::uint64_t metadata_bytes = 2 * block + (std::uint64_t{1} << 20);
  std::optional<SpaceReservation> space;
  bool closed_ok = false;
  h5::Handle file;
  try {
    if (me == 0)
      attempt(st, "", [&] {
        space.emplace(tmp);
        space->reserve(tensor_bytes + metadata_bytes);
      });
    agree(comm, path, st);
    attempt(st, "", [&] {
      h5::Handle fapl = file_access(comm, block);
      file = h5::file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()));
      if (!file) h5_fail(fmt::format("cannot create {}", tmp.string()));
    });
    agree(comm, path, st);
    h5::Handle dxpl, dcpl;
    attempt(st, "", [&] {
      dxpl = transfer_props(options.two_phase_io);
      dcpl = h5::plist(check(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate"));
      // Every element is written by some rank: skip the fill pass (it would double the I/O).
      check_err(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
      check_err(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");
      write_root_attrs(file.get(), m);
      h5::Handle g = h5::group(
          check(H5Gcreate2(file.get(), "model", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group"));
    });
    agree(comm, path, st);

    int written = 0;
    bool with_optimizer = false;
    for (int kind = 0; kind < kKinds; ++kind) {
      // One kind at a time: a strategy's slices may stay valid only until its next export.
      StateSlices slices;
      attempt(st, kGroup[kind], [&] { slices = source(static_cast<StatePart>(kind)); });
      agree(comm, path, st);
      const auto descs = gather_descs(comm, kind, slices);
      const bool any = any_slices(descs);
      if (kind == kMoment1) {
        with_optimizer = any;
        if (any) {
          attempt(st, "", [&] {
            if (space) space->reserve(3 * tensor_bytes + metadata_bytes);
          });
          attempt(st, "/optimizer", [&] {
            for (const char* g : {"optimizer", "optimizer/m", "optimizer/v"})
              h5::Handle grp = h5::group(
                  check(H5Gcreate2(file.get(), g, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), "group"));
          });
        }
        agree(comm, path, st);
      }
      if (kind == kMoment2 && any != with_optimizer)
        throw Error(
            fmt::format("checkpoint {}: the ranks pass {} but no {} (AdamW's moments "
                        "are saved together or not at all)",
                        path.string(), any ? "/optimizer/v" : "/optimizer/m",
                        any ? "/optimizer/m" : "/optimizer/v"));
      if (kind != kParams && !with_optimizer) continue;
      const auto plan = make_plan(descs, expected_of_kind(m.model, kind), path, true);

      // Checksums first: each rank hashes what it writes, one allreduce combines them.
      std::vector<std::uint64_t> local(plan.size(), 0), sums(plan.size(), 0);
      for (std::size_t d = 0; d < plan.size(); ++d)
        for (int i : plan[d].mine[static_cast<std::size_t>(me)]) {
          const TensorSlice& sl = slices[static_cast<std::size_t>(i)];
          local[d] += hash_box(sl.shape, sl.start, sl.count, sl.data);
        }
      MPI_Allreduce(local.data(), sums.data(), static_cast<int>(plan.size()), MPI_UINT64_T, MPI_SUM,
                    comm);

      for (std::size_t d = 0; d < plan.size(); ++d) {
        const DatasetPlan& p = plan[d];
        const std::string dpath = p.path();
        h5::Handle ds;
        attempt(st, dpath, [&] {
          std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
          h5::Handle sp = h5::space(check(
              H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "space"));
          ds = h5::dataset(H5Dcreate2(file.get(), dpath.c_str(), H5T_IEEE_F32LE, sp.get(),
                                      H5P_DEFAULT, dcpl.get(), H5P_DEFAULT));
          if (!ds) h5_fail("cannot create");
          h5::write_u64_attr(ds.get(), "checksum", sums[d]);
        });
        agree(comm, path, st);
        const auto& mine = p.mine[static_cast<std::size_t>(me)];
        for (int round = 0; round < p.rounds; ++round) {
          const TensorSlice* sl =
              round < static_cast<int>(mine.size())
                  ? &slices[static_cast<std::size_t>(mine[static_cast<std::size_t>(round)])]
                  : nullptr;
          transfer(st, dpath, ds.get(), dxpl.get(),
                   sl ? std::vector<Box>{Box{sl->start, sl->count}} : std::vector<Box>{},
                   sl ? sl->elements() : 0, sl ? sl->data : nullptr, true);
        }
        attempt(st, dpath, [&] {
          if (!ds.reset()) h5_fail("cannot close");
        });
        agree(comm, path, st);
        ++written;
        if (me == kill_rank && written == kill_after) std::raise(SIGKILL);
      }
    }
    if (options.durable)  // MPI_File_sync of every rank's data (parallel file systems)
      attempt(st, "", [&] { check_err(H5Fflush(file.get(), H5F_SCOPE_GLOBAL), "flush"); });
    agree(comm, path, st);
    dcpl.reset();
    dxpl.reset();
    closed_ok = file.reset();
    if (space) space->trim();
  } catch (const Error&) {
    // Every rank is here together (errors are agreed, plans identical). Closing flushes HDF5's
    // metadata collectively, and a rank whose flush fails (the disk is full: what failed may be
    // the write of the data itself) leaves the others waiting in the close forever. So rank 0
    // first frees the file's blocks, and the ranks close it only then.
    if (space) space->free_for_close(metadata_bytes);
    MPI_Barrier(comm);
    file.reset();
    if (me == 0) {
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    throw;
  }

  // The vote: the file becomes visible only if every rank closed it cleanly.
  int ok = closed_ok ? 1 : 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm);
  Status fin;
  if (!all_ok) fin.fail("", "closing the file failed on some rank: " + h5::take_error());
  if (me == 0) {
    if (!all_ok) {
      std::error_code ec;
      fs::remove(tmp, ec);
    } else {
      attempt(fin, "", [&] {
        if (options.durable) fsync_path(tmp, false);
        std::error_code ec;
        fs::rename(tmp, path, ec);
        if (ec)
          throw std::runtime_error(
              fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
        if (options.durable)
          fsync_path(path.parent_path().empty() ? "." : path.parent_path(), true);
      });
    }
  }
  agree(comm, path, fin);
}

}  // namespace saturn::ckpt
