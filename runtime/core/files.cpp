#include "runtime/core/files.hpp"
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "runtime/core/error.hpp"

namespace saturn {

namespace fs = std::filesystem;

namespace {

// Why open() failed, in the words a user acts on.
std::string open_failure(int err) {
  switch (err) {
    case ENOENT:
      return "does not exist";
    case ELOOP:
      return "is a symbolic-link loop";
    case ENOTDIR:
      return "does not exist (a component of the path is not a directory)";
    case EACCES:
    case EPERM:
      return "cannot be read (permission denied)";
    default:
      return fmt::format("cannot be opened ({})", std::strerror(err));
  }
}

std::string type_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

[[noreturn]] void not_regular(const fs::path& path, mode_t mode) {
  throw InputError(fmt::format("{}: is {}, not a regular file", path.string(), type_of(mode)));
}

}  // namespace

std::string describe_file_type(const fs::file_status& status) {
  switch (status.type()) {
    case fs::file_type::regular:
      return "a regular file";
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::fifo:
      return "a FIFO";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::socket:
      return "a socket";
    case fs::file_type::symlink:
      return "a symbolic link";
    default:
      return "not a regular file";
  }
}

InputFile::InputFile(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    throw InputError(fmt::format("{}: {}", path_.string(), open_failure(err)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    throw IoError(fmt::format("{}: cannot stat it: {}", path_.string(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    not_regular(path_, st.st_mode);
  }
  // Reads of a regular file never block anyway; clearing the flag keeps pread's contract plain.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), size_(other.size_) {}

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
  }
  return *this;
}

void InputFile::read_at(void* buffer, std::size_t n, std::uint64_t offset,
                        std::string_view what) const {
  auto* p = static_cast<char*>(buffer);
  while (n > 0) {
    const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw IoError(fmt::format("{}: cannot read {}: {}", path_.string(), what,
                                got < 0 ? std::strerror(errno) : "unexpected end of file"));
    p += got;
    n -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
}

std::string InputFile::read_all(std::uint64_t max_bytes) const {
  if (size_ > max_bytes)
    throw InputError(fmt::format("{}: {} bytes, more than the {} this file may hold",
                                 path_.string(), size_, max_bytes));
  std::string text(static_cast<std::size_t>(size_), '\0');
  // A file that grows while it is read (a metrics file of a running job) is read as it was.
  if (size_ > 0) read_at(text.data(), text.size(), 0, "it");
  return text;
}

std::string read_input_file(const fs::path& path, std::uint64_t max_bytes) {
  return InputFile(path).read_all(max_bytes);
}

void require_regular_file(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw InputError(fmt::format("{}: {}", path.string(), open_failure(err)));
  }
  if (!S_ISREG(st.st_mode)) not_regular(path, st.st_mode);
}

void check_output_file(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there (or nothing we could replace)
  if (S_ISREG(st.st_mode)) return;
  if (S_ISLNK(st.st_mode)) {
    std::error_code ec;
    const fs::path target = fs::read_symlink(path, ec);
    throw InputError(fmt::format(
        "{}: is a symbolic link{}: Saturn writes a new file and renames it into place, which "
        "would replace the link, not write through it (valid: give the path it points to, or a "
        "new file name)",
        path.string(), ec ? "" : fmt::format(" to {}", target.string())));
  }
  throw InputError(fmt::format(
      "{}: is {}, which an output never replaces (valid: a new file name, or a regular file to "
      "overwrite)",
      path.string(), type_of(st.st_mode)));
}

}  // namespace saturn
