#include "runtime/exec/cluster.hpp"

#include <fmt/format.h>

#include <map>

#include "runtime/core/error.hpp"

namespace saturn::exec {

std::vector<int> RankMap::ranks_of(const std::vector<int>& devices) const {
  std::vector<int> ranks;
  ranks.reserve(devices.size());
  for (int d : devices) ranks.push_back(device_rank.at(static_cast<std::size_t>(d)));
  return ranks;
}

nlohmann::json RankMap::to_json() const {
  nlohmann::json nodes = nlohmann::json::array();
  for (std::size_t n = 0; n < cluster.nodes.size(); ++n) {
    const auto& node = cluster.nodes[n];
    std::vector<int> ranks;
    const int first = cluster.first_device(static_cast<int>(n));
    for (int d = first; d < first + node.devices; ++d)
      ranks.push_back(device_rank[static_cast<std::size_t>(d)]);
    nodes.push_back({{"name", node.name},
                     {"devices", node.devices},
                     {"memory_gib", node.memory_gib},
                     {"ranks", ranks},
                     {"host", rank_host[static_cast<std::size_t>(ranks.front())]}});
  }
  return {{"source", source}, {"device_kind", "cpu"}, {"nodes", nodes}};
}

RankMap discover_cluster(MPI_Comm world, const std::string& spec, std::size_t device_memory_bytes,
                         const std::string& where) {
  const std::string field = where.empty() ? "cluster" : where + ": cluster";
  int rank = 0, size = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, world);
  RankMap m;
  for (int r = 0; r < size; ++r)
    m.rank_host.emplace_back(all.data() + static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME);
  const double mem_gib = static_cast<double>(device_memory_bytes) / (1024.0 * 1024 * 1024);
  m.rank_device.assign(static_cast<std::size_t>(size), -1);
  if (spec.empty() || spec == "auto") {
    m.source = "hosts";
    std::vector<std::string> hosts;
    std::map<std::string, std::vector<int>> ranks_by_host;
    for (int r = 0; r < size; ++r) {
      const auto& h = m.rank_host[static_cast<std::size_t>(r)];
      if (!ranks_by_host.count(h)) hosts.push_back(h);
      ranks_by_host[h].push_back(r);
    }
    for (std::size_t n = 0; n < hosts.size(); ++n) {
      const auto& ranks = ranks_by_host[hosts[n]];
      m.cluster.nodes.push_back({hosts.size() == 1 ? "n0" : fmt::format("n{}", n),
                                 static_cast<int>(ranks.size()), mem_gib});
      for (int r : ranks) {
        m.rank_device[static_cast<std::size_t>(r)] = static_cast<int>(m.device_rank.size());
        m.device_rank.push_back(r);
      }
    }
  } else {
    m.source = spec;
    try {
      m.cluster = solver::parse_cluster_spec(spec);
    } catch (const solver::SolverError& e) {
      throw InputError(fmt::format("{}: {}", field, e.what()));
    }
    if (m.cluster.total_devices() != size)
      throw InputError(
          fmt::format("{}: '{}' has {} devices but the run has {} ranks (one "
                      "device per rank); use cluster: auto or start {} ranks",
                      field, spec, m.cluster.total_devices(), size, m.cluster.total_devices()));
    for (auto& node : m.cluster.nodes)
      if (node.memory_gib == 0) node.memory_gib = mem_gib;
    for (int r = 0; r < size; ++r) {
      m.rank_device[static_cast<std::size_t>(r)] = r;
      m.device_rank.push_back(r);
    }
  }
  return m;
}

}  // namespace saturn::exec
