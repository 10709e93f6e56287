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

namespace saturn::exec {

namespace fs = std::filesystem;

fs::path spool_dir(const fs::path& run_dir) {
  return run_dir / "spool";
}

fs::path write_cancel_request(const fs::path& run_dir, const std::vector<std::string>& job_ids) {
  const fs::path dir = spool_dir(run_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  // The time first: the coordinator takes requests in name order.
  const fs::path file = dir / fmt::format("{:020}-{}-cancel.json", ns, ::getpid());
  write_file_atomic(file, nlohmann::json{{"kind", "cancel"}, {"jobs", job_ids}}.dump(),
                    Durability::kFsync);
  return file;
}

std::vector<SpoolRequest> take_spool_requests(const fs::path& run_dir) {
  const fs::path dir = spool_dir(run_dir);
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    // Only finished requests: a temporary (NAME.json.tmp.PID) is still being written.
    if (e.is_regular_file() && name.size() > 5 && name.substr(name.size() - 5) == ".json")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<SpoolRequest> out;
  for (const auto& f : files) {
    SpoolRequest r;
    std::ifstream in(f);
    std::stringstream text;
    text << in.rdbuf();
    try {
      const auto j = nlohmann::json::parse(text.str());
      r.kind = j.at("kind").get<std::string>();
      r.jobs = j.at("jobs").get<std::vector<std::string>>();
      if (r.kind != "cancel") r.error = fmt::format("unknown request kind '{}'", r.kind);
    } catch (const nlohmann::json::exception& e) {
      r.error = e.what();
    }
    const fs::path to = dir / (r.error.empty() ? "done" : "rejected");
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
