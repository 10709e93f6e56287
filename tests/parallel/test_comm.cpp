// The Communicator contract on the MPI backend (2 and 4 ranks): every collective, blocking and
// non-blocking, point-to-point, splits, accounting, and failure agreement.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"

namespace saturn::comm {
namespace {

Communicator& world() {
  static std::unique_ptr<MpiCommunicator> w = MpiCommunicator::world();
  return *w;
}

TEST(Comm, AllreduceSumAvgMaxMin) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  std::vector<float> x = {1.0f * r, 2.0f, -1.0f * r};
  c.allreduce(x.data(), x.size(), ReduceOp::kSum);
  EXPECT_FLOAT_EQ(x[0], n * (n - 1) / 2.0f);
  EXPECT_FLOAT_EQ(x[1], 2.0f * n);
  std::vector<double> y = {1.0 * r, 4.0};
  c.allreduce(y.data(), y.size(), ReduceOp::kAvg);
  EXPECT_DOUBLE_EQ(y[0], (n - 1) / 2.0);
  EXPECT_DOUBLE_EQ(y[1], 4.0);
  std::int32_t mx = r, mn = r;
  c.allreduce(&mx, 1, ReduceOp::kMax);
  c.allreduce(&mn, 1, ReduceOp::kMin);
  EXPECT_EQ(mx, n - 1);
  EXPECT_EQ(mn, 0);
  std::int32_t bad = 1;
  EXPECT_THROW(c.allreduce(&bad, 1, ReduceOp::kAvg), Error);  // average needs floats
}

TEST(Comm, ReduceScatterAndAllGather) {
  Communicator& c = world();
  const int n = c.size(), r = c.rank();
  const std::size_t k = 3;
  std::vector<float> send(k * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = static_cast<float>(i + r);
  std::vector<float> recv(k);
  c.reduce_scatter(send.data(), recv.data(), k, ReduceOp::kSum);
  for (std::size_t i = 0; i < k; ++i) {
    const float idx = static_cast<float>(static_cast<std::size_t>(r) * k + i);
    EXPECT_FLOAT_EQ(recv[i], n * idx + n * (n - 1) / 2.0f);
  }
  std::vector<float> all(k * static_cast<std::size_t>(n));
  std::vector<float> mine = {1.0f * r, 10.0f * r, 100.0f * r};
  c.all_gather(mine.data(), all.data(), k);
  for (int q = 0; q < n; ++q) EXPECT_FLOAT_EQ(all[static_cast<std::size_t>(q) * k + 1], 10.0f * q);
  // In place: this rank's block already sits in the output.
  std::vector<float> inplace(k * static_cast<std::size_t>(n), -1.0f);
  for (std::size_t i = 0; i < k; ++i) inplace[static_cast<std::size_t>(r) * k + i] = mine[i];
  c.all_gather(inplace.data() + static_cast<std::size_t>(r) * k, inplace.data(), k);
  EXPECT_EQ(inplace, all);
}

TEST(Comm, BroadcastSendRecvBarrier) {
  Communicator& c = world();
  std::vector<std::int64_t> v(4, c.rank() == 1 ? 42 : 0);
  c.broadcast(v.data(), v.size(), 1);
  EXPECT_EQ(v, std::vector<std::int64_t>(4, 42));
  // A ring: each rank sends to the next and receives from the previous.
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  float out = static_cast<float>(c.rank()), in = -1;
  Request s = c.isend(&out, 1, next, 5);
  c.recv(&in, 1, prev, 5);
  s.wait();
  EXPECT_FLOAT_EQ(in, static_cast<float>(prev));
  c.barrier();
}

TEST(Comm, NonBlockingCollectivesCompleteOnWait) {
  Communicator& c = world();
  const int n = c.size();
  std::vector<float> a(1000, 1.0f), b(1000, 2.0f);
  Request ra = c.iallreduce(a.data(), a.size(), ReduceOp::kSum);
  Request rb = c.iallreduce(b.data(), b.size(), ReduceOp::kAvg);
  std::vector<float> g(static_cast<std::size_t>(n) * 2);
  float mine[2] = {static_cast<float>(c.rank()), 7.0f};
  Request rg = c.iall_gather(mine, g.data(), 2);
  std::vector<float> rs_in(static_cast<std::size_t>(n) * 2, 1.0f), rs_out(2);
  Request rr = c.ireduce_scatter(rs_in.data(), rs_out.data(), 2, ReduceOp::kSum);
  float got = -1, sent = 3.0f;
  Request rv = c.irecv(&got, 1, (c.rank() + n - 1) % n, 9);
  Request sv = c.isend(&sent, 1, (c.rank() + 1) % n, 9);
  while (!ra.test()) {
  }
  rb.wait();
  rg.wait();
  rr.wait();
  rv.wait();
  sv.wait();
  EXPECT_FALSE(ra.pending());
  EXPECT_FLOAT_EQ(a[999], static_cast<float>(n));
  EXPECT_FLOAT_EQ(b[0], 2.0f);
  EXPECT_FLOAT_EQ(g[2 * static_cast<std::size_t>(n - 1)], static_cast<float>(n - 1));
  EXPECT_FLOAT_EQ(rs_out[1], static_cast<float>(n));
  EXPECT_FLOAT_EQ(got, 3.0f);
}

TEST(Comm, SplitFormsSubCommunicators) {
  Communicator& c = world();
  // Even and odd ranks; rank 0 additionally alone in a third split.
  auto half = c.split(c.rank() % 2, c.rank());
  ASSERT_NE(half, nullptr);
  EXPECT_EQ(half->size(), c.size() / 2);
  EXPECT_EQ(half->rank(), c.rank() / 2);
  float x = 1.0f;
  half->allreduce(&x, 1, ReduceOp::kSum);
  EXPECT_FLOAT_EQ(x, static_cast<float>(c.size() / 2));
  auto solo = c.split(c.rank() == 0 ? 0 : -1, 0);
  EXPECT_EQ(solo != nullptr, c.rank() == 0);
}

TEST(Comm, StatsCountTimeAndBytes) {
  Communicator& c = world();
  auto sub = c.split(0, c.rank());
  EXPECT_EQ(sub->stats().calls, 0u);
  std::vector<float> x(256, 1.0f);
  sub->allreduce(x.data(), x.size(), ReduceOp::kSum);
  Request r = sub->iallreduce(x.data(), x.size(), ReduceOp::kSum);
  r.wait();
  EXPECT_EQ(sub->stats().calls, 2u);
  EXPECT_EQ(sub->stats().bytes, 2u * 256 * sizeof(float));
  EXPECT_GT(sub->stats().seconds, 0.0);
  sub->reset_stats();
  EXPECT_EQ(sub->stats().bytes, 0u);
}

TEST(Comm, SelfCommunicatorIsTheOneRankCase) {
  SelfCommunicator s;
  float x[2] = {1, 2}, y[2] = {0, 0};
  s.allreduce(x, 2, ReduceOp::kAvg);
  s.all_gather(x, y, 2);
  EXPECT_FLOAT_EQ(y[1], 2.0f);
  EXPECT_THROW(s.send(x, 1, 1, 0), Error);
}

TEST(Comm, AgreeMakesEveryRankFailWithTheLowestFailingRanksMessage) {
  Communicator& c = world();
  EXPECT_NO_THROW(agree(c, nullptr));
  const int failing = c.size() - 1;
  try {
    agree_on(c, [&] {
      if (c.rank() == failing) throw InputError("data file missing");
    });
    FAIL() << "expected AgreedFailure";
  } catch (const AgreedFailure& e) {
    EXPECT_EQ(e.exit_code(), kExitBadInput);
    EXPECT_EQ(e.origin_rank(), failing);
    EXPECT_NE(std::string(e.what()).find("data file missing"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(failing)), std::string::npos);
  }
  try {
    agree_on(c, [&] { throw Error("disk on fire"); });
    FAIL() << "expected AgreedFailure";
  } catch (const AgreedFailure& e) {
    EXPECT_EQ(e.exit_code(), kExitFailure);
    EXPECT_EQ(e.origin_rank(), 0);
    EXPECT_EQ(std::string(e.what()), "disk on fire");  // every rank failed alike: no prefix
  }
}

}  // namespace
}  // namespace saturn::comm
