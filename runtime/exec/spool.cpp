#include "runtime/exec/spool.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "runtime/core/atomic_file.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::exec {

namespace fs = std::filesystem;

fs::path spool_dir(const fs::path& run_dir) {
  return RunDir(run_dir).spool_dir();
}

namespace {

// RUN_DIR/spool/TIME-PID-KIND.json, written atomically and durably.
fs::path write_request(const fs::path& run_dir, const std::string& kind,
                       const nlohmann::json& request) {
  const fs::path dir = spool_dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  // The time first: the coordinator takes requests in name order.
  const fs::path file = dir / fmt::format("{:020}-{}-{}.json", ns, ::getpid(), kind);
  write_file_atomic(file, request.dump(), Durability::kFsync);
  return file;
}

// The finished requests in spool/ (not temporaries), in name order.
std::vector<fs::path> request_files(const fs::path& dir) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Only finished requests: a temporary (NAME.json.tmp.PID) is still being written.
    if (e.is_regular_file() && name.size() > 5 && name.substr(name.size() - 5) == ".json")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

SpoolRequest parse_request(const fs::path& f) {
  SpoolRequest r;
  try {
    const auto j = nlohmann::json::parse(read_input_file(f));
    r.kind = j.at("kind").get<std::string>();
    r.jobs = j.at("jobs").get<std::vector<std::string>>();
    if (r.kind == "submit") {
      r.submission.source = j.at("source").get<std::string>();
      r.submission.yaml = j.at("yaml").get<std::string>();
    } else if (r.kind != "cancel") {
      r.error = fmt::format("unknown request kind '{}'", r.kind);
    }
  } catch (const nlohmann::json::exception& e) {
    r.error = e.what();
  } catch (const Error& e) {  // not a regular file any more (replaced since it was listed)
    r.error = e.what();
  }
  return r;
}

}  // namespace

fs::path write_cancel_request(const fs::path& run_dir, const std::vector<std::string>& job_ids) {
  return write_request(run_dir, "cancel", {{"kind", "cancel"}, {"jobs", job_ids}});
}

fs::path write_submit_request(const fs::path& run_dir, const Submission& submission,
                              const std::vector<std::string>& ids) {
  return write_request(run_dir, "submit",
                       {{"kind", "submit"},
                        {"jobs", ids},
                        {"source", submission.source.string()},
                        {"yaml", submission.yaml}});
}

std::vector<Submission> waiting_submissions(const fs::path& run_dir) {
  std::vector<Submission> out;
  for (const auto& f : request_files(spool_dir(run_dir))) {
    const SpoolRequest r = parse_request(f);
    if (r.error.empty() && r.kind == "submit") out.push_back(r.submission);
  }
  return out;
}

void finish_taken_request(SpoolRequest& request) {
  const fs::path to = RunDir(request.run_dir).spool_done_dir();
  std::error_code ec;
  fs::create_directories(to, ec);
  const fs::path moved = to / request.file.filename();
  fs::rename(request.file, moved, ec);
  if (!ec) {
    request.file = moved;
    return;
  }
  // Already recorded in RUN_DIR/submitted: left in the spool it would be taken again.
  std::error_code ignored;
  fs::remove(request.file, ignored);
}

void reject_taken_request(SpoolRequest& request, const std::string& reason) {
  const fs::path to = RunDir(request.run_dir).spool_rejected_dir();
  std::error_code ec;
  fs::create_directories(to, ec);
  const fs::path moved = to / request.file.filename();
  fs::rename(request.file, moved, ec);
  if (!ec) request.file = moved;
  request.error = reason;
  // Best effort: the reason is also in the run's log and timeline.
  std::ofstream(fs::path(request.file.string() + ".reason")) << reason << '\n';
}

std::vector<SpoolRequest> take_spool_requests(const fs::path& run_dir) {
  const fs::path dir = spool_dir(run_dir);
  std::error_code ec;
  std::vector<SpoolRequest> out;
  for (const auto& f : request_files(dir)) {
    SpoolRequest r = parse_request(f);
    r.run_dir = run_dir;
    if (r.error.empty() && r.kind == "submit") {
      // Stays in the spool until rank 0 has recorded it in RUN_DIR/submitted (then
      // finish_taken_request) or rejected it: a crash in between leaves it to be taken again.
      r.file = f;
      out.push_back(std::move(r));
      continue;
    }
    const fs::path to =
        r.error.empty() ? RunDir(run_dir).spool_done_dir() : RunDir(run_dir).spool_rejected_dir();
    fs::create_directories(to, ec);
    r.file = to / f.filename();
    fs::rename(f, r.file, ec);
    if (ec) {
      // Left in place it would be taken again each turn (harmless: a cancel is idempotent).
      r.file = f;
      std::error_code ignored;
      fs::remove(f, ignored);
    }
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace saturn::exec
