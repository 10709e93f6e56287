#include "runtime/checkpoint/store.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/log.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;

namespace {

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

void bcast_string(MPI_Comm comm, std::string& s) {
  auto n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, comm);
  s.resize(static_cast<std::size_t>(n));
  if (n > 0) MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, 0, comm);
}

// Rank 0 runs f; every rank throws rank 0's error, if any (IoError naming the file).
template <typename F>
void on_root(MPI_Comm comm, F&& f) {
  std::string err;
  if (rank_of(comm) == 0) {
    try {
      f();
    } catch (const std::exception& e) {
      err = e.what();
      if (err.empty()) err = "failed";
    }
  }
  bcast_string(comm, err);
  if (!err.empty()) throw IoError(err);
}

// `latest` the same way as a checkpoint: a temporary file, fsync, rename, fsync the directory.
void write_latest(const fs::path& dir, const std::string& name, bool durable) {
  write_file_atomic(dir / "latest", name + "\n", durable ? Durability::kFsync : Durability::kNone);
}

void prune(const fs::path& dir, int keep_last, const fs::path& just_written) {
  const auto files = list_checkpoints(dir.parent_path());
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (static_cast<int>(i) < std::max(1, keep_last) || files[i] == just_written) continue;
    std::error_code ec;
    fs::remove(files[i], ec);
    if (ec) log::warn("cannot delete old checkpoint {}: {}", files[i].string(), ec.message());
  }
  // Leftovers of interrupted writes: never valid, never loaded, only taking space.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.size() > 7 && n.ends_with(".h5.tmp")) fs::remove(e.path(), ec);
  }
}

}  // namespace

std::string step_file_name(std::int64_t step) {
  return fmt::format("step-{:08}.h5", step);
}

std::optional<std::int64_t> parse_step_file_name(const std::string& name) {
  if (!name.starts_with("step-") || !name.ends_with(".h5") || name.size() < 5 + 8 + 3)
    return std::nullopt;
  const char* b = name.data() + 5;
  const char* e = name.data() + name.size() - 3;
  std::int64_t step = 0;
  auto [p, ec] = std::from_chars(b, e, step);
  if (ec != std::errc() || p != e || step < 0) return std::nullopt;
  return step;
}

fs::path checkpoints_dir(const fs::path& job_dir) {
  return job_dir / "checkpoints";
}
fs::path final_path(const fs::path& job_dir) {
  return job_dir / "final.h5";
}

fs::path save_step_checkpoint(MPI_Comm comm, const fs::path& job_dir, const CheckpointMeta& meta,
                              const StateView& state, const SaveOptions& options) {
  const StateSlices* lists[3] = {&state.params, &state.m, &state.v};
  return save_step_checkpoint(
      comm, job_dir, meta, [&](StatePart p) { return *lists[static_cast<int>(p)]; }, options);
}

fs::path save_step_checkpoint(MPI_Comm comm, const fs::path& job_dir, const CheckpointMeta& meta,
                              const SliceSource& source, const SaveOptions& options) {
  const fs::path dir = checkpoints_dir(job_dir);
  const fs::path file = dir / step_file_name(meta.step);
  write_checkpoint(comm, file, meta, source, options.write);
  on_root(comm, [&] {
    write_latest(dir, file.filename().string(), options.write.durable);
    prune(dir, options.keep_last, file);
  });
  return file;
}

fs::path save_final_checkpoint(MPI_Comm comm, const fs::path& job_dir, const CheckpointMeta& meta,
                               const StateView& state, const WriteOptions& options) {
  const fs::path file = final_path(job_dir);
  write_checkpoint(comm, file, meta, state, options);
  return file;
}

fs::path save_final_checkpoint(MPI_Comm comm, const fs::path& job_dir, const CheckpointMeta& meta,
                               const SliceSource& source, const WriteOptions& options) {
  const fs::path file = final_path(job_dir);
  write_checkpoint(comm, file, meta, source, options);
  return file;
}

