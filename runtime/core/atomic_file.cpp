#include "runtime/core/atomic_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"

namespace saturn {
namespace {

namespace fs = std::filesystem;

void fsync_path(const fs::path& path, int flags, bool must) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    if (must) throw IoError(fmt::format("cannot fsync {}: {}", path.string(), std::strerror(err)));
    return;
  }
  ::close(fd);
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view content, Durability durability,
                       fs::perms mode) {
  check_output_file(path);
  // One temporary name per process: two processes writing the same file do not mix bytes.
  const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  std::error_code ec;
  try {
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out.write(content.data(), static_cast<std::streamsize>(content.size()));
      out.close();
      if (!out) throw IoError(fmt::format("cannot write {}", tmp.string()));
    }
    if (durability == Durability::kFsync) fsync_path(tmp, O_RDONLY, true);
    if (mode != fs::perms::unknown) {
      fs::permissions(tmp, mode, ec);
      if (ec)
        throw IoError(
            fmt::format("cannot set the permissions of {}: {}", tmp.string(), ec.message()));
    }
    fs::rename(tmp, path, ec);
    if (ec)
      throw IoError(
          fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message()));
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  // The rename itself is durable only once the directory entry is on disk; best effort (some
  // file systems refuse to fsync a directory).
  if (durability == Durability::kFsync)
    fsync_path(path.has_parent_path() ? path.parent_path() : fs::path("."), O_RDONLY | O_DIRECTORY,
               false);
}

}  // namespace saturn
