// Small files that readers poll while they change (run_state.json, summary.json, plans, a
// checkpoint directory's `latest`, a report, a batch script): written to a temporary name and
// renamed into place, so a reader sees the old file or the new one, never half of one.
#pragma once

#include <filesystem>
#include <string_view>

namespace saturn {

enum class Durability {
  kNone,   // the rename is atomic for readers; a power loss may lose the write
  kFsync,  // fsync the file before the rename and the directory after it (crash-safe)
};

// Throws IoError naming the file when it cannot be written or renamed; the temporary file is
// removed then. InputError when `path` exists and is not a regular file (check_output_file). `mode`
// (when not perms::unknown) is set before the rename.
void write_file_atomic(const std::filesystem::path& path, std::string_view content,
                       Durability durability = Durability::kNone,
                       std::filesystem::perms mode = std::filesystem::perms::unknown);

}  // namespace saturn
