#include "runtime/exec/run_lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::exec {
namespace {

namespace fs = std::filesystem;

std::string this_host() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0) return "?";
  return name.data();
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// What a lock file says about its holder.
struct Holder {
  bool known = false;  // the record parsed
  std::string host;
  long long pid = 0;
  std::string started;
  std::string describe() const {
    if (!known) return "an unknown process (its lock record is unreadable)";
    return fmt::format("saturn pid {} on host {} (since {})", pid, host, started);
  }
};

Holder read_holder(int fd) {
  std::string text;
  char buf[4096];
  off_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
    if (text.size() > 65536) break;  // not our record
  }
  Holder h;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("host") && j["host"].is_string() && j.contains("pid") &&
      j["pid"].is_number_integer()) {
    h.known = true;
    h.host = j["host"].get<std::string>();
    h.pid = j["pid"].get<long long>();
    h.started = j.value("started_utc", "?");
  }
  return h;
}

bool empty_file(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && st.st_size == 0;
}

// Without flock: whether a holder on this host still runs (its pid exists and is a saturn).
bool alive_here(const Holder& h) {
  if (!h.known || h.host != this_host() || h.pid <= 0) return false;
  if (::kill(static_cast<pid_t>(h.pid), 0) != 0 && errno != EPERM) return false;
  std::ifstream in(fmt::format("/proc/{}/cmdline", h.pid));
  std::stringstream cmd;
  cmd << in.rdbuf();
  return !in || cmd.str().find("saturn") != std::string::npos;
}

bool locks_unsupported(int err) {
  return err == ENOLCK || err == ENOSYS || err == EOPNOTSUPP || err == EINVAL;
}

InputError in_use(const fs::path& dir, const Holder& h) {
  return InputError(fmt::format(
      "run directory {} is in use by {}: one run at a time per directory; wait for it to end or "
      "stop it ({}), then continue with `saturn run --resume {}`",
      dir.string(), h.describe(),
      h.known ? fmt::format("`kill -USR1 {}` on {} checkpoints its jobs", h.pid, h.host)
              : std::string("its jobs checkpoint on SIGUSR1"),
      dir.string()));
}

}  // namespace

RunLock RunLock::acquire(const fs::path& run_dir, bool create) {
  RunLock lock;
  std::error_code ec;
  if (create && !fs::exists(run_dir, ec)) {
    fs::create_directories(run_dir, ec);
    if (ec)
      throw IoError(
          fmt::format("cannot create the run directory {}: {}", run_dir.string(), ec.message()));
    lock.created_dir_ = run_dir;
  }
  const fs::path file = RunDir(run_dir).lock_file();
  // A releasing holder unlinks the file while it still holds it: a lock taken on that unlinked
  // file is worthless, so it is dropped and the file opened again.
  for (int attempt = 0; attempt < 10; ++attempt) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      throw IoError(fmt::format("cannot open the run directory's lock {}: {}", file.string(),
                                std::strerror(errno)));
    int no_flock = 0;  // errno of a file system without flock
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK) {
        const Holder h = read_holder(fd);
        ::close(fd);
        throw in_use(run_dir, h);
      }
      if (!locks_unsupported(err)) {
        ::close(fd);
        throw IoError(fmt::format("cannot lock {}: {}", file.string(), std::strerror(err)));
      }
      no_flock = err;
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) != 0 || ::stat(file.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);
      continue;
    }
    const Holder old = read_holder(fd);
    if (no_flock != 0) {
      if (alive_here(old)) {
        ::close(fd);
        throw in_use(run_dir, old);
      }
      log::warn(
          "run directory {}: its file system has no flock ({}), so a second run there cannot be "
          "refused reliably; start one run at a time",
          run_dir.string(), std::strerror(no_flock));
    }
    if (!empty_file(fd))
      log::warn("run directory {}: taking over the lock of {}, which is gone (killed?)",
                run_dir.string(), old.describe());
    const std::string record = nlohmann::json{{"host", this_host()},
                                              {"pid", static_cast<long long>(::getpid())},
                                              {"started_utc", utc_now()}}
                                   .dump() +
                               "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, record.data(), record.size(), 0) != static_cast<ssize_t>(record.size())) {
      const int err = errno;
      ::close(fd);
      throw IoError(fmt::format("cannot write {}: {}", file.string(), std::strerror(err)));
    }
    lock.fd_ = fd;
    lock.file_ = file;
    return lock;
  }
  throw IoError(fmt::format("cannot lock {}: it keeps being replaced", file.string()));
}

RunLock::RunLock(RunLock&& other) noexcept
    : file_(std::move(other.file_)),
      created_dir_(std::move(other.created_dir_)),
      fd_(std::exchange(other.fd_, -1)) {
  other.created_dir_.clear();
}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    release();
    file_ = std::move(other.file_);
    created_dir_ = std::move(other.created_dir_);
    other.created_dir_.clear();
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

void RunLock::release() noexcept {
  if (fd_ >= 0) {
    // Unlinked while still held, so no one can lock this file after we let go of it.
    ::unlink(file_.c_str());
    ::close(fd_);
    fd_ = -1;
  }
  if (!created_dir_.empty()) {
    std::error_code ec;
    fs::remove(created_dir_, ec);  // only when empty: a run that wrote nothing leaves nothing
    created_dir_.clear();
  }
}

}  // namespace saturn::exec
