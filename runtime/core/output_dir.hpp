// An output that is a whole directory (a Hugging Face export): written into a staging directory
// beside it, and put in place only once every file is written, so a failed or interrupted write
// leaves the target as it was (never a loadable mix of two models), and a directory that holds
// something else is not replaced unless the user says so.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace saturn {

struct OutputDirOptions {
  // Replace a non-empty directory that is_ours does not recognise (its contents are deleted).
  bool force = false;
  // True for a directory an earlier write of the same kind made, which may be replaced without
  // `force`. Null: only a missing or empty directory may be replaced without it.
  std::function<bool(const std::filesystem::path&)> is_ours;
  // Directories the output may neither be nor lie inside, even with `force` (the model an
  // export was imported from), each with what it is, for the message.
  std::vector<std::pair<std::filesystem::path, std::string>> protected_dirs;
  // How the command names the target in messages, e.g. "-o".
  std::string flag = "-o";
};

class StagedOutputDir {
 public:
  // Checks the target (InputError naming it: a symbolic link, not a directory, a protected
  // directory or one inside it, a non-empty directory that is not ours without force) and makes
  // the staging directory, a hidden sibling of the target.
  StagedOutputDir(std::filesystem::path target, OutputDirOptions options);
  // Removes the staging directory unless committed.
  ~StagedOutputDir();
  StagedOutputDir(const StagedOutputDir&) = delete;
  StagedOutputDir& operator=(const StagedOutputDir&) = delete;

  // Where the files go until commit().
  const std::filesystem::path& path() const { return staging_; }
  const std::filesystem::path& target() const { return target_; }
  // Puts the staged directory in place of the target: one atomic exchange where the file system
  // has it (renameat2 RENAME_EXCHANGE), else two renames; then deletes what the target held.
  void commit();

 private:
  std::filesystem::path target_, staging_;
  bool committed_ = false;
};

}  // namespace saturn
