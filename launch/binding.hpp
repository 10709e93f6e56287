// Which device each rank uses. A rank's node-local rank picks a device among those visible to
// it; the decision itself (choose_device) is a pure function, so every rule is unit-tested.
//
// Rules:
//  * CPU backend: every rank is its own device "cpu:<local rank>"; nothing can be oversubscribed.
//  * CUDA backend: local ranks that see the same visible list share it round-robin, in local-rank
//    order (device = list[position % size]). That covers mpirun and srun --gpus-per-node, where
//    every rank sees "0,1", and srun --gpus-per-task=1, where each rank sees its own single GPU.
//    More sharers than devices is an error unless oversubscription is allowed.
//  * The node-local rank comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) when MPI is up;
//    before that from OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID (MPICH), then SLURM_LOCALID,
//    the latter only in an srun task that no mpirun started (under mpirun every rank inherits
//    SLURM_LOCALID=0).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include "launch/slurm_env.hpp"

namespace saturn::launch {

enum class DeviceKind { kCpu, kCuda };

struct LocalRank {
  int rank = 0;
  int size = 1;
  std::string source;  // where it came from, for the log: "MPI_COMM_TYPE_SHARED", a variable
};

// Collective over `comm`: the rank and size within the calling process's shared-memory node.
LocalRank local_rank_from_comm(MPI_Comm comm);

// The node-local rank as the launcher's environment states it; nullopt when it does not say.
// Throws InputError for a malformed value.
std::optional<LocalRank> local_rank_from_env(const Environment& env);

// One device a rank can see.
struct VisibleDevice {
  int ordinal = 0;  // what cudaSetDevice takes: the index within CUDA_VISIBLE_DEVICES when set
  std::string id;   // as the environment names it: "1", "GPU-8c3a…", "MIG-…"
  std::string global_id;  // SLURM_JOB_GPUS entry for it when that can be told; else empty
};

struct VisibleDevices {
  std::vector<VisibleDevice> devices;
  std::string source;  // "CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS", "all N devices", "none"
};

// The CUDA devices this process can use. CUDA_VISIBLE_DEVICES wins when set (empty = none; the
// list ends at its first invalid entry, as the CUDA runtime reads it); else SLURM_JOB_GPUS
// (global ids, which are then also the CUDA ordinals); else 0..physical_count-1.
// physical_count < 0 means unknown: then an unset CUDA_VISIBLE_DEVICES and SLURM_JOB_GPUS give
// an empty list with source "unknown".
VisibleDevices visible_devices(const Environment& env, int physical_count);

struct DeviceChoice {
  std::string device;  // "cpu:3" or "cuda:1" (cuda:<ordinal>)
  // CUDA: the index within the rank's visible list, which is the ordinal for cudaSetDevice when
  // CUDA_VISIBLE_DEVICES is set (bind_device maps it to the ordinal otherwise).
  // CPU: the local rank.
  int ordinal = 0;
  std::string id;      // the visible entry chosen ("1", "GPU-…"); empty for the CPU backend
  int sharers = 1;     // local ranks that use this same device (>1 only when oversubscribed)
  std::string reason;  // one line for the log
};

// The device for local rank `local_rank` of a node whose ranks see node_visible[r] (one list
// per local rank, so node_visible.size() is the local size). Throws InputError when a rank sees
// no device, or when more ranks share a list than it has devices and !allow_oversubscribe.
DeviceChoice choose_device(DeviceKind kind, int local_rank,
                           const std::vector<std::vector<std::string>>& node_visible,
                           bool allow_oversubscribe);

// The same when every local rank sees `visible` (the usual mpirun / --gpus-per-node case).
DeviceChoice choose_device(DeviceKind kind, int local_rank, int local_size,
                           const std::vector<std::string>& visible, bool allow_oversubscribe);

struct BindOptions {
  DeviceKind kind = DeviceKind::kCpu;
  bool allow_oversubscribe = false;
  int physical_count = -1;  // CUDA devices the runtime reports; -1 unknown
};

// Collective over `comm`: finds the node-local rank (split_type), gathers every local rank's
// visible devices, chooses, and logs the choice. When any rank's choice fails, every rank
// throws (the failing rank's own message; the others name the failing world rank), so no rank
// is left waiting in a later collective.
DeviceChoice bind_device(MPI_Comm comm, const Environment& env, const BindOptions& options);

}  // namespace saturn::launch
