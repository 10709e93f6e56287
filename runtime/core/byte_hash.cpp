#include "runtime/core/byte_hash.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstring>

namespace saturn {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 32;
  x *= 0xD6E8FEB86659FD93ull;
  x ^= x >> 32;
  return x;
}

}  // namespace

void ByteHash::add_word(std::uint64_t word) {
  sum_ += mix(words_ * 0x9E3779B97F4A7C15ull + word);
  ++words_;
}

void ByteHash::update(const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  bytes_ += n;
  while (n > 0 && pending_bytes_ > 0) {
    pending_ |= static_cast<std::uint64_t>(*p++) << (8 * pending_bytes_);
    --n;
    if (++pending_bytes_ == 8) {
      add_word(pending_);
      pending_ = 0;
      pending_bytes_ = 0;
    }
  }
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, p, 8);  // little-endian hosts only (asserted where files are read)
    add_word(w);
  }
  for (; n > 0; --n) pending_ |= static_cast<std::uint64_t>(*p++) << (8 * pending_bytes_++);
}

std::uint64_t ByteHash::value() const {
  std::uint64_t sum = sum_;
  if (pending_bytes_ > 0) sum += mix(words_ * 0x9E3779B97F4A7C15ull + pending_);
  return mix(sum ^ (bytes_ * 0xC2B2AE3D27D4EB4Full));
}

std::string format_hash(std::uint64_t value) {
  return fmt::format("{:#018x}", value);
}

bool parse_hash(const std::string& text, std::uint64_t& value) {
  if (text.size() < 3 || text.size() > 18 || text[0] != '0' || text[1] != 'x') return false;
  const char* first = text.data() + 2;
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, value, 16);
  return ec == std::errc() && end == last;
}

}  // namespace saturn
