// The hardware a profile was measured on. Step times and calibrations are only valid on the
// machine (and rank layout) that produced them, so the store keys everything by this
// fingerprint: device kind, CPU model and cores, threads per rank, the BLAS kernel set, the MPI
// library, and the node layout (ranks per node decide how many ranks share a node's cores).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"

namespace saturn::profile {

struct Hardware {
  std::string device_kind = "cpu";  // the backend the strategies run on
  std::string cpu_model;            // /proc/cpuinfo "model name"
  int cores = 0;                    // hardware threads of one node
  int threads_per_rank = 1;         // OpenMP threads of each rank
  std::string blas;                 // OpenBLAS kernel set (openblas_get_corename)
  std::string mpi;                  // first line of MPI_Get_library_version
  std::vector<int> ranks_per_node;  // one entry per node, in rank order of first appearance
  // On CUDA (rank 0's GPU; empty/0 on the CPU): the GPU model, how many GPUs a rank sees, the
  // memory of one, the driver's and the runtime's CUDA versions ("12.4"). Part of id() only
  // when present, so CPU fingerprints keep their ids.
  std::string gpu_model;
  int gpu_count = 0;
  std::size_t gpu_memory_bytes = 0;
  std::string gpu_driver;
  std::string gpu_runtime;

  int nodes() const { return static_cast<int>(ranks_per_node.size()); }
  int ranks() const;
  // 16 hex digits of a hash of the canonical text: the store's key.
  std::string id() const;
  // One line for tables and logs: "cpu, 2 cores, 1 thread/rank, Haswell BLAS, 1 node x 4 ranks".
  std::string describe() const;
  nlohmann::json to_json() const;
  // InputError naming the missing field when `j` is not a fingerprint.
  static Hardware from_json(const nlohmann::json& j);
  bool operator==(const Hardware& o) const { return id() == o.id(); }
};

// Collective over `world`: this machine's fingerprint, the node layout from the ranks' host
// names. Every rank returns the same value (rank 0's CPU description). node_of_rank, when given,
// receives each rank's node index (into ranks_per_node).
// `device`: the backend the ranks train on (the fingerprint's device_kind: "cpu", or the CUDA
// provider's name and the device's description).
Hardware detect_hardware(comm::Communicator& world, std::vector<int>* node_of_rank = nullptr,
                         DeviceKind device = DeviceKind::kCpu);

// The fingerprint of this process alone (one node, one rank): for tools that run without
// mpirun and only need to recognise the machine (`saturn plan`).
Hardware detect_local_hardware(int ranks = 1);

// FNV-1a 64 of `text`, as 16 hex digits (store keys).
std::string hash_hex(const std::string& text);

}  // namespace saturn::profile
