// NcclCommunicator against the emulator's fake NCCL (emu_nccl.cpp) under mpirun: operations
// run late (only when something orders on their stream), complete out of order across streams,
// and read and write device memory the host cannot touch. Every operation and element type
// must give NCCL's results; grouped send/recv pairs in both directions must not deadlock; the
// fake must catch a kernel that reads a result without waiting for it (the test proves the
// fake's strictness, so that the strategies' runs over it mean something); an asynchronous
// error on one rank must make every rank throw NcclError within the timeout instead of hanging
// (test_emulated_nccl_failure_np2, with SATURN_EMU_NCCL_FAIL); a dead peer during set-up, a
// group or a collective likewise (test_emulated_nccl_dead_*, with SATURN_EMU_NCCL_DEAD); two
// communicators whose operations the ranks issue in different orders deadlock, as on a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "runtime/backend/cuda/device.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/comm/nccl_communicator.hpp"
#include "runtime/core/dtype.hpp"

namespace saturn::comm {
namespace {

MpiCommunicator& world() {
  static std::unique_ptr<MpiCommunicator> w = MpiCommunicator::world();
  return *w;
}

// This rank's emulated GPU (its own ordinal, as NCCL needs) and a NCCL communicator of the world
// following its compute stream.
struct Rank {
  cuda::CudaDevice device{world().rank(), std::size_t{64} << 20};
  NcclCommunicator nccl{world(), device.index(), device.context().stream()};
  std::vector<void*> owned;
  int r = world().rank(), p = world().size();
  ~Rank() {
    for (void* q : owned) cudaFree(q);
  }
  // Fresh device memory: NaN bytes, as the emulator fills it.
  void* alloc(std::size_t bytes) {
    void* q = nullptr;
    EXPECT_EQ(cudaMalloc(&q, bytes), cudaSuccess);
    owned.push_back(q);
    return q;
  }
};

// Element values are doubles in the tests, stored in each type.
void store(DType t, void* at, std::size_t i, double v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(at)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(at)[i] = v;
      break;
    case DType::kInt32:
      static_cast<std::int32_t*>(at)[i] = static_cast<std::int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<std::int64_t*>(at)[i] = static_cast<std::int64_t>(v);
      break;
    case DType::kBFloat16:
      static_cast<BFloat16*>(at)[i] = to_bfloat16(static_cast<float>(v));
      break;
  }
}
double load(DType t, const void* at, std::size_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(at)[i];
    case DType::kFloat64:
      return static_cast<const double*>(at)[i];
    case DType::kInt32:
      return static_cast<const std::int32_t*>(at)[i];
    case DType::kInt64:
      return static_cast<const std::int64_t*>(at)[i];
    case DType::kBFloat16:
      return to_float(static_cast<const BFloat16*>(at)[i]);
  }
  return 0;
}

void* upload(Rank& k, DType t, const std::vector<double>& v) {
  std::vector<std::byte> h(v.size() * dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) store(t, h.data(), i, v[i]);
  void* d = k.alloc(h.size());
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size(), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}

std::vector<double> download(DType t, const void* d, std::size_t n) {
  std::vector<std::byte> h(n * dtype_size(t));
  EXPECT_EQ(cudaMemcpy(h.data(), d, h.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = load(t, h.data(), i);
  return v;
}

// Rank r's contribution: small integers, exact in every type (bf16 included) and in their sums.
std::vector<double> values(int r, std::size_t n, int salt = 0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<double>((r + 1) * (static_cast<int>(i % 7) - 3) +
                               static_cast<int>((i + static_cast<std::size_t>(salt)) % 5));
  return v;
}

void expect_values(const std::vector<double>& got, const std::vector<double>& want, double tol,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * std::max(1.0, std::abs(want[i])))
        << what << " element " << i << " on rank " << world().rank();
}

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt32,
                        DType::kInt64};

bool floating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16;
}

