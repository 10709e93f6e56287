// JSON files read whole (config.json, an index, run-directory files): through InputFile, so a
// directory or a FIFO where the file belongs is refused by name, and a parse error names the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/core/files.hpp"

namespace saturn {

// InputError "FILE: not JSON (...)" for malformed text; InputFile's refusals before that.
nlohmann::json read_json_file(const std::filesystem::path& path,
                              std::uint64_t max_bytes = kMaxTextFileBytes);
nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path,
                                              std::uint64_t max_bytes = kMaxTextFileBytes);

}  // namespace saturn
