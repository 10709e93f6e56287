// A fake NCCL for the CUDA emulator (test only): the nccl.h functions NcclCommunicator calls,
// implemented over MPI between processes, staging device buffers through the emulator's device
// access. It is strict about NCCL's calling discipline, as a GPU is:
//
//  - An operation is queued on its stream (emu_stream.hpp) and does not run when called: it
//    reads its send buffer and writes its result only when something orders on the stream
//    (later work on it, a synchronize, an event recorded after it and waited or queried). So a
//    kernel that reads the result without waiting for the operation reads stale data, and a
//    buffer overwritten by compute before the operation ran sends the overwritten values. The
//    first cudaEventQuery of an event recorded after it says not ready; the operations of
//    different streams complete in a shuffled order (SATURN_EMU_SEED).
//  - Every argument is checked when called (device pointers: one live allocation of the
//    emulated device; ranks, roots, types) and again when the operation runs (a buffer freed in
//    between is reported). Every message carries a header (operation, type, count, reduction,
//    root, sequence number) checked by the receiver, so ranks issuing different collectives,
//    or point-to-point counts that do not match, are reported (asynchronous error
//    ncclInvalidUsage, also printed) instead of silently mixing data.
//  - Groups: the operations between ncclGroupStart and ncclGroupEnd are queued together, one
//    queue item per (communicator, stream), and start together, so a send/recv pair posted by
//    two ranks to each other inside groups completes. A send completes only once the peer's
//    matching receive has started (MPI_Issend), as NCCL's send waits for its peer; a send or
//    receive outside a group is a group of one, so two ranks sending to each other first
//    deadlock exactly as on a GPU: the waiting side's timeout, or the emulator's
//    SATURN_EMU_HANG_S report, names it.
//  - Failure: SATURN_EMU_NCCL_FAIL=R:K makes the K-th operation (0-based, counting every
//    collective and send/recv this process issues) of MPI world rank R never complete and set
//    its communicator's asynchronous error to ncclSystemError, as a failing link or peer would;
//    the peers' matching operations then never complete either. ncclCommAbort completes
//    (without results) every queued operation of the communicator, as aborting does on a GPU.
//
//  - Non-blocking communicators (ncclCommInitRankConfig with config.blocking = 0): set-up,
//    every operation outside a group, ncclGroupEnd and ncclCommFinalize return ncclInProgress
//    and complete late, while ncclCommGetAsyncError is polled (it says ncclInProgress until
//    then); another call on the communicator before that is ncclInvalidUsage. Connections are
//    set up lazily, as NCCL does: a communicator's first collective, and its first send or
//    receive with each peer, exchange a token with those peers before the operations are
//    queued, so a dead peer leaves the call in progress (non-blocking) or blocks it forever
//    (blocking mode, as NCCL blocks in ncclCommInitRank or ncclGroupEnd).
//    SATURN_EMU_NCCL_DEAD=R:K makes MPI world rank R a dead process from its K-th NCCL call on
//    (0-based, counting set-ups, operations outside a group and outermost ncclGroupEnds): it
//    sends nothing more and its calls never complete.
//  - One device, one order: NCCL's kernels of different communicators may run one at a time on
//    a GPU, in the order the host issued them (a kernel waiting for a peer keeps the others
//    out), so ranks that issue operations of two communicators in different orders can
//    deadlock. The fake runs a process's operations, over all its communicators, one group at a
//    time in issue order: such a program deadlocks here too (the waits time out).
//
// Communicator set-up: ncclGetUniqueId names its creator (MPI world rank) and a counter; the
// creator must be a member (NcclCommunicator creates it on rank 0). ncclCommInitRank exchanges
// world ranks through the creator over MPI_COMM_WORLD (tags 20000-29999), then creates an MPI
// communicator of the members (MPI_Comm_create_group, collective over the members only), on
// which all the operations' messages travel. Reductions run in rank order on every rank (the
// same result everywhere), bf16 and fp16 through fp32. Communicator objects stay allocated
// after destroy/abort (a few bytes) so that no queued item can outlive its communicator.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/dtype.hpp"
#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_stream.hpp"

struct FakeBatch;

// A call of a non-blocking communicator that has not completed: ncclCommGetAsyncError advances
// it and says ncclInProgress until it has. A blocking communicator's call runs it to the end.
struct FakePending {
  virtual ~FakePending() = default;
  virtual bool advance() = 0;  // true once complete
  virtual void cancel() {}     // ncclCommAbort: drop its messages
};

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0, size = 1, world_rank = 0, id = 0;
  ncclResult_t async_error = ncclSuccess;
  std::string last_error;
  bool aborted = false, destroyed = false;
  std::uint64_t collective_seq = 0;  // collectives issued on this communicator
  std::set<cudaStream_t> streams;    // where its operations were queued
  std::set<FakeBatch*> running;
  bool blocking = true;                  // ncclConfig_t::blocking
  std::unique_ptr<FakePending> pending;  // the non-blocking call in progress
  std::set<int> connected;               // peers of a point-to-point connection
  bool collectives_connected = false;    // the first collective has connected every peer
};

