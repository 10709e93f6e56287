// Checkpoint bandwidth: writes and reads the whole training state (weights + AdamW m and v) of a
// >= 100M-parameter model with 1, 2 and 4 ranks (FSDP-like flat shards that cut rows), beside
// the raw sequential bandwidth of the same disk measured in the same run (write + fsync of the
// same byte count, 8 MiB blocks, like dd conv=fsync; and a cold read of it).
//
//   mpirun -np 4 --oversubscribe bench_checkpoint [--dir DIR] [--layers 12] [--d-model 768]
//
// Writes are durable (fsync of file and directory, rename) and include checksumming; reads are
// cold (the file's pages are dropped from the page cache first) and include verification.
// Prints a table; never fails on time.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/parameters.hpp"

namespace {

namespace fs = std::filesystem;
using namespace saturn;
using Clock = std::chrono::steady_clock;

double now_s() {
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Drops a file's cached pages, so that the next read comes from the disk.
void drop_cache(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct Raw {
  double write_s = 0, read_s = 0;
};

// dd-like: `bytes` in 8 MiB blocks, then fsync; then a cold sequential read.
Raw raw_disk(const fs::path& file, std::size_t bytes) {
  constexpr std::size_t kBlock = 8u << 20;
  std::vector<char> block(kBlock);
  for (std::size_t i = 0; i < kBlock; ++i) block[i] = static_cast<char>(i * 131 + 7);
  Raw r;
  const double t0 = now_s();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return r;
  for (std::size_t done = 0; done < bytes;) {
    const std::size_t n = std::min(kBlock, bytes - done);
    const ssize_t w = ::write(fd, block.data(), n);
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  ::fsync(fd);
  ::close(fd);
  r.write_s = now_s() - t0;
  drop_cache(file);
  const double t1 = now_s();
  const int rfd = ::open(file.c_str(), O_RDONLY);
  while (::read(rfd, block.data(), kBlock) > 0) {
  }
  ::close(rfd);
  r.read_s = now_s() - t1;
  fs::remove(file);
  return r;
}

struct Shard {
  std::vector<float> data[3];
  ckpt::StateView view;
};

// Rank r of k holds elements [r*N/k, (r+1)*N/k) of the flat layout, for params, m and v.
Shard make_shard(const ParameterLayout& layout, int r, int k) {
  Shard s;
  const std::size_t n = layout.total();
  const std::size_t lo = n * static_cast<std::size_t>(r) / static_cast<std::size_t>(k);
  const std::size_t hi = n * static_cast<std::size_t>(r + 1) / static_cast<std::size_t>(k);
  StateSlices* lists[3] = {&s.view.params, &s.view.m, &s.view.v};
  for (int kind = 0; kind < 3; ++kind) {
    s.data[kind].resize(hi - lo);
    for (std::size_t i = 0; i < hi - lo; ++i)
      s.data[kind][i] = static_cast<float>((lo + i) % 9973) * 1e-4f + static_cast<float>(kind);
    *lists[kind] = ckpt::flat_range_slices(layout, lo, hi, s.data[kind].data());
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);

  CLI::App app{"Checkpoint write/read bandwidth beside the raw disk bandwidth"};
  std::string dir = "bench-checkpoint-tmp";
  ModelConfig model;
  model.arch = Arch::kGpt2;
  model.n_layer = 12;
  model.n_head = 12;
  model.d_model = 768;
  model.vocab_size = 50257;
  model.max_seq_len = 1024;
  std::vector<int> ranks = {1, 2, 4};
  bool two_phase = false;
  int repeat = 3;
  bool no_verify = false;
  app.add_option("--dir", dir, "Directory on the disk to measure (created, then removed)");
  app.add_option("--layers", model.n_layer, "GPT-2 layers");
  app.add_option("--d-model", model.d_model, "GPT-2 width");
  app.add_option("--ranks", ranks, "Rank counts to measure (each <= mpirun -np)")->delimiter(',');
  app.add_flag("--no-verify", no_verify, "Reads without checksum verification (its cost)");
  app.add_option("--repeat", repeat, "Rounds; the best time of each measurement is shown");
  app.add_flag("--two-phase", two_phase,
               "Two-phase collective buffering under the collective calls (the knob "
               "WriteOptions/ReadOptions::two_phase_io)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    MPI_Finalize();
    return rc;
  }

  const ParameterLayout layout(model);
  const std::size_t bytes = layout.total() * 3 * sizeof(float);
  const fs::path base = fs::absolute(dir);
  if (rank == 0) fs::create_directories(base);
  MPI_Barrier(MPI_COMM_WORLD);

  // A shared machine's disk speed drifts a lot within minutes, so every checkpoint measurement
  // is paired with a raw measurement taken just before it, and the table shows medians over
  // `repeat` rounds of the bandwidths and of the paired ratios.
  struct Row {
    int k;
    std::vector<double> write_gbs, read_gbs, raw_write_gbs, raw_read_gbs, write_pct, read_pct;
  };
  const double gb = static_cast<double>(bytes) / 1e9;
  std::vector<Row> rows;
  for (int k : ranks) {
    if (k <= world)
      rows.push_back({k, {}, {}, {}, {}, {}, {}});
    else if (rank == 0)
      std::fprintf(stderr, "skipping %d ranks: run with mpirun -np %d\n", k, k);
  }
  for (int rep = 0; rep < repeat; ++rep) {
    for (Row& row : rows) {
      const int k = row.k;
      Raw raw;
      if (rank == 0) raw = raw_disk(base / "raw.bin", bytes);
      MPI_Comm sub;
      MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED, rank, &sub);
      if (sub != MPI_COMM_NULL) {
        Shard s = make_shard(layout, rank, k);
        ckpt::CheckpointMeta meta;
        meta.job_id = "bench";
        meta.step = 1;
        meta.model = model;
        meta.strategy = "fsdp";
        meta.devices = k;
        const fs::path file = base / fmt::format("ckpt-{}.h5", k);
        ckpt::WriteOptions wopt;
        wopt.two_phase_io = two_phase;
        MPI_Barrier(sub);
        const double t0 = now_s();
        ckpt::write_checkpoint(sub, file, meta, s.view, wopt);
        const double t1 = now_s();
        if (rank == 0) drop_cache(file);
        for (auto& d : s.data) std::fill(d.begin(), d.end(), 0.0f);
        MPI_Barrier(sub);
        const double t2 = now_s();
        ckpt::ReadOptions ropt;
        ropt.two_phase_io = two_phase;
        if (no_verify) ropt.verify = ckpt::Verify::kNone;
        ckpt::read_checkpoint(sub, file, s.view, ropt);
        double t3 = now_s();
        MPI_Allreduce(MPI_IN_PLACE, &t3, 1, MPI_DOUBLE, MPI_MAX, sub);
        if (rank == 0) {
          row.write_gbs.push_back(gb / (t1 - t0));
          row.read_gbs.push_back(gb / (t3 - t2));
          row.raw_write_gbs.push_back(gb / raw.write_s);
          row.raw_read_gbs.push_back(gb / raw.read_s);
          row.write_pct.push_back(100.0 * raw.write_s / (t1 - t0));
          row.read_pct.push_back(100.0 * raw.read_s / (t3 - t2));
          fs::remove(file);
        }
        MPI_Comm_free(&sub);
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
  }

  if (rank == 0) {
    fs::remove_all(base);
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const std::size_t n = v.size();
      return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    };
    std::printf(
        "checkpoint bench: gpt2 %dx%d, vocab %d: %.1fM parameters; state (weights + AdamW m, v) "
        "%.2f GB; %s; dir %s; medians of %d rounds\n\n",
        model.n_layer, model.d_model, model.vocab_size, static_cast<double>(layout.total()) / 1e6,
        gb, two_phase ? "collective calls, two-phase MPI-IO" : "collective calls, per-rank MPI-IO",
        base.c_str(), repeat);
    std::printf(
        "| ranks | write GB/s | raw write GB/s | write / raw | read GB/s | raw read GB/s | "
        "read / raw |\n|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows)
      std::printf("| %d | %.3f | %.3f | %.0f %% | %.3f | %.3f | %.0f %% |\n", r.k,
                  median(r.write_gbs), median(r.raw_write_gbs), median(r.write_pct),
                  median(r.read_gbs), median(r.raw_read_gbs), median(r.read_pct));
    std::printf(
        "\nraw: %.2f GB in 8 MiB blocks + fsync, then a cold sequential read, just before each "
        "checkpoint measurement. write: collective HDF5 create + hyperslab writes + checksums + "
        "fsync + rename; read: cold, hyperslab reads%s\n",
        gb, no_verify ? " (no verification)" : " + checksum verification");
  }
  MPI_Finalize();
  return 0;
}
