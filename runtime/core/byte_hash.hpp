// A 64-bit checksum of a byte stream ("saturn-bytes64-v1"), for noticing that a file changed
// (a run records the Hugging Face models it started from; --resume refuses them changed). Not
// cryptographic. The stream is cut into little-endian 8-byte words w_i (the last zero-padded),
// each mixed with its index as the checkpoints' per-element hash is (checksum.hpp), and summed;
// the length is mixed in last, so trailing zero bytes count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace saturn {

class ByteHash {
 public:
  void update(const void* data, std::size_t n);
  std::uint64_t value() const;
  std::uint64_t bytes() const { return bytes_; }

 private:
  void add_word(std::uint64_t word);
  std::uint64_t sum_ = 0;
  std::uint64_t words_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t pending_ = 0;  // bytes of an unfinished word, little-endian
  unsigned pending_bytes_ = 0;
};

// "0x0123456789abcdef".
std::string format_hash(std::uint64_t value);
// format_hash's text back; false when it is not "0x" and 1 to 16 hex digits.
bool parse_hash(const std::string& text, std::uint64_t& value);

}  // namespace saturn