namespace {

enum class Kind : std::int32_t {
  kAllReduce = 1,
  kReduceScatter,
  kAllGather,
  kBroadcast,
  kSend,
  kRecv
};

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "ncclAllReduce";
    case Kind::kReduceScatter:
      return "ncclReduceScatter";
    case Kind::kAllGather:
      return "ncclAllGather";
    case Kind::kBroadcast:
      return "ncclBroadcast";
    case Kind::kSend:
      return "ncclSend";
    case Kind::kRecv:
      return "ncclRecv";
  }
  return "?";
}

constexpr int kCollectiveTag = 1;
constexpr int kP2pTag = 2;
constexpr int kConnectTag = 3;

struct Header {
  std::int32_t kind = 0, type = 0, op = 0, root = 0;
  std::uint64_t count = 0, seq = 0;
  bool operator==(const Header&) const = default;
};

struct Op {
  Kind kind{};
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  // elements: per rank block for reduce-scatter/all-gather
  ncclDataType_t type{};
  ncclRedOp_t op{};
  int root = 0;  // broadcast root, or the peer of a send/recv
  ncclComm* comm = nullptr;
  cudaStream_t stream = nullptr;
  std::uint64_t index = 0;  // this process's operation counter
  std::uint64_t seq = 0;    // collective sequence on the communicator
  bool inject_failure = false;
};

thread_local std::string g_last_error;

ncclResult_t fail(ncclComm* comm, ncclResult_t r, const std::string& what) {
  g_last_error = "fake NCCL: " + what;
  if (comm != nullptr) comm->last_error = g_last_error;
  return r;
}

