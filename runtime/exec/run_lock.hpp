// The lock of a run directory (RUN_DIR/run.lock): one `saturn run` at a time per directory.
// Two runs in one directory delete each other's checkpoint files mid-write and interleave their
// metrics and timeline, so a second run (or a --resume while the first is live) is refused.
//
// Rank 0 holds it for the whole run: an exclusive flock(2) on run.lock, whose content names the
// holder ({"host", "pid", "started_utc"}) for the refusal message. The kernel (or the NFS lock
// server) drops the flock when the holder dies, however it dies, so a lock file left by a
// kill -9 is stale: the next run takes it over, saying whose it was. On a file system without
// flock (ENOLCK, ENOSYS, EOPNOTSUPP: e.g. Lustre mounted without -o flock) only the record is
// left: a holder on this host whose pid still runs saturn is live; one on another host cannot
// be checked, and the run goes on with a warning rather than refusing every run there.
#pragma once

#include <filesystem>
#include <string>

namespace saturn::exec {

class RunLock {
 public:
  // Takes the lock of `run_dir`, creating the directory first when `create` (release() then
  // removes it again if it is still empty). InputError naming the holder's host and pid when a
  // live process holds it; IoError when the lock file cannot be written.
  static RunLock acquire(const std::filesystem::path& run_dir, bool create);

  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { release(); }

  // Removes the lock file and unlocks; idempotent.
  void release() noexcept;

  const std::filesystem::path& file() const { return file_; }

 private:
  RunLock() = default;
  std::filesystem::path file_;
  std::filesystem::path created_dir_;  // removed on release when still empty
  int fd_ = -1;
};

}  // namespace saturn::exec