TEST(EmulatedNccl, EveryCollectiveAndTypeLateAndOutOfOrder) {
  Rank k;
  const std::size_t n = 1000;  // not a multiple of anything in particular
  for (DType t : kTypes) {
    const std::string ty = dtype_name(t);
    // allreduce: sum, max, min, and avg for floating types.
    std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin};
    if (floating(t)) ops.push_back(ReduceOp::kAvg);
    for (ReduceOp op : ops) {
      void* d = upload(k, t, values(k.r, n));
      k.nccl.allreduce(d, n, t, op);
      std::vector<double> want(n);
      for (std::size_t i = 0; i < n; ++i) {
        double acc = values(0, n)[i];
        for (int q = 1; q < k.p; ++q) {
          const double v = values(q, n)[i];
          acc = op == ReduceOp::kMax   ? std::max(acc, v)
                : op == ReduceOp::kMin ? std::min(acc, v)
                                       : acc + v;
        }
        want[i] = op == ReduceOp::kAvg ? acc / k.p : acc;
      }
      const double tol = t == DType::kBFloat16 && op == ReduceOp::kAvg ? 1.0 / 128 : 1e-12;
      expect_values(download(t, d, n), want, tol, "allreduce " + ty + " " + reduce_op_name(op));
    }
    if (!floating(t)) {
      void* d = upload(k, t, values(k.r, n));
      EXPECT_THROW(k.nccl.allreduce(d, n, t, ReduceOp::kAvg), Error);
    }

    // reduce-scatter into a NaN-filled buffer.
    {
      void* send = upload(k, t, values(k.r, n * static_cast<std::size_t>(k.p)));
      void* recv = k.alloc(n * dtype_size(t));
      k.nccl.reduce_scatter(send, recv, n, t, ReduceOp::kSum);
      std::vector<double> want(n, 0);
      for (int q = 0; q < k.p; ++q)
        for (std::size_t i = 0; i < n; ++i)
          want[i] +=
              values(q, n * static_cast<std::size_t>(k.p))[static_cast<std::size_t>(k.r) * n + i];
      expect_values(download(t, recv, n), want, 1e-12, "reduce_scatter " + ty);
    }
    // all-gather, out of place and in place.
    {
      std::vector<double> want;
      for (int q = 0; q < k.p; ++q) {
        const auto v = values(q, n, 3);
        want.insert(want.end(), v.begin(), v.end());
      }
      void* send = upload(k, t, values(k.r, n, 3));
      void* recv = k.alloc(want.size() * dtype_size(t));
      k.nccl.all_gather(send, recv, n, t);
      expect_values(download(t, recv, want.size()), want, 0, "all_gather " + ty);
      std::vector<double> mine(want.size(), -1);
      for (std::size_t i = 0; i < n; ++i)
        mine[static_cast<std::size_t>(k.r) * n + i] = want[static_cast<std::size_t>(k.r) * n + i];
      void* inplace = upload(k, t, mine);
      k.nccl.all_gather(
          static_cast<std::byte*>(inplace) + static_cast<std::size_t>(k.r) * n * dtype_size(t),
          inplace, n, t);
      expect_values(download(t, inplace, want.size()), want, 0, "in-place all_gather " + ty);
    }
    // broadcast from the last rank.
    {
      void* d = upload(k, t, values(k.r, n, 1));
      k.nccl.broadcast(d, n, t, k.p - 1);
      expect_values(download(t, d, n), values(k.p - 1, n, 1), 0, "broadcast " + ty);
    }
    // Non-blocking, three at once, waited in reverse order of issue; the first look at each is
    // "not complete" (the fake completes late).
    {
      void* a = upload(k, t, values(k.r, n));
      void* rs_send = upload(k, t, values(k.r, n * static_cast<std::size_t>(k.p)));
      void* rs_recv = k.alloc(n * dtype_size(t));
      void* ag_recv = k.alloc(n * static_cast<std::size_t>(k.p) * dtype_size(t));
      void* ag_send = upload(k, t, values(k.r, n, 3));
      Request ra = k.nccl.iallreduce(a, n, t, ReduceOp::kSum);
      Request rb = k.nccl.ireduce_scatter(rs_send, rs_recv, n, t, ReduceOp::kSum);
      Request rc = k.nccl.iall_gather(ag_send, ag_recv, n, t);
      EXPECT_FALSE(rc.test()) << "the fake NCCL completed an operation at once";
      rc.wait();
      rb.wait();
      ra.wait();
      std::vector<double> sum(n, 0), rs(n, 0), ag;
      for (int q = 0; q < k.p; ++q) {
        const auto v = values(q, n);
        const auto w = values(q, n * static_cast<std::size_t>(k.p));
        const auto g = values(q, n, 3);
        for (std::size_t i = 0; i < n; ++i) {
          sum[i] += v[i];
          rs[i] += w[static_cast<std::size_t>(k.r) * n + i];
        }
        ag.insert(ag.end(), g.begin(), g.end());
      }
      expect_values(download(t, a, n), sum, 1e-12, "iallreduce " + ty);
      expect_values(download(t, rs_recv, n), rs, 1e-12, "ireduce_scatter " + ty);
      expect_values(download(t, ag_recv, ag.size()), ag, 0, "iall_gather " + ty);
    }
  }
  EXPECT_GT(k.nccl.stats().calls, 0u);
}

