// Helpers that turn what a strategy holds into TensorSlices (runtime/parallel/canonical.hpp), the
// only thing checkpoints see. A strategy that holds whole tensors, a flat range of the canonical
// layout (FSDP/ZeRO shards), or row/column blocks (tensor parallel) builds its lists with these.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/model/parameters.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::ckpt {

// A box of a tensor: [start, start + count) per dimension.
struct Box {
  std::vector<std::int64_t> start;
  std::vector<std::int64_t> count;
  std::int64_t elements() const;
  bool operator==(const Box&) const = default;
};

std::int64_t numel(const std::vector<std::int64_t>& shape);

// The boxes that cover the row-major flat range [begin, end) of a tensor of `shape`, in flat
// order, so their elements laid end to end are the range itself: at most 2·ndim − 1 boxes
// (a partial row, whole rows, a partial row, recursively per dimension).
std::vector<Box> flat_range_boxes(const std::vector<std::int64_t>& shape, std::int64_t begin,
                                  std::int64_t end);

// Every tensor of the layout whole; `flat` is the whole canonical flat buffer (a single device
// or a DDP replica).
StateSlices whole_tensor_slices(const ParameterLayout& layout, float* flat);

// The elements [begin, end) of the canonical flat layout as slices (an FSDP/ZeRO shard, an
// offload chunk, a pipeline stage's group range); `data` points at element `begin`.
StateSlices flat_range_slices(const ParameterLayout& layout, std::size_t begin, std::size_t end,
                              float* data);

// Boxes overlap (same tensor assumed)?
bool overlaps(const Box& a, const Box& b);

}  // namespace saturn::ckpt
