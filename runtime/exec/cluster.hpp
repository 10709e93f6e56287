// The cluster a `saturn run` has: nodes (hosts, or the workload's `cluster:` spec laid over the
// ranks), one device per rank, and the map between the solver's global device ids and MPI ranks.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "solver/problem.hpp"

namespace saturn::exec {

struct RankMap {
  solver::Cluster cluster;
  std::vector<int> device_rank;  // global device id -> world rank
  std::vector<int> rank_device;  // world rank -> global device id
  std::vector<std::string> rank_host;
  std::string source;  // "hosts" (auto) or the spec string

  std::vector<int> ranks_of(const std::vector<int>& devices) const;
  nlohmann::json to_json() const;
};

// Collective over `world`. spec "auto": one node per host (MPI_Get_processor_name), devices =
// ranks on it. Otherwise a --cluster SPEC whose device count must equal the world size (virtual
// nodes laid over ranks in order, so multi-node plans can be exercised on one host).
// device_memory_bytes: capacity of every device (0: unknown to the solver).
// `where`: "FILE:LINE:COL" of the workload's cluster entry, to start errors with (or "").
RankMap discover_cluster(MPI_Comm world, const std::string& spec, std::size_t device_memory_bytes,
                         const std::string& where = "");

}  // namespace saturn::exec
