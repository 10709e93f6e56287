// Files a user hands Saturn, and files Saturn writes where a user points it. Every reader of an
// input file opens it through InputFile, and every writer that replaces a file by renaming a new
// one over it asks check_output_file first, so that:
//   - a directory, a FIFO, a device or a socket where a file belongs is an InputError naming it
//     (exit 2), before anything is read: nothing blocks on a FIFO, and no message says only
//     "basic_filebuf::underflow error reading the file";
//   - an output never replaces something that is not a plain file (as root, renaming over
//     /dev/full or a symbolic link to /proc/self/fd/1 would have replaced them with a file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace saturn {

// The largest text file read whole by default (configs, run-directory files, metrics); callers
// with a tighter bound pass their own.
inline constexpr std::uint64_t kMaxTextFileBytes = std::uint64_t{1} << 30;

// A regular file open for reading. The open cannot block (O_NONBLOCK, cleared once the file is
// known to be regular). Symbolic links are followed: a Hugging Face cache's snapshot holds links
// to its blobs.
class InputFile {
 public:
  // InputError "PATH: WHAT" when the path does not exist, is not a regular file, or cannot be
  // opened (permissions, a symbolic-link loop, a component that is not a directory).
  explicit InputFile(std::filesystem::path path);
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Reads exactly n bytes at `offset`; IoError naming the file and `what` on an error or a
  // file that ends first.
  void read_at(void* buffer, std::size_t n, std::uint64_t offset, std::string_view what) const;
  // The whole file; InputError when it holds more than max_bytes.
  std::string read_all(std::uint64_t max_bytes = kMaxTextFileBytes) const;

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// InputFile(path).read_all(max_bytes).
std::string read_input_file(const std::filesystem::path& path,
                            std::uint64_t max_bytes = kMaxTextFileBytes);

// The same refusals as InputFile from the path's status alone, for files another library opens
// (HDF5): InputError when it does not exist or is not a regular file.
void require_regular_file(const std::filesystem::path& path);

// An output file about to be written by renaming a new file over it: InputError when `path`
// exists and is not a regular file (a directory, a FIFO, a device, a socket, or a symbolic
// link, which the rename would replace rather than write through). A missing path is fine.
void check_output_file(const std::filesystem::path& path);

// "a directory", "a FIFO", "a character device", ... for messages; "a regular file" too.
std::string describe_file_type(const std::filesystem::file_status& status);

}  // namespace saturn
