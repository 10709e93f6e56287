// The emulator's WMMA (emu_wmma.hpp): the seeded element-to-lane mappings and the operand checks.
#include "tests/gpu/emu/emu_wmma.hpp"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <numeric>
#include <random>

namespace emu::wmma_detail {

namespace {

std::array<Mapping, kKinds> make_mappings() {
  std::uint64_t seed = 20240520ULL;
  if (const char* s = std::getenv("SATURN_EMU_SEED"); s != nullptr)
    seed = std::strtoull(s, nullptr, 10);
  std::array<Mapping, kKinds> maps{};
  for (int k = 0; k < kKinds; ++k) {
    // One permutation per kind: a kernel must not assume that a and b, or a row-major and a
    // column-major a, share a layout either.
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(k) + 1);
    std::array<unsigned char, 256> perm{};
    std::iota(perm.begin(), perm.end(), static_cast<unsigned char>(0));
    std::shuffle(perm.begin(), perm.end(), rng);
    for (int i = 0; i < 256; ++i) {
      maps[k].pos[i] = perm[i];
      maps[k].owner[perm[i]] = static_cast<unsigned char>(i);
    }
  }
  return maps;
}

}  // namespace

const Mapping& mapping(Kind kind) {
  static const std::array<Mapping, kKinds> maps = make_mappings();
  return maps[kind];
}

void check_operand(const char* what, const void* ptr, unsigned ldm, int layout,
                   std::size_t element_bytes) {
  if (ptr == nullptr) warp_violation(what, "null pointer");
  // CUDA's WMMA: mptr 256-bit aligned; ldm a multiple of 8 for 16-bit elements, 4 for float.
  if (reinterpret_cast<std::uintptr_t>(ptr) % 32 != 0)
    warp_violation(what, ("pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(ptr)) +
                          " is not 256-bit (32-byte) aligned")
                             .c_str());
  if ((static_cast<std::size_t>(ldm) * element_bytes) % 16 != 0 || ldm == 0)
    warp_violation(what, ("ldm " + std::to_string(ldm) + " is not a positive multiple of " +
                          std::to_string(16 / element_bytes) + " elements")
                             .c_str());
  if (layout != 0 && layout != 1) warp_violation(what, "unknown layout");
}

void agree_on_operand(const char* what, const void* ptr, unsigned ldm, int layout) {
  struct Operand {
    const void* ptr;
    unsigned ldm;
    int layout;
  };
  const Operand mine{ptr, ldm, layout};
  const auto* all = static_cast<const unsigned char*>(warp_rendezvous(what, &mine, sizeof mine));
  for (unsigned l = 0; l < 32; ++l) {
    Operand theirs;
    std::memcpy(&theirs, all + static_cast<std::size_t>(l) * kMaxRendezvousBytes, sizeof theirs);
    if (theirs.ptr != ptr || theirs.ldm != ldm || theirs.layout != layout)
      warp_violation(what, ("lane " + std::to_string(l) +
                            " passed another pointer, ldm or layout: the operands of a "
                            "warp-collective operation must be the same on every lane")
                               .c_str());
  }
}

}  // namespace emu::wmma_detail