void async_fail(ncclComm* comm, ncclResult_t r, const std::string& what) {
  const std::string msg = "fake NCCL (world rank " + std::to_string(comm->world_rank) +
                          ", communicator " + std::to_string(comm->id) + " rank " +
                          std::to_string(comm->rank) + "/" + std::to_string(comm->size) +
                          "): " + what;
  std::fprintf(stderr, "%s\n", msg.c_str());
  if (comm->async_error == ncclSuccess) {
    comm->async_error = r;
    comm->last_error = msg;
  }
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

std::size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

bool reducible(ncclDataType_t t) {
  return type_size(t) != 0 && t != ncclFloat8e4m3 && t != ncclFloat8e5m2;
}

// ---- reductions, in rank order, identical on every rank --------------------------------------
template <typename T, typename Acc, typename Load, typename Store>
void reduce_blocks(const std::vector<const std::byte*>& in, std::byte* out, std::size_t n,
                   ncclRedOp_t op, Load load, Store store) {
  const auto* first = reinterpret_cast<const T*>(in[0]);
  T* o = reinterpret_cast<T*>(out);
  for (std::size_t i = 0; i < n; ++i) {
    Acc acc = load(first[i]);
    for (std::size_t r = 1; r < in.size(); ++r) {
      const Acc v = load(reinterpret_cast<const T*>(in[r])[i]);
      switch (op) {
        case ncclSum:
        case ncclAvg:
          acc = acc + v;
          break;
        case ncclProd:
          acc = acc * v;
          break;
        case ncclMax:
          acc = std::max(acc, v);
          break;
        case ncclMin:
          acc = std::min(acc, v);
          break;
        default:
          break;
      }
    }
    if (op == ncclAvg) acc = acc / static_cast<Acc>(in.size());
    o[i] = store(acc);
  }
}

template <typename T>
void reduce_plain(const std::vector<const std::byte*>& in, std::byte* out, std::size_t n,
                  ncclRedOp_t op) {
  reduce_blocks<T, T>(
      in, out, n, op, [](T v) { return v; }, [](T v) { return v; });
}

void reduce(const std::vector<const std::byte*>& in, std::byte* out, std::size_t n,
            ncclDataType_t type, ncclRedOp_t op) {
  switch (type) {
    case ncclInt8:
      return reduce_plain<std::int8_t>(in, out, n, op);
    case ncclUint8:
      return reduce_plain<std::uint8_t>(in, out, n, op);
    case ncclInt32:
      return reduce_plain<std::int32_t>(in, out, n, op);
    case ncclUint32:
      return reduce_plain<std::uint32_t>(in, out, n, op);
    case ncclInt64:
      return reduce_plain<std::int64_t>(in, out, n, op);
    case ncclUint64:
      return reduce_plain<std::uint64_t>(in, out, n, op);
    case ncclFloat32:
      return reduce_plain<float>(in, out, n, op);
    case ncclFloat64:
      return reduce_plain<double>(in, out, n, op);
    case ncclFloat16:
      return reduce_blocks<_Float16, float>(
          in, out, n, op, [](_Float16 v) { return static_cast<float>(v); },
          [](float v) { return static_cast<_Float16>(v); });
    case ncclBfloat16:
      return reduce_blocks<saturn::BFloat16, float>(
          in, out, n, op, [](saturn::BFloat16 v) { return saturn::to_float(v); },
          [](float v) { return saturn::to_bfloat16(v); });
    default:
      return;
  }
}

// ---- failure injection -----------------------------------------------------------------------
struct Injection {
  bool active = false;
  int rank = -1;
  std::uint64_t op = 0;
};
const Injection& injection() {
  static const Injection inj = [] {
    Injection i;
    const char* v = std::getenv("SATURN_EMU_NCCL_FAIL");
    if (v == nullptr || *v == '\0') return i;
    int r = -1;
    unsigned long long k = 0;
    if (std::sscanf(v, "%d:%llu", &r, &k) != 2) {
      std::fprintf(stderr, "fake NCCL: SATURN_EMU_NCCL_FAIL='%s' is not RANK:OP_INDEX\n", v);
      std::abort();
    }
    i.active = true;
    i.rank = r;
    i.op = k;
    return i;
  }();
  return inj;
}
std::uint64_t g_op_counter = 0;
int g_comm_counter = 0;

// SATURN_EMU_NCCL_DEAD=R:K (see the file comment).
struct Death {
  bool active = false;
  int rank = -1;
  std::uint64_t call = 0;
};
const Death& death() {
  static const Death d = [] {
    Death x;
    const char* v = std::getenv("SATURN_EMU_NCCL_DEAD");
    if (v == nullptr || *v == '\0') return x;
    unsigned long long k = 0;
    if (std::sscanf(v, "%d:%llu", &x.rank, &k) != 2) {
      std::fprintf(stderr, "fake NCCL: SATURN_EMU_NCCL_DEAD='%s' is not RANK:CALL_INDEX\n", v);
      std::abort();
    }
    x.active = true;
    x.call = k;
    return x;
  }();
  return d;
}
std::uint64_t g_call_counter = 0;
bool g_dead = false;

// Counts one call (a set-up, an operation outside a group, an outermost ncclGroupEnd): true when
// this process is dead from it on.
bool call_dies() {
  if (!g_dead) {
    const Death& d = death();
    if (d.active && d.rank == world_rank() && d.call == g_call_counter) {
      std::fprintf(stderr,
                   "fake NCCL: world rank %d dies at its NCCL call %llu "
                   "(SATURN_EMU_NCCL_DEAD)\n",
                   d.rank, static_cast<unsigned long long>(d.call));
      g_dead = true;
    }
  }
  ++g_call_counter;
  return g_dead;
}

struct NeverCompletes final : FakePending {
  bool advance() override { return false; }
};

// A dead process's call: in progress forever (non-blocking), or blocked forever.
ncclResult_t dead_call(ncclComm* comm) {
  if (comm != nullptr && !comm->blocking) {
    comm->pending = std::make_unique<NeverCompletes>();
    return ncclInProgress;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void cancel_requests(std::vector<MPI_Request>& requests) {
  for (MPI_Request& r : requests)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  requests.clear();
}

// Runs a call to its end (a blocking communicator), or leaves it to ncclCommGetAsyncError.
ncclResult_t run_or_defer(ncclComm* comm, std::unique_ptr<FakePending> call) {
  if (comm->blocking) {
    while (!call->advance()) std::this_thread::yield();  // forever, if a peer is dead
    return comm->async_error;
  }
  comm->pending = std::move(call);
  return ncclInProgress;
}

// The operations of one process, over all its communicators, in issue order: each starts only
// once every operation issued before it has finished (see the file comment).
std::deque<FakeBatch*> g_lane;

}  // namespace

// One queue item: the operations of one group on one (communicator, stream).
struct FakeBatch {
  ncclComm* comm = nullptr;
  std::vector<Op> ops;
  std::vector<std::vector<std::byte>> buffers;  // message buffers (header + payload)
  struct Receive {
    std::size_t op = 0;
    int from = 0;
    std::size_t buffer = 0;
  };
  std::vector<Receive> receives;
  std::vector<MPI_Request> requests;
  std::vector<std::vector<std::byte>> own;  // this rank's staged send data, per op
  bool stalled = false;                     // injected failure or a detected mismatch
  bool finished = false;
  bool reached = false;  // its stream has reached it
  bool begun = false;    // its messages are posted

  FakeBatch() { g_lane.push_back(this); }
  ~FakeBatch() { leave_lane(); }
  void leave_lane() {
    auto it = std::find(g_lane.begin(), g_lane.end(), this);
    if (it != g_lane.end()) g_lane.erase(it);
  }

  Header header_of(const Op& op) const {
    Header h;
    h.kind = static_cast<std::int32_t>(op.kind);
    h.type = static_cast<std::int32_t>(op.type);
    h.op = op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter
               ? static_cast<std::int32_t>(op.op)
               : 0;
    h.root = op.kind == Kind::kBroadcast ? op.root : 0;
    h.count = op.count;
    h.seq = op.seq;
    return h;
  }

  std::size_t message(const Header& h, const std::byte* payload, std::size_t bytes) {
    const auto* head = reinterpret_cast<const std::byte*>(&h);
    std::vector<std::byte> b;
    b.reserve(sizeof(Header) + bytes);
    b.insert(b.end(), head, head + sizeof(Header));
    b.insert(b.end(), payload, payload + bytes);
    buffers.push_back(std::move(b));
    return buffers.size() - 1;
  }

  void post_send(std::size_t buffer, int to, int tag, bool synchronous) {
    MPI_Request r{};
    auto& b = buffers[buffer];
    if (synchronous)
      MPI_Issend(b.data(), static_cast<int>(b.size()), MPI_BYTE, to, tag, comm->mpi, &r);
    else
      MPI_Isend(b.data(), static_cast<int>(b.size()), MPI_BYTE, to, tag, comm->mpi, &r);
    requests.push_back(r);
  }

  void post_recv(std::size_t op, int from, std::size_t bytes, int tag) {
    buffers.emplace_back(sizeof(Header) + bytes);
    const std::size_t buffer = buffers.size() - 1;
    MPI_Request r{};
    MPI_Irecv(buffers[buffer].data(), static_cast<int>(buffers[buffer].size()), MPI_BYTE, from, tag,
              comm->mpi, &r);
    requests.push_back(r);
    receives.push_back({op, from, buffer});
  }

  // Reads a device buffer now (the operation runs now, not when it was called).
  bool read_device(std::vector<std::byte>& into, const void* p, std::size_t bytes, const Op& op) {
    into.resize(bytes);
    if (bytes == 0) return true;
    if (!emu::is_device_range(p, bytes)) {
      async_fail(comm, ncclInvalidUsage,
                 std::string(kind_name(op.kind)) +
                     ": its send buffer is no longer one live device allocation when the "
                     "operation runs (freed before the operation completed)");
      return false;
    }
    emu::DeviceAccess access;
    std::memcpy(into.data(), p, bytes);
    return true;
  }

  bool write_device(void* p, const std::byte* from, std::size_t bytes, const Op& op) {
    if (bytes == 0) return true;
    if (!emu::is_device_range(p, bytes)) {
      async_fail(comm, ncclInvalidUsage,
                 std::string(kind_name(op.kind)) +
                     ": its receive buffer is no longer one live device allocation when the "
                     "operation completes (freed before the operation completed)");
      return false;
    }
    emu::DeviceAccess access;
    std::memcpy(p, from, bytes);
    return true;
  }

  // Its stream has reached it: it begins once it is first in the process's lane.
  void start() {
    reached = true;
    try_begin();
  }
  bool try_begin() {
    if (begun) return true;
    if (comm->aborted || g_lane.empty() || g_lane.front() != this) return false;
    begun = true;
    begin();
    return true;
  }

  void begin() {
    if (comm->aborted) return;
    comm->running.insert(this);
    own.resize(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.inject_failure) {
        async_fail(comm, ncclSystemError,
                   std::string("injected failure (SATURN_EMU_NCCL_FAIL) in operation ") +
                       std::to_string(op.index) + " (" + kind_name(op.kind) + ")");
        stalled = true;
        return;
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const std::size_t es = type_size(op.type);
      const std::size_t bytes = op.count * es;
      const int p = comm->size, me = comm->rank;
      const Header h = header_of(op);
      switch (op.kind) {
        case Kind::kAllReduce:
          if (!read_device(own[i], op.send, bytes, op)) return void(stalled = true);
          for (int j = 0; j < p; ++j)
            if (j != me) {
              post_send(message(h, own[i].data(), bytes), j, kCollectiveTag, false);
              post_recv(i, j, bytes, kCollectiveTag);
            }
          break;
        case Kind::kReduceScatter:
          if (!read_device(own[i], op.send, bytes * static_cast<std::size_t>(p), op))
            return void(stalled = true);
          for (int j = 0; j < p; ++j)
            if (j != me) {
              post_send(message(h, own[i].data() + bytes * static_cast<std::size_t>(j), bytes), j,
                        kCollectiveTag, false);
              post_recv(i, j, bytes, kCollectiveTag);
            }
          break;
        case Kind::kAllGather:
          if (!read_device(own[i], op.send, bytes, op)) return void(stalled = true);
          for (int j = 0; j < p; ++j)
            if (j != me) {
              post_send(message(h, own[i].data(), bytes), j, kCollectiveTag, false);
              post_recv(i, j, bytes, kCollectiveTag);
            }
          break;
        case Kind::kBroadcast:
          if (me == op.root) {
            if (!read_device(own[i], op.send, bytes, op)) return void(stalled = true);
            for (int j = 0; j < p; ++j)
              if (j != me) post_send(message(h, own[i].data(), bytes), j, kCollectiveTag, false);
          } else {
            post_recv(i, op.root, bytes, kCollectiveTag);
          }
          break;
        case Kind::kSend:
          if (!read_device(own[i], op.send, bytes, op)) return void(stalled = true);
          post_send(message(h, own[i].data(), bytes), op.root, kP2pTag, true);
          break;
        case Kind::kRecv:
          post_recv(i, op.root, bytes, kP2pTag);
          break;
      }
    }
  }

  // Checks the received headers against this rank's own operations.
  bool headers_match() {
    for (const Receive& r : receives) {
      const Op& op = ops[r.op];
      Header expected = header_of(op);
      Header got;
      std::memcpy(&got, buffers[r.buffer].data(), sizeof(Header));
      if (op.kind == Kind::kRecv) {
        expected.kind = static_cast<std::int32_t>(Kind::kSend);
        expected.seq = got.seq;  // point-to-point messages carry no collective sequence
      }
      if (!(got == expected)) {
        async_fail(comm, ncclInvalidUsage,
                   std::string(kind_name(op.kind)) + " (count " + std::to_string(op.count) +
                       ", type " + std::to_string(static_cast<int>(op.type)) + ", sequence " +
                       std::to_string(op.seq) + ") matched rank " + std::to_string(r.from) + "'s " +
                       kind_name(static_cast<Kind>(got.kind)) + " (count " +
                       std::to_string(got.count) + ", type " + std::to_string(got.type) +
                       ", sequence " + std::to_string(got.seq) +
                       "): the ranks issued different operations");
        return false;
      }
    }
    return true;
  }

  void finish() {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const std::size_t es = type_size(op.type);
      const std::size_t bytes = op.count * es;
      const int p = comm->size, me = comm->rank;
      // Each rank's contribution to op i, in rank order.
      std::vector<const std::byte*> from(static_cast<std::size_t>(p), nullptr);
      for (const Receive& r : receives)
        if (r.op == i)
          from[static_cast<std::size_t>(r.from)] = buffers[r.buffer].data() + sizeof(Header);
      bool ok = true;
      switch (op.kind) {
        case Kind::kAllReduce:
        case Kind::kReduceScatter: {
          from[static_cast<std::size_t>(me)] =
              own[i].data() +
              (op.kind == Kind::kReduceScatter ? bytes * static_cast<std::size_t>(me) : 0);
          std::vector<std::byte> out(bytes);
          reduce(from, out.data(), op.count, op.type, op.op);
          ok = write_device(op.recv, out.data(), bytes, op);
          break;
        }
        case Kind::kAllGather: {
          from[static_cast<std::size_t>(me)] = own[i].data();
          std::vector<std::byte> out(bytes * static_cast<std::size_t>(p));
          for (int j = 0; j < p; ++j)
            if (bytes != 0)
              std::memcpy(out.data() + bytes * static_cast<std::size_t>(j),
                          from[static_cast<std::size_t>(j)], bytes);
          ok = write_device(op.recv, out.data(), out.size(), op);
          break;
        }
        case Kind::kBroadcast:
          if (me == op.root) {
            if (op.recv != op.send) ok = write_device(op.recv, own[i].data(), bytes, op);
          } else {
            ok = write_device(op.recv, from[static_cast<std::size_t>(op.root)], bytes, op);
          }
          break;
        case Kind::kSend:
          break;
        case Kind::kRecv:
          ok = write_device(op.recv, from[static_cast<std::size_t>(op.root)], bytes, op);
          break;
      }
      if (!ok) {
        stalled = true;
        return;
      }
    }
    finished = true;
  }

  bool poll() {
    if (comm->aborted) {  // aborted: complete without results
      leave_lane();
      return true;
    }
    if (!try_begin()) return false;
    if (stalled) return false;
    if (!requests.empty()) {
      int done = 0;
      const int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                                 MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        async_fail(comm, ncclInvalidUsage,
                   std::string("a message of ") + kind_name(ops.front().kind) +
                       " failed (sizes differ between the ranks?): " + std::string(text, len));
        stalled = true;
        return false;
      }
      if (done == 0) return false;
      requests.clear();
    }
    if (!headers_match()) {
      stalled = true;
      return false;
    }
    finish();
    if (!finished) return false;
    comm->running.erase(this);
    leave_lane();
    return true;
  }

  // ncclCommAbort: drop this rank's pending messages.
  void cancel() {
    for (MPI_Request& r : requests)
      if (r != MPI_REQUEST_NULL) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
    requests.clear();
  }
};

