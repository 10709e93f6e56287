// The canonical (unsharded) parameter layout, as pieces. A strategy exports what one rank holds
// as slices of canonical tensors: a DDP rank or a single device holds whole tensors, an FSDP
// rank a flat range, a pipeline stage its layers, a tensor-parallel rank column or row blocks.
// Checkpoints write every rank's slices as hyperslabs of the canonical datasets, and read back
// only the slices a rank needs, so any strategy at any degree loads any checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace saturn {

// A box of a canonical tensor: shape is the full tensor's, [start, start + count) per
// dimension is the part held here, stored row-major and contiguous at `data`.
struct TensorSlice {
  std::string name;                 // canonical (Hugging Face) name, e.g. model.norm.weight
  std::vector<std::int64_t> shape;  // full tensor shape
  std::vector<std::int64_t> start;  // per dimension
  std::vector<std::int64_t> count;  // per dimension
  float* data = nullptr;            // count[0] * count[1] * ... floats
  // Replicated state (DDP replicas, what every tensor-parallel rank holds, GPT-2's tied
  // embedding on the last pipeline stage) is exported by every holder; exactly one holder
  // (the lowest rank) marks its copy writer = true, so a checkpoint that honours the flag
  // writes each element once. Every holder still reads (imports) its copy.
  bool writer = true;

  std::int64_t elements() const {
    std::int64_t n = 1;
    for (auto c : count) n *= c;
    return n;
  }
};

// What a rank holds of one kind of state (weights, AdamW m, AdamW v).
using StateSlices = std::vector<TensorSlice>;

}  // namespace saturn
