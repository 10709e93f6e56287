#include "runtime/checkpoint/slices.hpp"

#include <algorithm>

namespace saturn::ckpt {

std::int64_t Box::elements() const {
  std::int64_t n = 1;
  for (auto c : count) n *= c;
  return n;
}

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

namespace {

// Boxes for flat range [begin, end) of the sub-tensor of dims [d, nd) whose origin is `prefix`
// (fixed leading indices); appends to out in flat order.
void range_boxes(const std::vector<std::int64_t>& shape, std::size_t d,
                 std::vector<std::int64_t>& prefix, std::int64_t begin, std::int64_t end,
                 std::vector<Box>& out) {
  if (begin >= end) return;
  const std::size_t nd = shape.size();
  std::int64_t inner = 1;  // elements per index of dimension d
  for (std::size_t k = d + 1; k < nd; ++k) inner *= shape[k];
  auto emit = [&](std::int64_t first, std::int64_t n) {  // whole sub-blocks first..first+n-1
    Box b;
    b.start = prefix;
    b.count.assign(prefix.size(), 1);
    b.start.push_back(first);
    b.count.push_back(n);
    for (std::size_t k = d + 1; k < nd; ++k) {
      b.start.push_back(0);
      b.count.push_back(shape[k]);
    }
    out.push_back(std::move(b));
  };
  std::int64_t first = begin / inner;
  const std::int64_t last = (end - 1) / inner;  // inclusive
  if (begin % inner != 0) {                     // partial leading sub-block
    prefix.push_back(first);
    const std::int64_t stop = std::min(end, (first + 1) * inner);
    range_boxes(shape, d + 1, prefix, begin - first * inner, stop - first * inner, out);
    prefix.pop_back();
    if (stop == end) return;
    ++first;
  }
  const bool tail_partial = end % inner != 0;
  const std::int64_t full_end = tail_partial ? last : last + 1;  // exclusive
  if (full_end > first) emit(first, full_end - first);
  if (tail_partial) {
    prefix.push_back(last);
    range_boxes(shape, d + 1, prefix, 0, end - last * inner, out);
    prefix.pop_back();
  }
}

}  // namespace

std::vector<Box> flat_range_boxes(const std::vector<std::int64_t>& shape, std::int64_t begin,
                                  std::int64_t end) {
  std::vector<Box> out;
  if (shape.empty()) {  // a scalar
    if (begin < end) out.push_back(Box{});
    return out;
  }
  std::vector<std::int64_t> prefix;
  range_boxes(shape, 0, prefix, begin, end, out);
  return out;
}

StateSlices whole_tensor_slices(const ParameterLayout& layout, float* flat) {
  StateSlices out;
  out.reserve(layout.tensors().size());
  for (const auto& t : layout.tensors()) {
    TensorSlice s;
    s.name = t.name;
    s.shape = t.shape;
    s.start.assign(t.shape.size(), 0);
    s.count = t.shape;
    s.data = flat + t.offset;
    out.push_back(std::move(s));
  }
  return out;
}

StateSlices flat_range_slices(const ParameterLayout& layout, std::size_t begin, std::size_t end,
                              float* data) {
  StateSlices out;
  for (const auto& t : layout.tensors()) {
    const std::size_t lo = std::max(begin, t.offset);
    const std::size_t hi = std::min(end, t.offset + t.numel);
    if (lo >= hi) continue;
    float* p = data + (lo - begin);
    for (Box& b : flat_range_boxes(t.shape, static_cast<std::int64_t>(lo - t.offset),
                                   static_cast<std::int64_t>(hi - t.offset))) {
      TensorSlice s;
      s.name = t.name;
      s.shape = t.shape;
      s.start = std::move(b.start);
      s.count = std::move(b.count);
      s.data = p;
      p += s.elements();
      out.push_back(std::move(s));
    }
  }
  return out;
}

bool overlaps(const Box& a, const Box& b) {
  if (a.elements() == 0 || b.elements() == 0) return false;
  for (std::size_t d = 0; d < a.start.size(); ++d) {
    if (a.start[d] + a.count[d] <= b.start[d] || b.start[d] + b.count[d] <= a.start[d])
      return false;
  }
  return true;
}

}  // namespace saturn::ckpt
