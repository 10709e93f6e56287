#include "runtime/core/log.hpp"

#include <cstdio>
#include <mutex>

namespace saturn::log {
namespace {
Level g_level = Level::kInfo;
int g_rank = -1;
std::mutex g_mutex;
}  // namespace

void set_level(Level l) {
  g_level = l;
}
Level level() {
  return g_level;
}
void set_rank(int rank) {
  g_rank = rank;
}

void write(Level l, std::string_view message) {
  static const char* names[] = {"debug", "info", "warning", "error"};
  std::lock_guard<std::mutex> lock(g_mutex);
  std::string prefix = g_rank >= 0 ? fmt::format("[saturn r{}]", g_rank) : "[saturn]";
  if (l == Level::kInfo) {
    std::fprintf(stderr, "%s %.*s\n", prefix.c_str(), static_cast<int>(message.size()),
                 message.data());
  } else {
    std::fprintf(stderr, "%s %s: %.*s\n", prefix.c_str(), names[static_cast<int>(l)],
                 static_cast<int>(message.size()), message.data());
  }
  std::fflush(stderr);
}

}  // namespace saturn::log
