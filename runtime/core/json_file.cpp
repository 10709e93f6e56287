#include "runtime/core/json_file.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace saturn {

namespace {

template <typename Json>
Json parse_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  const std::string text = read_input_file(path, max_bytes);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path.string(), e.what()));
  }
}

}  // namespace

nlohmann::json read_json_file(const std::filesystem::path& path, std::uint64_t max_bytes) {
  return parse_file<nlohmann::json>(path, max_bytes);
}

nlohmann::ordered_json read_ordered_json_file(const std::filesystem::path& path,
                                              std::uint64_t max_bytes) {
  return parse_file<nlohmann::ordered_json>(path, max_bytes);
}

}  // namespace saturn