TEST(EmulatedNccl, GroupedSendRecvPairsInBothDirections) {
  Rank k;
  const std::size_t n = 333;
  const int next = (k.r + 1) % k.p, prev = (k.r + k.p - 1) % k.p;
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    // Every rank sends to both neighbours and receives from both, all at once, and waits in
    // reverse order: NCCL needs them in one group (at p = 2 both neighbours are one peer, and
    // each pair of ranks sends to each other simultaneously).
    void* to_next = upload(k, t, values(k.r, n, 1));
    void* to_prev = upload(k, t, values(k.r, n, 2));
    void* from_prev = k.alloc(n * dtype_size(t));
    void* from_next = k.alloc(n * dtype_size(t));
    Request s1 = k.nccl.isend(to_next, n, t, next, 7);
    Request s2 = k.nccl.isend(to_prev, n, t, prev, 8);
    Request r1 = k.nccl.irecv(from_prev, n, t, prev, 7);
    Request r2 = k.nccl.irecv(from_next, n, t, next, 8);
    r2.wait();
    r1.wait();
    s2.wait();
    s1.wait();
    expect_values(download(t, from_prev, n), values(prev, n, 1), 0, "ring from prev");
    expect_values(download(t, from_next, n), values(next, n, 2), 0, "ring from next");

    // The pipeline's pattern: an isend to a peer, then a blocking recv from that same peer,
    // on both ranks at once (1F1B's simultaneous activation/gradient exchange).
    if (k.r < 2 && k.p >= 2) {
      const int peer = 1 - k.r;
      void* out = upload(k, t, values(k.r, n, 4));
      void* in = k.alloc(n * dtype_size(t));
      Request s = k.nccl.isend(out, n, t, peer, 1);
      k.nccl.recv(in, n, t, peer, 1);
      s.wait();
      expect_values(download(t, in, n), values(peer, n, 4), 0, "isend + blocking recv");
    }
  }
  // Blocking send/recv in a matching order.
  if (k.r < 2 && k.p >= 2) {
    void* buf = upload(k, DType::kFloat32, values(k.r, n, 5));
    if (k.r == 0) {
      k.nccl.send(buf, n, DType::kFloat32, 1, 0);
    } else {
      k.nccl.recv(buf, n, DType::kFloat32, 0, 0);
      expect_values(download(DType::kFloat32, buf, n), values(0, n, 5), 0, "blocking send/recv");
    }
  }
  k.nccl.barrier();
}

