#include "runtime/checkpoint/checksum.hpp"

#include <fmt/format.h>

#include <cstring>

namespace saturn::ckpt {

// Integer-only, so every version gives the same sum; the wide ones (64-bit vector multiplies on
// AVX-512) hash about 40 % faster, which matters on a load where the disk outruns one core.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
std::uint64_t
hash_run(std::uint64_t first_index, const float* data, std::size_t n) {
  constexpr std::uint64_t kIndexMul = 0x9E3779B97F4A7C15ull;
  constexpr std::uint64_t kMix = 0xD6E8FEB86659FD93ull;
  std::uint64_t sum = 0;
  std::uint64_t base = first_index * kIndexMul;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, data + i, sizeof bits);
    std::uint64_t x = base + bits;
    x ^= x >> 32;
    x *= kMix;
    x ^= x >> 32;
    sum += x;
    base += kIndexMul;
  }
  return sum;
}

std::uint64_t hash_box(const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& start,
                       const std::vector<std::int64_t>& count, const float* data) {
  const std::size_t nd = shape.size();
  if (nd == 0) return hash_run(0, data, 1);
  for (auto c : count)
    if (c == 0) return 0;
  std::vector<std::uint64_t> stride(nd, 1);
  for (std::size_t d = nd - 1; d > 0; --d)
    stride[d - 1] = stride[d] * static_cast<std::uint64_t>(shape[d]);
  const auto inner = static_cast<std::size_t>(count[nd - 1]);
  // Walk the rows of the box (every dimension but the last) with an odometer.
  std::vector<std::int64_t> idx(nd, 0);
  std::uint64_t sum = 0;
  const float* p = data;
  while (true) {
    std::uint64_t base = static_cast<std::uint64_t>(start[nd - 1]);
    for (std::size_t d = 0; d + 1 < nd; ++d)
      base += static_cast<std::uint64_t>(start[d] + idx[d]) * stride[d];
    sum += hash_run(base, p, inner);
    p += inner;
    std::size_t d = nd - 1;
    while (d > 0) {
      --d;
      if (++idx[d] < count[d]) break;
      idx[d] = 0;
      if (d == 0) return sum;
    }
    if (nd == 1) return sum;
  }
}

std::string format_checksum(std::uint64_t sum) {
  return fmt::format("{:#018x}", sum);
}

std::uint64_t base_fingerprint_term(const std::string& name, const std::vector<std::int64_t>& shape,
                                    const std::vector<std::int64_t>& start,
                                    const std::vector<std::int64_t>& count, const float* data) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a of the name
  for (const unsigned char c : name) h = (h ^ c) * 0x100000001b3ull;
  return hash_box(shape, start, count, data) * (2 * h + 1);
}

}  // namespace saturn::ckpt
