#include "runtime/core/output_dir.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/core/error.hpp"
#include "runtime/core/files.hpp"

namespace saturn {

namespace fs = std::filesystem;

namespace {

// `inner` is `outer` or lies inside it (both as they resolve on disk, links followed).
bool within(const fs::path& inner, const fs::path& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(inner, ec);
  if (ec) return false;
  const fs::path b = fs::weakly_canonical(outer, ec);
  if (ec) return false;
  auto ia = a.begin();
  for (auto ib = b.begin(); ib != b.end(); ++ib, ++ia) {
    if (ib->empty()) continue;  // a trailing separator
    if (ia == a.end() || *ia != *ib) return false;
  }
  return true;
}

std::string some_entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::size_t count = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (names.size() < 5) names.push_back(e.path().filename().string());
    ++count;
  }
  std::string s = fmt::format("{}", fmt::join(names, ", "));
  if (count > names.size()) s += fmt::format(" and {} more", count - names.size());
  return s;
}

}  // namespace

StagedOutputDir::StagedOutputDir(fs::path target, OutputDirOptions options)
    : target_(std::move(target)) {
  const std::string name = fmt::format("{} {}", options.flag, target_.string());
  if (target_.empty()) throw InputError(fmt::format("{}: no directory given", options.flag));
  for (const auto& [dir, what] : options.protected_dirs)
    if (!dir.empty() && within(target_, dir))
      throw InputError(
          fmt::format("{}: is {}{}, which an export never writes into (valid: another directory)",
                      name, within(dir, target_) ? "" : "inside ", what));
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(target_, ec);
  if (fs::is_symlink(st))
    throw InputError(fmt::format(
        "{}: is a symbolic link; the export replaces the directory as a whole, which would "
        "replace the link (valid: give the directory it points to)",
        name));
  if (fs::exists(st) && !fs::is_directory(st))
    throw InputError(fmt::format("{}: is {}, not a directory", name, describe_file_type(st)));
  if (fs::is_directory(st) && !fs::is_empty(target_, ec) && !options.force &&
      !(options.is_ours && options.is_ours(target_)))
    throw InputError(fmt::format(
        "{}: holds files that are not an earlier export of Saturn's ({}); the export replaces "
        "the whole directory, so it refuses one holding anything else (valid: a new or empty "
        "directory, an earlier export, or --force to delete what it holds)",
        name, some_entries(target_)));
  // A hidden sibling: the same file system, so the final rename is atomic.
  const fs::path parent = target_.has_parent_path() ? target_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  if (ec)
    throw IoError(fmt::format("cannot create the directory {}: {}", parent.string(), ec.message()));
  staging_ = parent / fmt::format(".{}.saturn-staging.{}", target_.filename().string(), ::getpid());
  fs::remove_all(staging_, ec);  // a leftover of a killed process that had this pid
  if (!fs::create_directory(staging_, ec) || ec)
    throw IoError(fmt::format("cannot create the staging directory {}: {}", staging_.string(),
                              ec ? ec.message() : "it exists"));
}

StagedOutputDir::~StagedOutputDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

void StagedOutputDir::commit() {
  std::error_code ec;
  const bool replacing = fs::exists(fs::symlink_status(target_, ec));
  if (!replacing) {
    fs::rename(staging_, target_, ec);
    if (ec)
      throw IoError(fmt::format("cannot rename {} to {}: {}", staging_.string(), target_.string(),
                                ec.message()));
    committed_ = true;
    return;
  }
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    fs::remove_all(staging_, ec);  // now the target's old contents
    return;
  }
  const int err = errno;
  if (err != EINVAL && err != ENOSYS && err != ENOTSUP)
    throw IoError(fmt::format("cannot put {} in place of {}: {}", staging_.string(),
                              target_.string(), std::strerror(err)));
  // No atomic exchange on this file system: move the old directory aside first. Between the two
  // renames the target is missing, never half-written; the old one stays until the new is in.
  const fs::path old = fs::path(staging_.string() + ".old");
  fs::rename(target_, old, ec);
  if (ec)
    throw IoError(fmt::format("cannot move {} aside to {}: {}", target_.string(), old.string(),
                              ec.message()));
  fs::rename(staging_, target_, ec);
  if (ec) {
    std::error_code back;
    fs::rename(old, target_, back);
    throw IoError(fmt::format("cannot rename {} to {}: {}", staging_.string(), target_.string(),
                              ec.message()));
  }
  committed_ = true;
  fs::remove_all(old, ec);
}

}  // namespace saturn