// The fake is strict: these are discipline violations, and the test asserts that they give the
// wrong answers a GPU may give, so that correct results elsewhere are evidence.
TEST(EmulatedNccl, TheFakeCatchesResultsReadWithoutWaiting) {
  Rank k;
  const std::size_t n = 256;
  std::vector<float> mine(n, static_cast<float>(k.r + 1));
  const double sum = k.p * (k.p + 1) / 2.0;
  auto upload_f32 = [&](const std::vector<float>& v) {
    void* d = k.alloc(v.size() * sizeof(float));
    EXPECT_EQ(cudaMemcpy(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
    return static_cast<float*>(d);
  };
  auto first = [&](const float* d) { return download(DType::kFloat32, d, n); };

  // 1. A kernel on the compute stream reads the result before the request is waited: it reads
  //    the stale input.
  float* x = upload_f32(mine);
  float* y = static_cast<float*>(k.alloc(n * sizeof(float)));
  Request r = k.nccl.iallreduce(x, n, ReduceOp::kSum);
  EXPECT_FALSE(r.test()) << "first look: not complete";
  k.device.copy(y, x, n * sizeof(float));  // compute stream, no wait: a bug
  r.wait();
  EXPECT_EQ(first(y)[0], static_cast<double>(k.r + 1))
      << "the fake let a kernel see a NCCL result it did not wait for";
  EXPECT_EQ(first(x)[0], sum);
  k.device.copy(y, x, n * sizeof(float));  // after wait(): correct
  EXPECT_EQ(first(y)[0], sum);

  // 2. An out-of-place result read before the wait: NaN (fresh memory), not the sum.
  float* rs_send = upload_f32(std::vector<float>(n * static_cast<std::size_t>(k.p), 1.0f));
  float* rs_recv = static_cast<float*>(k.alloc(n * sizeof(float)));
  float* z = static_cast<float*>(k.alloc(n * sizeof(float)));
  Request rs = k.nccl.ireduce_scatter(rs_send, rs_recv, n, ReduceOp::kSum);
  k.device.copy(z, rs_recv, n * sizeof(float));  // a bug: no wait
  rs.wait();
  EXPECT_TRUE(std::isnan(first(z)[0])) << "a result read before the wait was not stale";
  EXPECT_EQ(first(rs_recv)[0], static_cast<double>(k.p));

  // 3. The compute stream overwrites the send buffer before the operation ran: the operation
  //    runs late and sends the overwritten values (zeros), not what was there when it was
  //    called.
  float* w = upload_f32(mine);
  Request rw = k.nccl.iallreduce(w, n, ReduceOp::kSum);
  k.device.zero(w, n * sizeof(float));  // a bug: the buffer belongs to the operation
  rw.wait();
  EXPECT_EQ(first(w)[0], 0.0) << "the fake ran the operation when it was called";

  // 4. Blocking calls and waited requests are ordered with the compute stream both ways.
  float* v = upload_f32(mine);
  k.device.add(v, v, n);  // queued on the compute stream before the collective: 2(r + 1)
  k.nccl.allreduce(v, n, ReduceOp::kSum);
  EXPECT_EQ(first(v)[0], 2 * sum);
}

// A buffer released while a non-blocking operation of the provider's NCCL communicator still
// uses it (an exception unwinding before the request is waited, say) is not handed out again
// before the operation ran (issue 35): the communicator records its buffers on its stream, so
// the allocator keeps the block until NCCL's event has fired. Reused at once, the next buffer
// would be summed or overwritten by the operation when the fake runs it, late (on the wait).
TEST(EmulatedNccl, ReleasedBufferIsNotReusedBeforeItsOperation) {
  std::unique_ptr<Device> device =
      make_device(DeviceKind::kCuda, world().rank(), std::size_t{64} << 20);
  std::unique_ptr<Communicator> nccl =
      cuda_provider().nccl->make_communicator(world().duplicate(), *device);
  const std::size_t n = 4096;
  const std::vector<float> ones(n, 1.0f), sevens(n, 7.0f);
  for (const bool collective : {true, false}) {
    SCOPED_TRACE(collective ? "iallreduce" : "isend/irecv");
    auto a = std::make_unique<Buffer<float>>(device->memory(), n, "sent");
    device->upload(a->data(), ones.data(), n * sizeof(float));
    std::vector<Request> requests;
    Buffer<float> other(device->memory(), 16, "other");
    if (collective) {
      requests.push_back(nccl->iallreduce(a->data(), n, ReduceOp::kSum));
    } else {  // a ring: receive from the previous rank into `a`, send a copy onward
      const int r = nccl->rank(), p = nccl->size();
      auto copy = std::make_unique<Buffer<float>>(device->memory(), n, "copy");
      device->upload(copy->data(), ones.data(), n * sizeof(float));
      requests.push_back(nccl->irecv(a->data(), n, (r + p - 1) % p, 0));
      requests.push_back(nccl->isend(copy->data(), n, (r + 1) % p, 0));
      // Another operation issues the collected group: queued on the NCCL stream, not yet run.
      device->upload(other.data(), ones.data(), 16 * sizeof(float));
      requests.push_back(nccl->iallreduce(other.data(), 16, ReduceOp::kSum));
      copy.reset();
    }
    a.reset();  // released before the request is waited
    // Its block, if handed out again now, must be one NCCL is done with (the allocator may
    // have waited for the operation to run).
    Buffer<float> b(device->memory(), n, "next");
    device->upload(b.data(), sevens.data(), n * sizeof(float));
    for (Request& q : requests) q.wait();
    std::vector<float> got(n);
    device->download(got.data(), b.data(), n * sizeof(float));
    for (float x : got) ASSERT_EQ(x, 7.0f);
  }
}

TEST(EmulatedNccl, InjectedFailureMakesEveryRankThrowWithinTheTimeout) {
  const char* injected = std::getenv("SATURN_EMU_NCCL_FAIL");
  if (injected == nullptr)
    GTEST_SKIP() << "run by test_emulated_nccl_failure_np2 (SATURN_EMU_NCCL_FAIL=1:0)";
  Rank k;
  ASSERT_EQ(k.nccl.timeout_seconds(), 4.0) << "the ctest entry sets SATURN_NCCL_TIMEOUT_S=4";
  const std::size_t n = 64;
  void* d = upload(k, DType::kFloat32, values(k.r, n));
  const auto t0 = std::chrono::steady_clock::now();
  try {
    k.nccl.allreduce(d, n, DType::kFloat32, ReduceOp::kSum);  // operation 0: fails on rank 1
    ADD_FAILURE() << "no error on rank " << k.r;
  } catch (const NcclError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.operation(), "ncclAllReduce");
    EXPECT_EQ(e.rank(), k.r);
    EXPECT_NE(what.find("aborted"), std::string::npos) << what;
    EXPECT_NE(what.find(k.nccl.describe()), std::string::npos) << what;
    if (k.r == 1) {
      EXPECT_NE(what.find("injected"), std::string::npos) << what;
    } else {
      EXPECT_NE(what.find("SATURN_NCCL_TIMEOUT_S"), std::string::npos) << what;
    }
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 4.0 + 10.0) << "rank " << k.r;
  EXPECT_TRUE(k.nccl.aborted());
  // Every later call fails at once, naming the first failure.
  EXPECT_THROW(k.nccl.allreduce(d, n, DType::kFloat32, ReduceOp::kSum), NcclError);
  EXPECT_THROW(k.nccl.isend(d, n, DType::kFloat32, (k.r + 1) % k.p, 0).wait(), NcclError);
}

// Operations of two communicators issued in one order on every rank complete; issued in
// different orders they deadlock on a GPU, which may run one communicator's kernels at a time
// in issue order: the fake does so too, and the waits time out (NcclCommunicator's rule, see
// nccl_communicator.hpp).
void two_communicators(bool same_order) {
  Rank k;
  NcclCommunicator other(world(), k.device.index(), k.device.context().stream());
  k.nccl.set_timeout_seconds(3);
  other.set_timeout_seconds(3);
  const std::size_t n = 32;
  void* a = upload(k, DType::kFloat32, values(k.r, n));
  void* b = upload(k, DType::kFloat32, values(k.r, n, 1));
  std::vector<double> sum_a(n, 0.0), sum_b(n, 0.0);
  for (int q = 0; q < k.p; ++q) {
    const auto va = values(q, n), vb = values(q, n, 1);
    for (std::size_t i = 0; i < n; ++i) sum_a[i] += va[i], sum_b[i] += vb[i];
  }
  // Connected first (a communicator's first collective connects its peers, a rendezvous of
  // its own), so what follows tests the order in which the operations run.
  void* warm = upload(k, DType::kFloat32, values(k.r, 1));
  k.nccl.allreduce(warm, 1, DType::kFloat32, ReduceOp::kSum);
  other.allreduce(warm, 1, DType::kFloat32, ReduceOp::kSum);
  const bool a_first = same_order || k.r == 0;
  Request first = a_first ? k.nccl.iallreduce(a, n, DType::kFloat32, ReduceOp::kSum)
                          : other.iallreduce(b, n, DType::kFloat32, ReduceOp::kSum);
  Request second = a_first ? other.iallreduce(b, n, DType::kFloat32, ReduceOp::kSum)
                           : k.nccl.iallreduce(a, n, DType::kFloat32, ReduceOp::kSum);
  int timeouts = 0;
  for (Request* r : {&first, &second}) {
    try {
      r->wait();
    } catch (const NcclError& e) {
      ++timeouts;
      EXPECT_EQ(e.operation(), "ncclAllReduce");
      EXPECT_NE(std::string(e.what()).find("SATURN_NCCL_TIMEOUT_S"), std::string::npos) << e.what();
    }
  }
  if (same_order) {
    EXPECT_EQ(timeouts, 0) << "rank " << k.r;
    expect_values(download(DType::kFloat32, a, n), sum_a, 0, "first communicator");
    expect_values(download(DType::kFloat32, b, n), sum_b, 0, "second communicator");
  } else {
    // The deadlock shows as a timeout on at least one rank. Not necessarily on each: once a
    // rank gives up (its timeout aborts its communicators), the other's operations may finish,
    // and on a loaded machine which rank times out first is a matter of scheduling.
    double total = timeouts;
    world().allreduce(&total, 1, ReduceOp::kSum);
    EXPECT_GE(total, 1) << "operations of two communicators issued in different orders on the "
                        << "ranks completed on every rank; a GPU may deadlock there";
  }
}

TEST(EmulatedNccl, TwoCommunicatorsInOneIssueOrderComplete) {
  two_communicators(true);
}

TEST(EmulatedNccl, TwoCommunicatorsInDifferentIssueOrdersDeadlock) {
  if (world().size() != 2) GTEST_SKIP() << "written for 2 ranks";
  two_communicators(false);
}

// A dead peer (SATURN_EMU_NCCL_DEAD: world rank 1 stops at its K-th NCCL call) ends every rank's
// call with NcclError within the timeout (4 s, set by the ctest entries), in set-up, in a
// point-to-point group and in a collective, instead of blocking inside NCCL.
void expect_ends_within_timeout(const std::function<void()>& call, const std::string& operation) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    call();
    ADD_FAILURE() << "no error on rank " << world().rank();
  } catch (const NcclError& e) {
    EXPECT_EQ(e.operation().rfind(operation, 0), 0u) << e.operation();
    EXPECT_NE(std::string(e.what()).find("SATURN_NCCL_TIMEOUT_S"), std::string::npos) << e.what();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(waited, 4.0 + 10.0) << "rank " << world().rank();
}