namespace {

thread_local int g_group_depth = 0;
thread_local std::vector<Op> g_grouped;

void enqueue_ops(std::vector<Op> ops) {
  // One item per (communicator, stream), in issue order.
  std::vector<std::pair<std::pair<ncclComm*, cudaStream_t>, std::vector<Op>>> parts;
  for (Op& op : ops) {
    auto key = std::make_pair(op.comm, op.stream);
    auto it =
        std::find_if(parts.begin(), parts.end(), [&](const auto& p) { return p.first == key; });
    if (it == parts.end()) {
      parts.push_back({key, {}});
      it = parts.end() - 1;
    }
    it->second.push_back(op);
  }
  for (auto& [key, part] : parts) {
    auto batch = std::make_shared<FakeBatch>();
    batch->comm = key.first;
    batch->ops = std::move(part);
    key.first->streams.insert(key.second);
    std::string name = "fake NCCL";
    for (const Op& op : batch->ops) name += std::string(" ") + kind_name(op.kind);
    name += " (communicator " + std::to_string(key.first->id) + ")";
    emu::enqueue(key.second, emu::StreamWork{name, [batch] { batch->start(); },
                                             [batch] { return batch->poll(); }});
  }
}

// Lazy connection set-up before operations are queued (see the file comment): a token sent to
// and received from each peer of `peers` (a peer once per connection, so both sides exchange
// as many), then the operations go on their streams. A non-blocking call also completes late
// with nothing to connect.
struct Connect final : FakePending {
  std::vector<Op> ops;
  std::vector<MPI_Request> requests;
  std::vector<std::int32_t> tokens;
  int polls = 1;

