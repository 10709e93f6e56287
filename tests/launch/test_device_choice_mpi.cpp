// --device auto|cpu|cuda (runtime/cli/device_choice) on 2 ranks, with providers that report a
// GPU on some ranks and none on others: auto takes CUDA only when every rank has a GPU, every
// rank reaches the same answer, and cuda without a GPU names the provider's reason.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/cli/device_choice.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"

namespace saturn::cli {
namespace {

constexpr const char* kNoGpuReason = "test provider: this rank has no GPU";

int two_gpus(std::string*) {
  return 2;
}
int no_gpu(std::string* why) {
  if (why != nullptr) *why = kNoGpuReason;
  return 0;
}
int query_fails(std::string*) {
  throw Error("test provider: the driver query failed");
}
std::string gpu_name(int) {
  return "Test GPU";
}

// A provider reporting `count`: only device_count and device_name are read by the decision.
CudaProvider provider_with(int (*count)(std::string*)) {
  CudaProvider p;
  p.name = "test";
  p.device_count = count;
  p.device_name = &gpu_name;
  return p;
}

class DeviceChoice : public ::testing::Test {
 protected:
  void TearDown() override { install_cuda_provider(); }
  std::shared_ptr<comm::Communicator> world_ = comm::MpiCommunicator::world();
  CudaProvider provider_;
  void use(int (*count)(std::string*)) {
    provider_ = provider_with(count);
    set_cuda_provider(provider_);
  }
};

TEST_F(DeviceChoice, AutoIsCudaWhenEveryRankHasAGpu) {
  use(&two_gpus);
  EXPECT_EQ(resolve_device("auto", *world_), DeviceKind::kCuda);
}

TEST_F(DeviceChoice, AutoIsCpuOnEveryRankWhenOneRankHasNone) {
  ASSERT_GE(world_->size(), 2) << "run under mpirun -np 2";
  use(world_->rank() == 1 ? &no_gpu : &two_gpus);
  EXPECT_EQ(resolve_device("auto", *world_), DeviceKind::kCpu);
}

TEST_F(DeviceChoice, AutoTreatsAFailingQueryAsNoGpuAndStillAgrees) {
  use(world_->rank() == 0 ? &query_fails : &two_gpus);
  EXPECT_EQ(resolve_device("auto", *world_), DeviceKind::kCpu);
}

TEST_F(DeviceChoice, CpuIsCpuWithGpus) {
  use(&two_gpus);
  EXPECT_EQ(resolve_device("cpu", *world_), DeviceKind::kCpu);
}

TEST_F(DeviceChoice, CudaWithoutAGpuIsAnInputErrorWithTheReason) {
  use(&no_gpu);
  try {
    resolve_device("cuda", *world_);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(kNoGpuReason), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device cuda"), std::string::npos) << e.what();
  }
  use(&two_gpus);
  EXPECT_EQ(resolve_device("cuda", *world_), DeviceKind::kCuda);
}

TEST_F(DeviceChoice, UnknownNameIsAnInputError) {
  EXPECT_THROW(resolve_device("gpu", *world_), InputError);
}

}  // namespace
}  // namespace saturn::cli
