// Helpers of the checkpoint tests: small models, known tensor values, and the decompositions a
// strategy may hold (whole tensors, replicas, row blocks, column blocks, flat ranges cutting
// rows, whole layers per rank, several slices of one tensor per rank), as owned StateViews.
#pragma once

#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt::testing {

inline ModelConfig small_model(Arch arch) {
  ModelConfig m;
  m.arch = arch;
  m.n_layer = 2;
  m.n_head = 2;
  m.d_model = 16;
  m.d_ff = arch == Arch::kLlama ? 40 : 0;
  m.vocab_size = 37;  // odd sizes so that splits are uneven
  m.max_seq_len = 11;
  return m;
}

// The value of element `flat` of tensor number `tensor` of state `kind` (0 params, 1 m, 2 v) at
// checkpoint generation `gen`. Exactly reproducible in Python:
//   np.float32(((tensor*7919 + flat*31 + kind*1000003 + gen*7) % 65521) / 65521.0 - 0.5)
inline float known_value(int kind, int tensor, std::int64_t flat, int gen) {
  const std::int64_t k = (tensor * 7919LL + flat * 31LL + kind * 1000003LL + gen * 7LL) % 65521;
  return static_cast<float>(static_cast<double>(k) / 65521.0 - 0.5);
}

// Calls f(global flat index, position in the box's row-major storage) for each element of box.
inline void for_each_element(const std::vector<std::int64_t>& shape, const Box& box,
                             const std::function<void(std::int64_t, std::int64_t)>& f) {
  const std::size_t nd = shape.size();
  if (box.elements() == 0) return;
  std::vector<std::int64_t> idx(nd, 0);
  std::int64_t pos = 0;
  while (true) {
    std::int64_t flat = 0;
    for (std::size_t d = 0; d < nd; ++d) flat = flat * shape[d] + box.start[d] + idx[d];
    f(flat, pos++);
    std::size_t d = nd;
    while (d > 0) {
      --d;
      if (++idx[d] < box.count[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
  }
}

enum class Decomp {
  kRoot,      // rank 0 holds every tensor whole, the others nothing
  kReplicas,  // every rank holds every tensor whole (DDP)
  kRows,      // each tensor split along dim 0 into P row blocks
  kCols,      // each tensor split along its last dim into P column blocks
  kFlat,      // the flat layout split into P equal ranges (FSDP: cuts rows)
  kLayers,    // whole layer groups per rank (pipeline stages)
  kMixed,     // per tensor rows / columns / two flat pieces per rank (several rounds)
};

inline const char* decomp_name(Decomp d) {
  switch (d) {
    case Decomp::kRoot:
      return "root";
    case Decomp::kReplicas:
      return "replicas";
    case Decomp::kRows:
      return "rows";
    case Decomp::kCols:
      return "cols";
    case Decomp::kFlat:
      return "flat";
    case Decomp::kLayers:
      return "layers";
    case Decomp::kMixed:
      return "mixed";
  }
  return "?";
}

inline const std::vector<Decomp>& all_decomps() {
  static const std::vector<Decomp> all = {Decomp::kRoot, Decomp::kReplicas, Decomp::kRows,
                                          Decomp::kCols, Decomp::kFlat,     Decomp::kLayers,
                                          Decomp::kMixed};
  return all;
}

// Slices (with owned storage) of one kind of state that `rank` of `P` holds.
struct OwnedSlices {
  std::vector<std::vector<float>> storage;
  StateSlices slices;
  std::vector<int> tensor_of;  // layout index per slice
};

inline void add_box(OwnedSlices& out, const ParamTensor& t, int tensor, Box box) {
  if (box.elements() == 0) return;
  out.storage.emplace_back(static_cast<std::size_t>(box.elements()), 0.0f);
  TensorSlice s;
  s.name = t.name;
  s.shape = t.shape;
  s.start = std::move(box.start);
  s.count = std::move(box.count);
  out.slices.push_back(std::move(s));
  out.tensor_of.push_back(tensor);
}

// Part k of P of [0, n).
inline std::pair<std::int64_t, std::int64_t> part_of(std::int64_t n, int P, int k) {
  return {n * k / P, n * (k + 1) / P};
}

inline OwnedSlices decompose(const ParameterLayout& layout, Decomp d, int rank, int P) {
  OwnedSlices out;
  const auto& ts = layout.tensors();
  auto whole = [](const ParamTensor& t) {
    return Box{std::vector<std::int64_t>(t.shape.size(), 0), t.shape};
  };
  if (d == Decomp::kFlat) {
    const auto [lo, hi] = part_of(static_cast<std::int64_t>(layout.total()), P, rank);
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const auto a = std::max<std::int64_t>(lo, static_cast<std::int64_t>(ts[i].offset));
      const auto b =
          std::min<std::int64_t>(hi, static_cast<std::int64_t>(ts[i].offset + ts[i].numel));
      if (a >= b) continue;
      for (Box& box : flat_range_boxes(ts[i].shape, a - static_cast<std::int64_t>(ts[i].offset),
                                       b - static_cast<std::int64_t>(ts[i].offset)))
        add_box(out, ts[i], static_cast<int>(i), std::move(box));
    }
  } else {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      const ParamTensor& t = ts[i];
      const int ti = static_cast<int>(i);
      Decomp mode = d;
      if (d == Decomp::kMixed)
        mode = i % 3 == 0 ? Decomp::kRows : i % 3 == 1 ? Decomp::kCols : Decomp::kMixed;
      switch (mode) {
        case Decomp::kRoot:
          if (rank == 0) add_box(out, t, ti, whole(t));
          break;
        case Decomp::kReplicas:
          add_box(out, t, ti, whole(t));
          break;
        case Decomp::kRows:
        case Decomp::kCols: {
          const std::size_t dim = mode == Decomp::kRows ? 0 : t.shape.size() - 1;
          Box b = whole(t);
          const auto [lo, hi] = part_of(t.shape[dim], P, rank);
          b.start[dim] = lo;
          b.count[dim] = hi - lo;
          add_box(out, t, ti, std::move(b));
          break;
        }
        case Decomp::kLayers: {
          const int groups = t.layer + 1;  // -1 .. L
          int ngroups = 0;
          for (const auto& u : ts) ngroups = std::max(ngroups, u.layer + 2);
          if (groups * P / ngroups == rank) add_box(out, t, ti, whole(t));
          break;
        }
        default: {  // two flat pieces per rank: parts 2r and 2r+1 of 2P, in reverse order
          const std::int64_t n = static_cast<std::int64_t>(t.numel);
          for (int k : {2 * rank + 1, 2 * rank}) {
            const auto [lo, hi] = part_of(n, 2 * P, k);
            for (Box& box : flat_range_boxes(t.shape, lo, hi)) add_box(out, t, ti, std::move(box));
          }
        }
      }
    }
  }
  for (std::size_t i = 0; i < out.slices.size(); ++i) out.slices[i].data = out.storage[i].data();
  return out;
}

// A rank's whole state (params, m, v) under a decomposition.
struct OwnedState {
  OwnedSlices kinds[3];
  StateView view() { return StateView{kinds[0].slices, kinds[1].slices, kinds[2].slices}; }
};

inline OwnedState make_state(const ParameterLayout& layout, Decomp d, int rank, int P,
                             bool with_optimizer = true) {
  OwnedState s;
  for (int k = 0; k < (with_optimizer ? 3 : 1); ++k) s.kinds[k] = decompose(layout, d, rank, P);
  return s;
}

// Fills every slice with known_value(kind, tensor, flat, gen).
inline void fill_known(OwnedState& s, int gen) {
  for (int k = 0; k < 3; ++k) {
    auto& o = s.kinds[k];
    for (std::size_t i = 0; i < o.slices.size(); ++i) {
      const TensorSlice& sl = o.slices[i];
      float* data = sl.data;
      const int t = o.tensor_of[i];
      for_each_element(sl.shape, Box{sl.start, sl.count}, [&](std::int64_t flat, std::int64_t pos) {
        data[pos] = known_value(k, t, flat, gen);
      });
    }
  }
}

// Number of elements that differ from known_value(..., gen).
inline std::int64_t count_mismatches(const OwnedState& s, int gen) {
  std::int64_t bad = 0;
  for (int k = 0; k < 3; ++k) {
    const auto& o = s.kinds[k];
    for (std::size_t i = 0; i < o.slices.size(); ++i) {
      const TensorSlice& sl = o.slices[i];
      const int t = o.tensor_of[i];
      for_each_element(sl.shape, Box{sl.start, sl.count}, [&](std::int64_t flat, std::int64_t pos) {
        const float want = known_value(k, t, flat, gen);
        if (std::memcmp(&sl.data[pos], &want, sizeof want) != 0) ++bad;
      });
    }
  }
  return bad;
}

inline CheckpointMeta meta_for(const ModelConfig& model, std::int64_t step, int devices) {
  CheckpointMeta m;
  m.job_id = "test-job";
  m.step = step;
  m.tokens_seen = step * 64;
  m.model = model;
  m.train.batch_size = 4;
  m.train.seq_len = model.max_seq_len;
  m.strategy = "test";
  m.devices = devices;
  m.data_position = "1:" + std::to_string(step);
  m.rng_state = "{\"seed\":7}";
  return m;
}

// A fresh directory every rank of comm agrees on (rank 0 makes it).
inline std::filesystem::path shared_temp_dir(MPI_Comm comm, const std::string& tag) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char buf[512] = {0};
  if (rank == 0) {
    static int counter = 0;
    auto p =
        std::filesystem::temp_directory_path() /
        ("saturn-ckpt-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(p);
    std::filesystem::create_directories(p);
    std::strncpy(buf, p.c_str(), sizeof buf - 1);
  }
  MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, comm);
  return buf;
}

// Flips one bit of byte `offset` of a file.
inline void flip_byte(const std::filesystem::path& file, std::uint64_t offset) {
  FILE* f = std::fopen(file.c_str(), "r+b");
  if (!f) return;
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  const int c = std::fgetc(f);
  std::fseek(f, static_cast<long>(offset), SEEK_SET);
  std::fputc(c ^ 0x10, f);
  std::fclose(f);
}

// Byte offset in the file of a contiguous dataset's data (serial open), or 0.
inline std::uint64_t dataset_offset(const std::filesystem::path& file, const std::string& path) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) return 0;
  const hid_t d = H5Dopen2(f, path.c_str(), H5P_DEFAULT);
  const haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
  if (d >= 0) H5Dclose(d);
  H5Fclose(f);
  return off == HADDR_UNDEF ? 0 : static_cast<std::uint64_t>(off);
}

}  // namespace saturn::ckpt::testing