  Connect(ncclComm* comm, std::vector<Op> o, const std::vector<int>& peers)
      : ops(std::move(o)), tokens(2 * peers.size(), 1) {
    for (std::size_t i = 0; i < peers.size(); ++i) {
      MPI_Request r[2];
      MPI_Isend(&tokens[2 * i], 1, MPI_INT32_T, peers[i], kConnectTag, comm->mpi, &r[0]);
      MPI_Irecv(&tokens[2 * i + 1], 1, MPI_INT32_T, peers[i], kConnectTag, comm->mpi, &r[1]);
      requests.insert(requests.end(), r, r + 2);
    }
  }
  bool advance() override {
    if (polls > 0) {
      --polls;
      return false;
    }
    if (!requests.empty()) {
      int done = 0;
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
      if (done == 0) return false;
      requests.clear();
    }
    enqueue_ops(std::move(ops));
    ops.clear();
    return true;
  }
  void cancel() override { cancel_requests(requests); }
};

// The peers `ops` connect to on first use: each send/recv peer not yet connected, and every
// other rank for the communicator's first collective.
std::vector<int> new_connections(ncclComm* comm, const std::vector<Op>& ops) {
  std::vector<int> peers;
  for (const Op& op : ops) {
    if (op.kind == Kind::kSend || op.kind == Kind::kRecv) {
      if (comm->connected.insert(op.root).second) peers.push_back(op.root);
    } else if (!comm->collectives_connected) {
      comm->collectives_connected = true;
      for (int j = 0; j < comm->size; ++j)
        if (j != comm->rank) peers.push_back(j);
    }
  }
  return peers;
}

// Issues one call's operations (one, or a group's): per communicator, connect, then queue.
ncclResult_t submit(std::vector<Op> ops) {
  std::vector<std::pair<ncclComm*, std::vector<Op>>> parts;
  for (Op& op : ops) {
    auto it = std::find_if(parts.begin(), parts.end(),
                           [&](const auto& part) { return part.first == op.comm; });
    if (it == parts.end()) {
      parts.push_back({op.comm, {}});
      it = parts.end() - 1;
    }
    it->second.push_back(op);
  }
  ncclResult_t result = ncclSuccess;
  for (auto& [comm, part] : parts) {
    const std::vector<int> peers = new_connections(comm, part);
    const ncclResult_t r =
        run_or_defer(comm, std::make_unique<Connect>(comm, std::move(part), peers));
    if (r != ncclSuccess && result == ncclSuccess) result = r;
  }
  return result;
}

// ncclCommInitRank's exchange: every member's world rank, in communicator rank order, gathered
// through the id's creator over MPI_COMM_WORLD, then the members' MPI communicator.
struct InitExchange final : FakePending {
  ncclComm* comm;
  int root, tag;
  std::vector<int> table;
  std::vector<std::array<int, 2>> pairs;  // (communicator rank, world rank) per member
  std::vector<MPI_Request> requests;
  bool table_sent = false;

