// The NCCL communicator on one GPU with a one-rank bootstrap (SelfCommunicator): the plumbing
// (unique-id broadcast, communicator set-up, types, in-place and out-of-place buffers, ordering
// after the compute stream, requests, split) without MPI. Several ranks need several GPUs; the
// lent machine has one (docs/cuda.md lists what this leaves unverified).
#include "runtime/comm/nccl_communicator.hpp"
#include "tests/gpu/gpu_test_util.hpp"

namespace saturn::gpu_test {
namespace {

class GpuNccl : public GpuTest {};

TEST_F(GpuNccl, OneRankCollectivesFollowTheComputeStream) {
  comm::SelfCommunicator boot;
  comm::NcclCommunicator nccl(boot, 0, ctx().stream());
  EXPECT_EQ(nccl.rank(), 0);
  EXPECT_EQ(nccl.size(), 1);
  EXPECT_NE(nccl.describe().find("nccl"), std::string::npos);

  // A large fill queued on the compute stream right before an out-of-place all-gather: the
  // gather must copy the filled values, not what was there before.
  const std::size_t n = std::size_t{64} << 20;
  float* send = alloc<float>(n);
  float* recv = poisoned_f32(n);
  SATURN_CUDA_CHECK(cudaMemset(send, 0, n * sizeof(float)));
  cuda::fill(ctx(), send, 3.5f, n);
  nccl.all_gather(send, recv, n);
  const Vec got = download(recv, n);
  for (std::size_t i = 0; i < n; i += 4099) ASSERT_EQ(got[i], 3.5f) << i;
  EXPECT_EQ(got.back(), 3.5f);

  const Vec x = random(1000);
  float* d = upload_f32(x);
  nccl.allreduce(d, x.size(), comm::ReduceOp::kSum);
  SATURN_EXPECT_CLOSE(download(d, x.size()), x, 1e-30);
  nccl.allreduce(d, x.size(), comm::ReduceOp::kAvg);
  SATURN_EXPECT_CLOSE(download(d, x.size()), x, 1e-7);
  nccl.broadcast(d, x.size(), 0);
  float* rs = poisoned_f32(x.size());
  nccl.reduce_scatter(d, rs, x.size(), comm::ReduceOp::kSum);
  SATURN_EXPECT_CLOSE(download(rs, x.size()), x, 1e-30);
  nccl.all_gather(d, d, x.size());  // in place: send == recv + rank * count
  SATURN_EXPECT_CLOSE(download(d, x.size()), x, 1e-30);

  auto* ints = alloc<std::int32_t>(8);
  EXPECT_THROW(nccl.allreduce(ints, 8, comm::ReduceOp::kAvg), Error);

  // Non-blocking: a kernel queued after wait() sees the result.
  float* y = upload_f32(x);
  comm::Request r = nccl.iallreduce(y, x.size(), comm::ReduceOp::kSum);
  r.wait();
  bf16* yb = poisoned_bf16(x.size());
  cuda::convert(ctx(), yb, y, x.size());  // queued on the compute stream after the wait
  Vec xb = x;
  for (float& v : xb) v = __bfloat162float(__float2bfloat16(v));
  SATURN_EXPECT_CLOSE(download(yb, x.size()), xb, 1e-30);
  EXPECT_GT(nccl.stats().calls, 0u);
  EXPECT_GT(nccl.stats().bytes, 0u);

  auto sub = nccl.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  sub->allreduce(d, x.size(), comm::ReduceOp::kMax);
  SATURN_EXPECT_CLOSE(download(d, x.size()), x, 1e-30);
  EXPECT_EQ(nccl.split(-1, 0), nullptr);
}

}  // namespace
}  // namespace saturn::gpu_test
