#include "runtime/parallel/assemble.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>

#include "runtime/core/error.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::parallel {

namespace {

// Visits every element run of a box: calls f(flat offset in the tensor, offset in the box's
// data, run length) for each innermost row.
template <typename F>
void for_each_run(const std::vector<std::int64_t>& shape, const TensorSlice& s, F&& f) {
  if (shape.size() == 1) {
    f(s.start[0], std::int64_t{0}, s.count[0]);
    return;
  }
  for (std::int64_t r = 0; r < s.count[0]; ++r)
    f((s.start[0] + r) * shape[1] + s.start[1], r * s.count[1], s.count[1]);
}

std::map<std::string, const ParamTensor*> by_name(const ParameterLayout& layout) {
  std::map<std::string, const ParamTensor*> m;
  for (const auto& t : layout.tensors()) m[t.name] = &t;
  return m;
}

}  // namespace

std::vector<float> assemble_canonical(comm::Communicator& comm, const ModelConfig& model,
                                      const StateSlices& slices, int root) {
  const ParameterLayout layout(model);
  const auto tensors = by_name(layout);
  std::vector<float> out;
  // Each writer slice travels as [tensor index, start0, start1, count0, count1] + data.
  std::vector<std::int64_t> meta;
  std::vector<float> data;
  for (const auto& s : slices) {
    if (!s.writer) continue;
    auto it = tensors.find(s.name);
    if (it == tensors.end()) throw Error(fmt::format("assemble: unknown tensor {}", s.name));
    const std::int64_t index = it->second - layout.tensors().data();
    const bool matrix = s.start.size() == 2;
    meta.insert(meta.end(),
                {index, s.start[0], matrix ? s.start[1] : 0, s.count[0], matrix ? s.count[1] : 1});
    data.insert(data.end(), s.data, s.data + s.elements());
  }
  auto place = [&](const std::int64_t* m, std::size_t n, const float* d) {
    for (std::size_t k = 0; k < n; ++k, m += 5) {
      const ParamTensor& t = layout.tensors()[static_cast<std::size_t>(m[0])];
      TensorSlice s;
      s.shape = t.canonical_shape;
      if (t.canonical_shape.size() == 2) {
        s.start = {m[1], m[2]};
        s.count = {m[3], m[4]};
      } else {
        s.start = {m[1]};
        s.count = {m[3]};
      }
      for_each_run(t.canonical_shape, s, [&](std::int64_t flat, std::int64_t at, std::int64_t len) {
        std::copy(d + at, d + at + len, out.data() + t.offset + flat);
      });
      d += s.elements();
    }
  };
  if (comm.rank() == root) {
    out.assign(layout.total(), 0.0f);
    place(meta.data(), meta.size() / 5, data.data());
    for (int r = 0; r < comm.size(); ++r) {
      if (r == root) continue;
      std::int64_t sizes[2] = {0, 0};
      comm.recv(sizes, 2, r, 0);
      std::vector<std::int64_t> m(static_cast<std::size_t>(sizes[0]));
      std::vector<float> d(static_cast<std::size_t>(sizes[1]));
      if (!m.empty()) comm.recv(m.data(), m.size(), r, 1);
      if (!d.empty()) comm.recv(d.data(), d.size(), r, 2);
      place(m.data(), m.size() / 5, d.data());
    }
  } else {
    std::int64_t sizes[2] = {static_cast<std::int64_t>(meta.size()),
                             static_cast<std::int64_t>(data.size())};
    comm.send(sizes, 2, root, 0);
    if (!meta.empty()) comm.send(meta.data(), meta.size(), root, 1);
    if (!data.empty()) comm.send(data.data(), data.size(), root, 2);
  }
  return out;
}

void fill_from_canonical(const ModelConfig& model, const std::vector<float>& canonical,
                         const StateSlices& slices) {
  const ParameterLayout layout(model);
  const auto tensors = by_name(layout);
  if (canonical.size() != layout.total())
    throw Error(fmt::format("fill_from_canonical: {} floats given, the model has {}",
                            canonical.size(), layout.total()));
  for (const auto& s : slices) {
    auto it = tensors.find(s.name);
    if (it == tensors.end()) throw Error(fmt::format("fill: unknown tensor {}", s.name));
    const ParamTensor& t = *it->second;
    for_each_run(t.canonical_shape, s, [&](std::int64_t flat, std::int64_t at, std::int64_t len) {
      std::copy(canonical.data() + t.offset + flat, canonical.data() + t.offset + flat + len,
                s.data + at);
    });
  }
}

}  // namespace saturn::parallel
