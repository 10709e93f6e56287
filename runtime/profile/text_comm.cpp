#include "runtime/profile/text_comm.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace saturn::profile {
namespace {

std::vector<std::int32_t> pack(const std::string& text, std::size_t words) {
  std::vector<std::int32_t> out(words, 0);
  if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
  return out;
}

std::size_t words_for(std::size_t bytes) {
  return (bytes + sizeof(std::int32_t) - 1) / sizeof(std::int32_t);
}

}  // namespace

void broadcast_text(comm::Communicator& comm, std::string& text, int root) {
  if (comm.size() == 1) return;
  std::int64_t length = comm.rank() == root ? static_cast<std::int64_t>(text.size()) : 0;
  comm.broadcast(&length, 1, root);
  const std::size_t n = static_cast<std::size_t>(length);
  std::vector<std::int32_t> words =
      comm.rank() == root ? pack(text, words_for(n)) : std::vector<std::int32_t>(words_for(n));
  if (!words.empty()) comm.broadcast(words.data(), words.size(), root);
  text.assign(reinterpret_cast<const char*>(words.data()), n);
}

std::vector<std::string> all_gather_text(comm::Communicator& comm, const std::string& text) {
  const auto p = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> lengths(p);
  const std::int64_t mine = static_cast<std::int64_t>(text.size());
  comm.all_gather(&mine, lengths.data(), 1);
  const std::int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const std::size_t w = words_for(static_cast<std::size_t>(longest));
  std::vector<std::string> out(p);
  if (w == 0) return out;
  const std::vector<std::int32_t> words = pack(text, w);
  std::vector<std::int32_t> all(w * p);
  comm.all_gather(words.data(), all.data(), w);
  for (std::size_t r = 0; r < p; ++r)
    out[r].assign(reinterpret_cast<const char*>(all.data() + r * w),
                  static_cast<std::size_t>(lengths[r]));
  return out;
}

}  // namespace saturn::profile