  InitExchange(ncclComm* c, int creator, int exchange_tag)
      : comm(c), root(creator), tag(exchange_tag), table(static_cast<std::size_t>(c->size), -1) {
    if (comm->world_rank == root) {
      table[static_cast<std::size_t>(comm->rank)] = root;
      pairs.resize(static_cast<std::size_t>(comm->size - 1));
      for (auto& pair : pairs) post(MPI_Irecv, pair.data(), 2, MPI_ANY_SOURCE);
    } else {
      pairs.push_back({comm->rank, comm->world_rank});
      MPI_Request r{};
      MPI_Isend(pairs[0].data(), 2, MPI_INT, root, tag, MPI_COMM_WORLD, &r);
      requests.push_back(r);
      post(MPI_Irecv, table.data(), comm->size, root);
    }
  }
  template <typename Recv>
  void post(Recv recv, int* into, int n, int from) {
    MPI_Request r{};
    recv(into, n, MPI_INT, from, tag, MPI_COMM_WORLD, &r);
    requests.push_back(r);
  }
  bool advance() override {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done == 0) return false;
    requests.clear();
    if (comm->world_rank == root && !table_sent) {
      for (const auto& [rank, world] : pairs) {
        if (rank < 0 || rank >= comm->size || table[static_cast<std::size_t>(rank)] != -1) {
          async_fail(comm, ncclInvalidUsage,
                     "ncclCommInitRank: two members claim rank " + std::to_string(rank));
          return true;
        }
        table[static_cast<std::size_t>(rank)] = world;
      }
      for (int k = 0; k < comm->size; ++k)
        if (k != comm->rank) {
          MPI_Request r{};
          MPI_Isend(table.data(), comm->size, MPI_INT, table[static_cast<std::size_t>(k)], tag,
                    MPI_COMM_WORLD, &r);
          requests.push_back(r);
        }
      table_sent = true;
      return false;
    }
    // Every member has the table: the members' communicator (collective over them).
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, comm->size, table.data(), &group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm->mpi);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) {
      async_fail(comm, ncclSystemError, "ncclCommInitRank: MPI_Comm_create_group failed");
      return true;
    }
    MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
    return true;
  }
  void cancel() override { cancel_requests(requests); }
};