#define SATURN_SKIP_UNLESS_DEAD_PEER(entry) \
  if (std::getenv("SATURN_EMU_NCCL_DEAD") == nullptr) GTEST_SKIP() << "run by " entry

TEST(EmulatedNcclDeadPeer, DuringSetUp) {
  SATURN_SKIP_UNLESS_DEAD_PEER("test_emulated_nccl_dead_setup_np2");
  cuda::CudaDevice device{world().rank(), std::size_t{64} << 20};
  expect_ends_within_timeout(
      [&] { NcclCommunicator c(world(), device.index(), device.context().stream()); },
      "ncclCommInitRankConfig");
}

TEST(EmulatedNcclDeadPeer, DuringGroup) {
  SATURN_SKIP_UNLESS_DEAD_PEER("test_emulated_nccl_dead_group_np2");
  Rank k;  // set-up: call 0
  const std::size_t n = 16;
  void* out = upload(k, DType::kFloat32, values(k.r, n));
  void* in = k.alloc(n * sizeof(float));
  const int peer = (k.r + 1) % k.p;
  expect_ends_within_timeout(
      [&] {
        Request s = k.nccl.isend(out, n, DType::kFloat32, peer, 0);
        Request r = k.nccl.irecv(in, n, DType::kFloat32, peer, 0);
        r.wait();  // the group (call 1)
        s.wait();
      },
      "ncclGroupEnd");
  EXPECT_TRUE(k.nccl.aborted());
}

TEST(EmulatedNcclDeadPeer, DuringCollective) {
  SATURN_SKIP_UNLESS_DEAD_PEER("test_emulated_nccl_dead_collective_np2");
  Rank k;  // set-up: call 0
  const std::size_t n = 16;
  void* d = upload(k, DType::kFloat32, values(k.r, n));
  expect_ends_within_timeout(
      [&] { k.nccl.allreduce(d, n, DType::kFloat32, ReduceOp::kSum); },  // call 1
      "ncclAllReduce");
  EXPECT_TRUE(k.nccl.aborted());
}

}  // namespace
}  // namespace saturn::comm