std::optional<std::string> read_latest(const fs::path& job_dir) {
  // A `latest` that cannot be read as a file (missing, or a FIFO or directory put there) is
  // no pointer: the loader then takes the newest checkpoint file it finds.
  std::string text;
  try {
    text = read_input_file(checkpoints_dir(job_dir) / "latest", 4096);
  } catch (const Error&) {
    return std::nullopt;
  }
  std::istringstream in(text);
  std::string name;
  if (!std::getline(in, name)) return std::nullopt;
  while (!name.empty() && (name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return std::nullopt;
  return name;
}

std::vector<fs::path> list_checkpoints(const fs::path& job_dir) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir(job_dir), ec)) {
    if (auto step = parse_step_file_name(e.path().filename().string()))
      found.emplace_back(*step, e.path());
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(std::move(f.second));
  return out;
}

namespace {

// Rank 0's list of candidates, broadcast so that every rank tries the same files in order.
std::vector<fs::path> shared_candidates(MPI_Comm comm, const fs::path& job_dir) {
  std::string text;
  if (rank_of(comm) == 0) {
    const auto latest = read_latest(job_dir);
    const auto files = list_checkpoints(job_dir);
    if (latest && std::none_of(files.begin(), files.end(),
                               [&](const fs::path& f) { return f.filename() == *latest; }))
      log::warn("{} names {}, which does not exist; using the newest checkpoint found instead",
                (checkpoints_dir(job_dir) / "latest").string(), *latest);
    for (const auto& f : files) text += f.string() + '\n';
  }
  bcast_string(comm, text);
  std::vector<fs::path> out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t nl = text.find('\n', pos);
    out.emplace_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  return out;
}

}  // namespace

std::optional<LoadedCheckpoint> load_newest_valid(MPI_Comm comm, const fs::path& job_dir,
                                                  const StateView& into,
                                                  const ReadOptions& options) {
  const StateSlices* lists[3] = {&into.params, &into.m, &into.v};
  return load_newest_valid(
      comm, job_dir, [&](StatePart p) { return *lists[static_cast<int>(p)]; },
      [](StatePart, const StateSlices&) {}, options);
}

std::optional<LoadedCheckpoint> load_newest_valid(MPI_Comm comm, const fs::path& job_dir,
                                                  const SliceSource& source, const SliceSink& sink,
                                                  const ReadOptions& options) {
  std::vector<std::string> rejected;
  for (const auto& file : shared_candidates(comm, job_dir)) {
    try {
      CheckpointMeta meta = read_checkpoint(comm, file, source, sink, options);
      return LoadedCheckpoint{file, std::move(meta), std::move(rejected)};
    } catch (const CheckpointError& e) {
      if (rank_of(comm) == 0) log::warn("{}; falling back to the previous checkpoint", e.what());
      rejected.emplace_back(e.what());
    }
  }
  if (rejected.empty()) return std::nullopt;
  std::string why;
  for (const auto& r : rejected) why += "\n  " + r;
  throw IoError(fmt::format(
      "no valid checkpoint in {} ({} rejected):{}\nmove them away to start the job over",
      checkpoints_dir(job_dir).string(), rejected.size(), why));
}

std::optional<fs::path> find_newest_valid(MPI_Comm comm, const fs::path& job_dir) {
  for (const auto& file : shared_candidates(comm, job_dir)) {
    try {
      const CheckpointInfo info = scan_checkpoint(comm, file, true);
      if (info.all_ok()) return file;
      for (const auto& d : info.datasets)
        if (d.verified && !d.ok && rank_of(comm) == 0)
          log::warn("checkpoint {}: dataset {}: checksum mismatch; trying the previous one",
                    file.string(), d.path);
    } catch (const CheckpointError& e) {
      if (rank_of(comm) == 0) log::warn("{}; trying the previous checkpoint", e.what());
    }
  }
  return std::nullopt;
}

}  // namespace saturn::ckpt
