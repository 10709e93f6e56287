#include "runtime/checkpoint/plan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <map>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/agreement.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt::detail {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// TensorSlice::writer (when the strategies' contract has it): false marks a replica this rank
// must not write. Detected at compile time so that either form of the struct works.
template <typename S>
bool writes(const S& s) {
  if constexpr (requires { s.writer; })
    return static_cast<bool>(s.writer);
  else
    return true;
}

}  // namespace

std::vector<std::vector<Desc>> gather_descs(MPI_Comm comm, int kind, const StateSlices& slices) {
  json local = json::array();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    const TensorSlice& s = slices[i];
    local.push_back(json{kind, s.name, s.shape, s.start, s.count, s.data != nullptr, i, writes(s)});
  }
  const std::string mine = local.dump();
  const int P = size_of(comm);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(P), displs(P);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm);
  long long total = 0;
  for (int r = 0; r < P; ++r) {
    displs[r] = static_cast<int>(total);
    total += lens[r];
  }
  if (total > INT_MAX) throw Error("checkpoint: slice descriptors exceed 2 GiB");
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR,
                 comm);
  std::vector<std::vector<Desc>> out(P);
  for (int r = 0; r < P; ++r) {
    const json j = json::parse(all.substr(displs[r], lens[r]));
    for (const auto& e : j) {
      Desc d;
      d.kind = e[0].get<int>();
      d.name = e[1].get<std::string>();
      d.shape = e[2].get<std::vector<std::int64_t>>();
      d.box.start = e[3].get<std::vector<std::int64_t>>();
      d.box.count = e[4].get<std::vector<std::int64_t>>();
      d.has_data = e[5].get<bool>();
      d.local = e[6].get<int>();
      d.writer = e[7].get<bool>();
      out[r].push_back(std::move(d));
    }
  }
  return out;
}

std::vector<DatasetPlan> make_plan(const std::vector<std::vector<Desc>>& descs,
                                   const Expected& expected, const fs::path& file, bool writing) {
  std::map<std::pair<int, std::string>, std::size_t> index;
  std::vector<DatasetPlan> plan;
  plan.reserve(expected.size());
  for (const auto& [key, shape] : expected) {
    index[key] = plan.size();
    DatasetPlan p;
    p.kind = key.first;
    p.name = key.second;
    p.shape = shape;
    p.mine.resize(descs.size());
    p.kept.resize(descs.size());
    plan.push_back(std::move(p));
  }
  auto bad = [&](const std::string& ds, const std::string& msg) {
    return Error(fmt::format("checkpoint {}: dataset {}: {}", file.string(), ds, msg));
  };
  for (std::size_t r = 0; r < descs.size(); ++r) {
    for (std::size_t i = 0; i < descs[r].size(); ++i) {
      const Desc& d = descs[r][i];
      if (d.kind < 0 || d.kind >= kKinds) throw Error("checkpoint: bad slice kind");
      const std::string ds = dataset_path(d.kind, d.name);
      const auto it = index.find({d.kind, d.name});
      if (it == index.end())
        throw bad(ds, fmt::format("rank {} passes a slice of a tensor that is not in {}", r,
                                  writing ? "the model's layout" : "the checkpoint"));
      DatasetPlan& p = plan[it->second];
      if (d.shape != p.shape)
        throw bad(ds, fmt::format("rank {} gives shape [{}], the {} has [{}]", r,
                                  fmt::join(d.shape, ", "), writing ? "model" : "checkpoint",
                                  fmt::join(p.shape, ", ")));
      const auto nd = p.shape.size();
      bool in_bounds = d.box.start.size() == nd && d.box.count.size() == nd;
      for (std::size_t k = 0; in_bounds && k < nd; ++k)
        in_bounds = d.box.start[k] >= 0 && d.box.count[k] >= 0 &&
                    d.box.start[k] + d.box.count[k] <= p.shape[k];
      if (!in_bounds)
        throw bad(ds, fmt::format("rank {} gives a box start [{}] count [{}] outside [{}]", r,
                                  fmt::join(d.box.start, ", "), fmt::join(d.box.count, ", "),
                                  fmt::join(p.shape, ", ")));
      if (d.box.elements() > 0 && !d.has_data)
        throw bad(ds, fmt::format("rank {} gives a non-empty slice without data", r));
      if (d.box.elements() > 0 && (d.writer || !writing))
        p.mine[r].push_back(static_cast<int>(i));  // into descs[r]
    }
  }
  for (DatasetPlan& p : plan) {
    // The lowest rank holding a box counts it; identical boxes elsewhere are replicas.
    std::vector<std::pair<int, const Box*>> kept;
    std::int64_t covered = 0;
    for (std::size_t r = 0; r < descs.size(); ++r) {
      for (int i : p.mine[r]) {
        const Box& b = descs[r][static_cast<std::size_t>(i)].box;
        const bool dup =
            std::any_of(kept.begin(), kept.end(), [&](const auto& k) { return *k.second == b; });
        if (dup) continue;
        kept.emplace_back(static_cast<int>(r), &b);
        p.kept[r].push_back(i);
        covered += b.elements();
      }
      p.rounds = std::max(p.rounds, static_cast<int>(p.mine[r].size()));
    }
    bool disjoint = true;
    // Pairwise overlap test where it is cheap; beyond that, the element count alone.
    if (kept.size() <= 256) {
      for (std::size_t a = 0; a < kept.size() && disjoint; ++a)
        for (std::size_t b = a + 1; b < kept.size() && disjoint; ++b)
          if (overlaps(*kept[a].second, *kept[b].second)) {
            disjoint = false;
            if (writing)
              throw bad(p.path(), fmt::format("slices from ranks {} and {} overlap without being "
                                              "identical (pass replicated data as identical boxes)",
                                              kept[a].first, kept[b].first));
          }
    }
    p.tiled = disjoint && covered == numel(p.shape);
    if (writing && !p.tiled)
      throw bad(p.path(), fmt::format("the ranks' slices cover {} of {} elements (every element "
                                      "must be held by some rank)",
                                      covered, numel(p.shape)));
    if (writing) p.mine = p.kept;  // only one copy of a replicated box is written
    for (std::size_t r = 0; r < descs.size(); ++r)
      for (auto* list : {&p.mine[r], &p.kept[r]})
        for (int& i : *list) i = descs[r][static_cast<std::size_t>(i)].local;
  }
  return plan;
}

Expected expected_datasets(const ModelConfig& model, bool with_optimizer) {
  const ParameterLayout layout(model);
  Expected out;
  for (int k = 0; k < (with_optimizer ? kKinds : 1); ++k)
    for (const auto& t : layout.tensors())
      if (t.trainable) out.push_back({{k, t.name}, t.shape});
  return out;
}

Expected expected_of_kind(const ModelConfig& model, int kind) {
  const ParameterLayout layout(model);
  Expected out;
  for (const auto& t : layout.tensors())
    if (t.trainable) out.push_back({{kind, t.name}, t.shape});
  return out;
}

bool any_slices(const std::vector<std::vector<Desc>>& descs) {
  for (const auto& d : descs)
    if (!d.empty()) return true;
  return false;
}

}  // namespace saturn::ckpt::detail
