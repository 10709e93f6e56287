// Device binding decisions: node-local rank sources, visible devices, and the choice itself.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "launch/binding.hpp"
#include "runtime/core/error.hpp"
#include "tests/launch/recorded_env.hpp"

namespace saturn::launch {
namespace {

using Ids = std::vector<std::string>;

std::string choice_error(int local_rank, const std::vector<Ids>& node_visible) {
  try {
    choose_device(DeviceKind::kCuda, local_rank, node_visible, false);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return {};
}

TEST(LocalRankFromEnv, MpirunInsideSbatchIgnoresSlurmLocalid) {
  // Every rank has SLURM_LOCALID=0 there; Open MPI's own variable tells them apart.
  for (int rank = 0; rank < 4; ++rank) {
    const auto lr = local_rank_from_env(recorded::mpirun_rank_two_nodes(rank));
    ASSERT_TRUE(lr);
    EXPECT_EQ(lr->rank, rank % 2);
    EXPECT_EQ(lr->size, 2);
    EXPECT_EQ(lr->source, "OMPI_COMM_WORLD_LOCAL_RANK");
  }
  const auto one = local_rank_from_env(recorded::mpirun_rank_one_node(1));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->rank, 1);
}

TEST(LocalRankFromEnv, SrunTasksUseSlurmLocalid) {
  for (int procid = 0; procid < 4; ++procid) {
    const auto lr = local_rank_from_env(recorded::srun_task_two_nodes(procid));
    ASSERT_TRUE(lr);
    EXPECT_EQ(lr->rank, procid % 2);
    EXPECT_EQ(lr->size, 2);
    EXPECT_EQ(lr->source, "SLURM_LOCALID");
  }
  const auto pmix = local_rank_from_env(recorded::srun_pmix_task_one_node(1));
  ASSERT_TRUE(pmix);
  EXPECT_EQ(pmix->rank, 1);
  EXPECT_EQ(pmix->size, 2);
}

TEST(LocalRankFromEnv, NoAnswerWhereTheEnvironmentCannotTell) {
  EXPECT_FALSE(local_rank_from_env({}));
  // The batch shell: SLURM_LOCALID=0 but no step.
  EXPECT_FALSE(local_rank_from_env(recorded::batch_one_node()));
  // An mpirun rank whose launcher did not export the local rank: SLURM_LOCALID is inherited.
  Environment env = recorded::mpirun_rank_two_nodes(3);
  env.erase("OMPI_COMM_WORLD_LOCAL_RANK");
  env.erase("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_FALSE(local_rank_from_env(env));
  // MPICH's hydra.
  const auto mpich = local_rank_from_env({{"MPI_LOCALRANKID", "3"}, {"MPI_LOCALNRANKS", "4"}});
  ASSERT_TRUE(mpich);
  EXPECT_EQ(mpich->rank, 3);
  EXPECT_THROW(local_rank_from_env(
                   {{"OMPI_COMM_WORLD_LOCAL_RANK", "x"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
               InputError);
}

TEST(VisibleDevices, CudaVisibleDevicesForms) {
  VisibleDevices v = visible_devices({{"CUDA_VISIBLE_DEVICES", "0,1"}}, -1);
  EXPECT_EQ(v.source, "CUDA_VISIBLE_DEVICES");
  ASSERT_EQ(v.devices.size(), 2u);
  EXPECT_EQ(v.devices[1].ordinal, 1);
  EXPECT_EQ(v.devices[1].id, "1");
  EXPECT_EQ(v.devices[1].global_id, "");

  // Slurm with device constraints: indices restart at 0, SLURM_JOB_GPUS has the global ids.
  v = visible_devices({{"CUDA_VISIBLE_DEVICES", "0,1"}, {"SLURM_JOB_GPUS", "2,3"}}, 8);
  ASSERT_EQ(v.devices.size(), 2u);
  EXPECT_EQ(v.devices[0].global_id, "2");
  EXPECT_EQ(v.devices[1].global_id, "3");

  v = visible_devices({{"CUDA_VISIBLE_DEVICES", ""}}, 4);
  EXPECT_TRUE(v.devices.empty());
  EXPECT_EQ(v.source, "CUDA_VISIBLE_DEVICES");

  v = visible_devices({{"CUDA_VISIBLE_DEVICES", "GPU-8c3a1f2e, MIG-0d1e2f3a"}}, -1);
  ASSERT_EQ(v.devices.size(), 2u);
  EXPECT_EQ(v.devices[0].id, "GPU-8c3a1f2e");
  EXPECT_EQ(v.devices[1].id, "MIG-0d1e2f3a");
  EXPECT_EQ(v.devices[1].ordinal, 1);

  // The CUDA runtime stops at the first invalid entry.
  v = visible_devices({{"CUDA_VISIBLE_DEVICES", "0,1,-1,2"}}, -1);
  EXPECT_EQ(v.devices.size(), 2u);
  v = visible_devices({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}}, 4);
  EXPECT_TRUE(v.devices.empty());
}

TEST(VisibleDevices, WithoutCudaVisibleDevices) {
  // SLURM_JOB_GPUS alone: global ids, which are the CUDA ordinals then.
  VisibleDevices v = visible_devices({{"SLURM_JOB_GPUS", "2,3"}}, 4);
  EXPECT_EQ(v.source, "SLURM_JOB_GPUS");
  ASSERT_EQ(v.devices.size(), 2u);
  EXPECT_EQ(v.devices[0].ordinal, 2);
  EXPECT_EQ(v.devices[1].ordinal, 3);

  v = visible_devices({}, 3);
  EXPECT_EQ(v.source, "all 3 devices");
  ASSERT_EQ(v.devices.size(), 3u);
  EXPECT_EQ(v.devices[2].id, "2");

  v = visible_devices({}, -1);
  EXPECT_EQ(v.source, "unknown");
  EXPECT_TRUE(v.devices.empty());
}

TEST(ChooseDevice, CpuBackendGivesEveryRankItsOwnDevice) {
  for (int r = 0; r < 4; ++r) {
    const DeviceChoice c = choose_device(DeviceKind::kCpu, r, 4, {}, false);
    EXPECT_EQ(c.device, fmt::format("cpu:{}", r));
    EXPECT_EQ(c.ordinal, r);
    EXPECT_EQ(c.sharers, 1);
    EXPECT_NE(c.reason.find(fmt::format("local rank {} of 4", r)), std::string::npos);
  }
}

TEST(ChooseDevice, SharedListRoundRobin) {
  // mpirun (or srun --gpus-per-node) in a --gpus-per-node=2 job: every rank sees "0,1".
  const Ids two = {"0", "1"};
  const DeviceChoice c0 = choose_device(DeviceKind::kCuda, 0, 2, two, false);
  const DeviceChoice c1 = choose_device(DeviceKind::kCuda, 1, 2, two, false);
  EXPECT_EQ(c0.device, "cuda:0");
  EXPECT_EQ(c1.device, "cuda:1");
  EXPECT_EQ(c1.id, "1");
  EXPECT_EQ(c1.sharers, 1);
  EXPECT_NE(c1.reason.find("local rank 1 of 2 -> cuda:1"), std::string::npos);

  const Ids uuids = {"GPU-aaaa", "GPU-bbbb"};
  EXPECT_EQ(choose_device(DeviceKind::kCuda, 1, 2, uuids, false).id, "GPU-bbbb");
  // Fewer ranks than GPUs: the first ones are used.
  EXPECT_EQ(choose_device(DeviceKind::kCuda, 0, 1, {"0", "1", "2", "3"}, false).device, "cuda:0");
}

TEST(ChooseDevice, OversubscriptionIsAnErrorUnlessAllowed) {
  const Ids two = {"0", "1"};
  const std::string msg = choice_error(2, std::vector<Ids>(3, two));
  EXPECT_NE(msg.find("2 ranks on this node would share GPU 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3 local ranks, 2 visible GPU(s) [0,1]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("SATURN_OVERSUBSCRIBE_DEVICES=1"), std::string::npos) << msg;
  // Rank 0 shares GPU 0 with rank 2 as well, so it fails too; rank 1 has GPU 1 to itself.
  EXPECT_THROW(choose_device(DeviceKind::kCuda, 0, 3, two, false), InputError);
  EXPECT_NO_THROW(choose_device(DeviceKind::kCuda, 1, 3, two, false));

  const DeviceChoice c = choose_device(DeviceKind::kCuda, 2, 3, two, true);
  EXPECT_EQ(c.device, "cuda:0");
  EXPECT_EQ(c.sharers, 2);
  EXPECT_NE(c.reason.find("oversubscribed"), std::string::npos);
}

TEST(ChooseDevice, PerRankListsFromSrunGpusPerTask) {
  // srun --gpus-per-task=1: each task has its own single-entry CUDA_VISIBLE_DEVICES.
  const std::vector<Ids> lists = {{"0"}, {"1"}};
  const DeviceChoice c0 = choose_device(DeviceKind::kCuda, 0, lists, false);
  const DeviceChoice c1 = choose_device(DeviceKind::kCuda, 1, lists, false);
  EXPECT_EQ(c0.device, "cuda:0");
  EXPECT_EQ(c1.device, "cuda:0");  // ordinal within its own list
  EXPECT_EQ(c0.id, "0");
  EXPECT_EQ(c1.id, "1");
  // Overlapping lists that land on one GPU are oversubscription too.
  EXPECT_NE(choice_error(1, {{"1", "0"}, {"1"}}).find("share GPU 1"), std::string::npos);
  EXPECT_NO_THROW(choose_device(DeviceKind::kCuda, 1, {{"0", "1"}, {"1"}}, false));
}

TEST(ChooseDevice, NoVisibleDeviceIsAClearError) {
  const std::string msg = choice_error(0, {{}});
  EXPECT_NE(msg.find("local rank 0 of 1 sees no CUDA device"), std::string::npos) << msg;
  EXPECT_THROW(choose_device(DeviceKind::kCuda, 0, 2, {}, true), InputError);
  EXPECT_THROW(choose_device(DeviceKind::kCuda, 2, 2, {"0"}, true), Error);
}

}  // namespace
}  // namespace saturn::launch