// ncclCommFinalize of a non-blocking communicator: completes late, its operations done.
struct FinalizeLate final : FakePending {
  ncclComm* comm;
  int polls = 1;
  explicit FinalizeLate(ncclComm* c) : comm(c) {}
  bool advance() override {
    if (polls-- > 0) return false;
    for (cudaStream_t s : comm->streams) emu::synchronize_stream(s);
    return true;
  }
};

ncclResult_t check_buffer(ncclComm* comm, const void* p, std::size_t bytes, const char* what,
                          const char* call) {
  if (bytes == 0) return ncclSuccess;
  if (!emu::is_device_range(p, bytes))
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": " + what + " (" + std::to_string(bytes) +
                    " bytes) is not inside one live allocation of the emulated device");
  return ncclSuccess;
}

ncclResult_t issue(Op op) {
  ncclComm* comm = op.comm;
  const char* call = kind_name(op.kind);
  if (comm == nullptr || comm->destroyed)
    return fail(nullptr, ncclInvalidArgument,
                std::string(call) + ": no (or a destroyed) communicator");
  if (comm->aborted)
    return fail(comm, ncclInvalidUsage, std::string(call) + ": the communicator was aborted");
  if (comm->pending)
    return fail(comm, ncclInvalidUsage,
                std::string(call) +
                    ": called before the previous call on this non-blocking communicator "
                    "completed (poll ncclCommGetAsyncError until it is not ncclInProgress)");
  if (comm->async_error != ncclSuccess) return comm->async_error;
  const std::size_t es = type_size(op.type);
  if (es == 0) return fail(comm, ncclInvalidArgument, std::string(call) + ": unknown data type");
  const bool reduces = op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter;
  if (reduces && (!reducible(op.type) || static_cast<int>(op.op) < 0 ||
                  static_cast<int>(op.op) >= static_cast<int>(ncclNumOps)))
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": reduction or type not supported by the fake NCCL");
  if ((op.kind == Kind::kBroadcast || op.kind == Kind::kSend || op.kind == Kind::kRecv) &&
      (op.root < 0 || op.root >= comm->size))
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": root/peer " + std::to_string(op.root) + " outside the " +
                    std::to_string(comm->size) + " ranks");
  if ((op.kind == Kind::kSend || op.kind == Kind::kRecv) && op.root == comm->rank)
    return fail(comm, ncclInvalidArgument, std::string(call) + ": to itself");
  const std::size_t bytes = op.count * es;
  const auto p = static_cast<std::size_t>(comm->size);
  if (bytes * p + sizeof(Header) > static_cast<std::size_t>(INT32_MAX))
    return fail(comm, ncclInvalidArgument,
                std::string(call) + ": over 2 GiB in one message (a limit of the fake NCCL)");
  ncclResult_t r = ncclSuccess;
  switch (op.kind) {
    case Kind::kAllReduce:
    case Kind::kBroadcast:
      if (op.kind == Kind::kAllReduce || comm->rank == op.root)
        r = check_buffer(comm, op.send, bytes, "the send buffer", call);
      if (r == ncclSuccess) r = check_buffer(comm, op.recv, bytes, "the receive buffer", call);
      break;
    case Kind::kReduceScatter:
      r = check_buffer(comm, op.send, bytes * p, "the send buffer", call);
      if (r == ncclSuccess) r = check_buffer(comm, op.recv, bytes, "the receive buffer", call);
      break;
    case Kind::kAllGather:
      r = check_buffer(comm, op.send, bytes, "the send buffer", call);
      if (r == ncclSuccess) r = check_buffer(comm, op.recv, bytes * p, "the receive buffer", call);
      break;
    case Kind::kSend:
      r = check_buffer(comm, op.send, bytes, "the send buffer", call);
      break;
    case Kind::kRecv:
      r = check_buffer(comm, op.recv, bytes, "the receive buffer", call);
      break;
  }
  if (r != ncclSuccess) return r;
  if (op.kind != Kind::kSend && op.kind != Kind::kRecv) op.seq = comm->collective_seq++;
  op.index = g_op_counter++;
  const Injection& inj = injection();
  op.inject_failure = inj.active && inj.rank == comm->world_rank && inj.op == op.index;
  if (g_group_depth > 0) {
    g_grouped.push_back(op);
    return ncclSuccess;
  }
  if (call_dies()) return dead_call(comm);
  return submit({op});
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (fake NCCL)";
    case ncclSystemError:
      return "unhandled system error (fake NCCL)";
    case ncclInternalError:
      return "internal error (fake NCCL)";
    case ncclInvalidArgument:
      return "invalid argument (fake NCCL)";
    case ncclInvalidUsage:
      return "invalid usage (fake NCCL)";
    case ncclRemoteError:
      return "remote process exited or there was a network error (fake NCCL)";
    case ncclInProgress:
      return "NCCL operation in progress (fake NCCL)";
    default:
      return "unknown result code (fake NCCL)";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr && !comm->last_error.empty()) return comm->last_error.c_str();
  return g_last_error.c_str();
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized == 0)
    return fail(nullptr, ncclSystemError,
                "ncclGetUniqueId: the fake NCCL runs over MPI; MPI_Init first");
  std::memset(id->internal, 0, sizeof(id->internal));
  static int counter = 0;
  const std::int32_t fields[3] = {0x5a4e4343, world_rank(), counter++};
  std::memcpy(id->internal, fields, sizeof(fields));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t* config) {
  std::int32_t fields[3];
  std::memcpy(fields, id.internal, sizeof(fields));
  if (fields[0] != 0x5a4e4343)
    return fail(nullptr, ncclInvalidArgument,
                "ncclCommInitRank: not a unique id of ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank outside [0, nranks)");
  auto comm = std::make_unique<ncclComm>();
  comm->rank = rank;
  comm->size = nranks;
  comm->world_rank = world_rank();
  comm->id = g_comm_counter++;
  // NCCL_CONFIG_UNDEF_INT (the initializer's value) means NCCL's default: blocking.
  comm->blocking = config == nullptr || config->blocking != 0;
  ncclComm* c = comm.get();
  *out = comm.release();  // set at once: a call in progress can be polled or aborted
  if (call_dies()) return dead_call(c);
  const ncclResult_t r =
      run_or_defer(c, std::make_unique<InitExchange>(c, fields[1], 20000 + fields[2] % 10000));
  if (r != ncclSuccess && r != ncclInProgress) *out = nullptr;
  return r;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  if (comm == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError: no communicator");
  // A GPU's proxy thread makes progress on its own; polling the error is such a moment here.
  if (!comm->aborted) emu::progress();
  if (comm->pending && comm->pending->advance()) comm->pending.reset();
  *error = comm->async_error != ncclSuccess ? comm->async_error
           : comm->pending                  ? ncclInProgress
                                            : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  if (comm->pending) {
    comm->pending->cancel();
    comm->pending.reset();
  }
  for (FakeBatch* b : comm->running) b->cancel();
  comm->running.clear();
  // Queued operations complete (without results) once reached: reach them now.
  for (cudaStream_t s : comm->streams) emu::synchronize_stream(s);
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  comm->destroyed = true;  // the object stays allocated: see the file comment
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr)
    return fail(nullptr, ncclInvalidArgument, "ncclCommFinalize: no communicator");
  if (comm->pending)
    return fail(comm, ncclInvalidUsage,
                "ncclCommFinalize: called before the previous call on this non-blocking "
                "communicator completed");
  if (comm->async_error != ncclSuccess) return comm->async_error;
  if (!comm->blocking) {
    comm->pending = std::make_unique<FinalizeLate>(comm);
    return ncclInProgress;
  }
  for (cudaStream_t s : comm->streams) emu::synchronize_stream(s);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->pending)
    return fail(comm, ncclInvalidUsage,
                "ncclCommDestroy: a call on this non-blocking communicator is in progress "
                "(ncclCommAbort ends it)");
  if (comm->async_error != ncclSuccess) return ncclCommAbort(comm);
  // Completes the operations still queued (they need the peers, as on a GPU).
  for (cudaStream_t s : comm->streams) emu::synchronize_stream(s);
  if (comm->mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->mpi);
  comm->destroyed = true;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++g_group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (g_group_depth == 0)
    return fail(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_group_depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(g_grouped);
  g_grouped.clear();
  if (ops.empty()) return ncclSuccess;
  if (call_dies()) return dead_call(ops.front().comm);
  return submit(std::move(ops));
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(Op{Kind::kAllReduce, send, recv, count, type, op, 0, comm, stream});
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recv_count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return issue(Op{Kind::kReduceScatter, send, recv, recv_count, type, op, 0, comm, stream});
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t send_count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return issue(Op{Kind::kAllGather, send, recv, send_count, type, ncclSum, 0, comm, stream});
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return issue(Op{Kind::kBroadcast, send, recv, count, type, ncclSum, root, comm, stream});
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return issue(Op{Kind::kSend, send, nullptr, count, type, ncclSum, peer, comm, stream});
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return issue(Op{Kind::kRecv, nullptr, recv, count, type, ncclSum, peer, comm, stream});
}

}  // extern "C"
