// Typed errors. Each carries the context a user needs (file, line, field, job, rank, device)
// in its message; the CLI maps the type to the process exit code (see exit_code_for).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>

namespace saturn {

// Exit codes of the command-line contract (DESIGN.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitCheckpointed = 99;

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad input or usage: malformed files, unknown keys, impossible shapes. Exit code 2.
class InputError : public Error {
 public:
  using Error::Error;
};

// An I/O failure on a file the user gave us or we write (data, checkpoints, run directory).
class IoError : public Error {
 public:
  using Error::Error;
};

// A device or host memory pool would exceed its capacity. Raised at the first allocation
// that does not fit, before anything is allocated.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(std::string pool, std::string what_for, std::size_t requested,
                   std::size_t in_use, std::size_t peak, std::size_t capacity);
  const std::string& pool() const { return pool_; }
  const std::string& what_for() const { return what_for_; }
  std::size_t requested() const { return requested_; }
  std::size_t in_use() const { return in_use_; }
  std::size_t peak() const { return peak_; }
  std::size_t capacity() const { return capacity_; }

 private:
  std::string pool_, what_for_;
  std::size_t requested_, in_use_, peak_, capacity_;
};

// Human-readable byte count: "1.50 GiB".
std::string format_bytes(std::size_t bytes);

// Parses "512MiB", "2GiB", "1.5G", "4096" (bytes). Throws InputError naming `what` on failure.
std::size_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace saturn
