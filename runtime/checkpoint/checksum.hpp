// The per-dataset checksum of checkpoints ("saturn-hash64-v1"). It is a sum over the elements of
// a hash of (global index, bits), so any rank can hash just the boxes it holds and a wrapping
// MPI sum combines them: no rank ever needs the whole tensor.
//
//   for element i (row-major flat index in the canonical tensor) with float32 bit pattern b:
//     x = i * 0x9E3779B97F4A7C15 + b          (mod 2^64; b as an unsigned 32-bit integer)
//     x ^= x >> 32;  x *= 0xD6E8FEB86659FD93;  x ^= x >> 32
//   checksum = sum of x over all elements      (mod 2^64)
//
// Each step is a bijection, so changing any one element always changes the sum, and the index
// term catches swapped elements. numpy recomputes it in five lines (docs/checkpoints.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace saturn::ckpt {

inline constexpr const char* kChecksumAlgorithm = "saturn-hash64-v1";

// Hash sum of n consecutive elements whose first has global flat index `first_index`.
std::uint64_t hash_run(std::uint64_t first_index, const float* data, std::size_t n);

// Hash sum of a box [start, start + count) of a row-major tensor of `shape`, the box's elements
// stored contiguously (row-major) at `data`.
std::uint64_t hash_box(const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& start,
                       const std::vector<std::int64_t>& count, const float* data);

// A LoRA job's base fingerprint (CheckpointMeta::base_checksum) is the sum over its frozen
// tensors of hash_box(tensor) times (2 · FNV-1a(name) + 1), an odd factor: a sum of boxes'
// terms, so ranks holding parts of the base add theirs. This is one box's term.
std::uint64_t base_fingerprint_term(const std::string& name, const std::vector<std::int64_t>& shape,
                                    const std::vector<std::int64_t>& start,
                                    const std::vector<std::int64_t>& count, const float* data);

// "0x0123456789abcdef".
std::string format_checksum(std::uint64_t sum);

}  // namespace saturn::ckpt
