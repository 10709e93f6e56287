#include "runtime/profile/file_system.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "runtime/core/error.hpp"

namespace saturn::profile {

namespace fs = std::filesystem;

double WriteRates::seconds(double bytes, double datasets) const {
  return measured() ? latency_s + bytes / bytes_per_s + datasets * dataset_s : 0.0;
}

namespace {

void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("cannot open {}: {}", dir.string(), std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw IoError(fmt::format("fsync {}: {}", dir.string(), std::strerror(err)));
}

// One probe: `bytes` written to a temporary name, fsynced, renamed, the directory fsynced (the
// steps of an atomic checkpoint write). Returns its seconds.
double timed_write(const fs::path& dir, std::size_t bytes) {
  const fs::path tmp = dir / fmt::format(".saturn-write-probe-{}.tmp", ::getpid());
  const fs::path final_path = dir / fmt::format(".saturn-write-probe-{}", ::getpid());
  const std::vector<char> data(bytes, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw IoError(fmt::format("cannot write in {} to measure its write rate: {}", dir.string(),
                              std::strerror(errno)));
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data.data() + done, bytes - done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw IoError(fmt::format("writing {}: {}", tmp.string(), std::strerror(err)));
    }
    done += static_cast<std::size_t>(n);
  }
  const int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) {
    const int err = errno;
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw IoError(fmt::format("fsync {}: {}", tmp.string(), std::strerror(err)));
  }
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw IoError(fmt::format("renaming {}: {}", tmp.string(), ec.message()));
  }
  fsync_directory(dir);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fs::remove(final_path, ec);
  return s;
}

}  // namespace

std::string file_system_id(const fs::path& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) return {};
  while (!fs::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
  struct statfs fs_info {};
  struct stat st {};
  if (::statfs(p.c_str(), &fs_info) != 0 || ::stat(p.c_str(), &st) != 0) return {};
  return fmt::format("fs-{:x}-dev-{}:{}", static_cast<unsigned long>(fs_info.f_type),
                     major(st.st_dev), minor(st.st_dev));
}

WriteRates measure_write_rates(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw IoError(
        fmt::format("cannot create {} to measure its write rate: {}", dir.string(), ec.message()));
  // The small file's best of three is the fixed cost; the large one's (best of two) excess over
  // it, the rate. The large one takes at most an eighth of the free space: the probe must not
  // be what fills a small disk.
  constexpr std::size_t kSmall = 4096, kLargest = 16u << 20;
  const fs::space_info space = fs::space(dir, ec);
  const std::size_t large_bytes = std::clamp<std::size_t>(
      ec ? kLargest : static_cast<std::size_t>(space.available / 8), 16 * kSmall, kLargest);
  double small = 1e30, large = 1e30;
  for (int i = 0; i < 3; ++i) small = std::min(small, timed_write(dir, kSmall));
  for (int i = 0; i < 2; ++i) large = std::min(large, timed_write(dir, large_bytes));
  WriteRates r;
  r.latency_s = small;
  r.bytes_per_s = static_cast<double>(large_bytes - kSmall) / std::max(large - small, 1e-6);
  return r;
}

}  // namespace saturn::profile
