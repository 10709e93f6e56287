// bind_device on 2 ranks of one host: the node-local rank from MPI_COMM_TYPE_SHARED, and
// failures that every rank reports instead of leaving some in a later collective.
#include <gtest/gtest.h>
#include <mpi.h>

#include <fmt/format.h>

#include "launch/binding.hpp"
#include "runtime/core/error.hpp"

namespace saturn::launch {
namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

std::string bind_error(const Environment& env, const BindOptions& options) {
  try {
    bind_device(MPI_COMM_WORLD, env, options);
  } catch (const InputError& e) {
    return e.what();
  }
  return {};
}

TEST(BindMpi, LocalRankFromSharedMemoryCommunicator) {
  const LocalRank lr = local_rank_from_comm(MPI_COMM_WORLD);
  // All ranks of this test run on one host.
  EXPECT_EQ(lr.size, world_size());
  EXPECT_EQ(lr.rank, world_rank());
  EXPECT_EQ(lr.source, "MPI_COMM_TYPE_SHARED");
}

TEST(BindMpi, CpuBackend) {
  const DeviceChoice c = bind_device(MPI_COMM_WORLD, {}, {DeviceKind::kCpu, false, -1});
  EXPECT_EQ(c.device, fmt::format("cpu:{}", world_rank()));
}

TEST(BindMpi, OneGpuPerRank) {
  // Under mpirun every rank inherits SLURM_LOCALID=0; the shared-memory rank is used instead.
  const Environment env = {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SLURM_LOCALID", "0"}};
  const DeviceChoice c = bind_device(MPI_COMM_WORLD, env, {DeviceKind::kCuda, false, -1});
  EXPECT_EQ(c.device, fmt::format("cuda:{}", world_rank()));
}

TEST(BindMpi, OversubscribedGpuFailsOnEveryRankUnlessAllowed) {
  const Environment one = {{"CUDA_VISIBLE_DEVICES", "0"}};
  const std::string msg = bind_error(one, {DeviceKind::kCuda, false, -1});
  EXPECT_NE(msg.find("would share GPU 0"), std::string::npos) << msg;

  EXPECT_EQ(bind_device(MPI_COMM_WORLD, one, {DeviceKind::kCuda, true, -1}).device, "cuda:0");
  const Environment allowed = {{"CUDA_VISIBLE_DEVICES", "0"},
                               {"SATURN_OVERSUBSCRIBE_DEVICES", "1"}};
  EXPECT_EQ(bind_device(MPI_COMM_WORLD, allowed, {DeviceKind::kCuda, false, -1}).sharers,
            world_size());
}

TEST(BindMpi, OneRankFailingStopsAll) {
  // The last rank sees no GPU; the others name it.
  const bool last = world_rank() == world_size() - 1;
  const Environment env = {{"CUDA_VISIBLE_DEVICES", last ? "" : "0,1,2,3"}};
  const std::string msg = bind_error(env, {DeviceKind::kCuda, false, -1});
  if (last) {
    EXPECT_NE(msg.find("sees no CUDA device"), std::string::npos) << msg;
  } else {
    EXPECT_NE(msg.find(fmt::format("device binding failed on rank {}", world_size() - 1)),
              std::string::npos)
        << msg;
  }
  // Every rank carries the failing rank's reason, so rank 0 alone can report it.
  EXPECT_NE(msg.find("sees no CUDA device"), std::string::npos) << msg;
}

TEST(BindMpi, SlurmJobGpusWithoutCudaVisibleDevices) {
  const Environment env = {{"SLURM_JOB_GPUS", "4,5"}};
  const DeviceChoice c = bind_device(MPI_COMM_WORLD, env, {DeviceKind::kCuda, false, 8});
  EXPECT_EQ(c.device, fmt::format("cuda:{}", 4 + world_rank()));
  EXPECT_EQ(c.ordinal, 4 + world_rank());
}

}  // namespace
}  // namespace saturn::launch
