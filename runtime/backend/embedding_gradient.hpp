// The token embedding's gradient sums, one definition for every backend so that the CPU and
// CUDA results are equal bit for bit. A token's occurrences are taken in position order (the
// order of the keys token << 32 | position, sorted), and that sorted list of every token's
// occurrences is cut into windows of kEmbeddingGradientWindow keys at fixed positions (0, 256,
// 512, ...). A token's run of occurrences thus falls into segments, each inside one window; each
// segment is summed from zero in position order, and the segments' sums are added to the
// token's row in order. On a GPU each segment is one block's work, so a token seen thousands of
// times in a step (end-of-text, padding) no longer keeps one block busy while the rest idle.
#pragma once

#include <cstdint>

namespace saturn {

inline constexpr std::uint64_t kEmbeddingGradientWindow = 256;

// The sort key of occurrence `position` of `token`: unique, so the sorted order is too.
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline std::uint64_t
    embedding_gradient_key(std::int32_t token, std::uint64_t position) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) << 32) | position;
}

}  // namespace saturn
