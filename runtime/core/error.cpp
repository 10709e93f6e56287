#include "runtime/core/error.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

namespace saturn {

OutOfMemoryError::OutOfMemoryError(std::string pool, std::string what_for, std::size_t requested,
                                   std::size_t in_use, std::size_t peak, std::size_t capacity)
    : Error(fmt::format("out of memory on {}: allocating {} for '{}' would exceed the capacity of "
                        "{} ({} in use, peak so far {})",
                        pool, format_bytes(requested), what_for, format_bytes(capacity),
                        format_bytes(in_use), format_bytes(peak))),
      pool_(std::move(pool)),
      what_for_(std::move(what_for)),
      requested_(requested),
      in_use_(in_use),
      peak_(peak),
      capacity_(capacity) {}

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", v, units[u]);
}

std::size_t parse_bytes(const std::string& text, const std::string& what) {
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  const std::string number = text.substr(0, i);
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(number, &used);
    if (used != number.size()) throw std::invalid_argument("trailing");
  } catch (const std::exception&) {
    throw InputError(
        fmt::format("{}: '{}' is not a size (valid: 4096, 512MiB, 2GiB, 1.5GB)", what, text));
  }
  double scale = 1;
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b")
    scale = 1;
  else if (u == "k" || u == "kib" || u == "kb")
    scale = 1024.0;
  else if (u == "m" || u == "mib" || u == "mb")
    scale = 1024.0 * 1024;
  else if (u == "g" || u == "gib" || u == "gb")
    scale = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tib" || u == "tb")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else
    throw InputError(fmt::format("{}: unknown unit '{}' in '{}' (valid: B, KiB, MiB, GiB, TiB)",
                                 what, unit, text));
  // At most 1 EiB: a size_t then holds it, and sums of a few of them, without overflow.
  constexpr double kMaxBytes = 1152921504606846976.0;
  if (value < 0 || !std::isfinite(value) || value * scale > kMaxBytes)
    throw InputError(
        fmt::format("{}: '{}' must be a non-negative size of at most 1 EiB", what, text));
  return static_cast<std::size_t>(std::llround(value * scale));
}

}  // namespace saturn
