// Internal to checkpoints: which rank moves which box of which dataset. Every rank passes the
// slices it holds (or wants); their descriptors are gathered, checked against the model's
// layout, and turned into the same plan on every rank: per dataset, each rank's slices to
// write or read, and which copy of a replicated box counts for the checksum.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/checkpoint/metadata.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/model/config.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::ckpt::detail {

// One rank's slice, as every rank sees it.
struct Desc {
  int kind = 0;
  std::string name;
  std::vector<std::int64_t> shape;
  Box box;
  bool has_data = false;
  int local = 0;       // index into the rank's list of this kind
  bool writer = true;  // false: a replica another rank writes
};

// Every rank's slices of one kind, indexed by rank (collective).
std::vector<std::vector<Desc>> gather_descs(MPI_Comm comm, int kind, const StateSlices& slices);

struct DatasetPlan {
  int kind = 0;
  std::string name;
  std::vector<std::int64_t> shape;
  // Per rank: indices into that rank's slices of this kind that it moves, and the subset whose
  // hash counts (replicated boxes count once).
  std::vector<std::vector<int>> mine;
  std::vector<std::vector<int>> kept;
  bool tiled = false;  // kept boxes cover the tensor exactly once
  int rounds = 0;      // max over ranks of mine[r].size()
  std::string path() const { return dataset_path(kind, name); }
};

// (kind, name) -> shape, in file order.
using Expected = std::vector<std::pair<std::pair<int, std::string>, std::vector<std::int64_t>>>;

// Groups every rank's slices by dataset, checks them against the expected shapes, and marks
// which copy of a replicated box counts. Writing, the slices must tile every tensor, and only
// one copy of a replicated box is moved. Throws Error naming the dataset (every rank throws the
// same, as all see the same input).
std::vector<DatasetPlan> make_plan(const std::vector<std::vector<Desc>>& descs,
                                   const Expected& expected, const std::filesystem::path& file,
                                   bool writing);

// The datasets of `model`'s layout (weights, then the moments when with_optimizer).
Expected expected_datasets(const ModelConfig& model, bool with_optimizer);
// The datasets of one kind.
Expected expected_of_kind(const ModelConfig& model, int kind);

// Does any rank pass a slice?
bool any_slices(const std::vector<std::vector<Desc>>& descs);

}  // namespace saturn::ckpt::detail
