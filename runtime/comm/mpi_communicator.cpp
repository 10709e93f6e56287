#include "runtime/comm/mpi_communicator.hpp"

#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <string>

#include "runtime/core/error.hpp"

namespace saturn::comm {
namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kBFloat16:
      return MPI_UINT16_T;  // moved as bits; reductions use the bf16 operators below
  }
  return MPI_DATATYPE_NULL;
}

// MPI knows no bfloat16: reductions of bf16 buffers use operators that compute each element in
// fp32 and round once, as a GPU's bf16 collective does.
template <typename F>
void bf16_reduce(void* in, void* inout, int* len, F&& f) {
  const auto* a = static_cast<const BFloat16*>(in);
  auto* b = static_cast<BFloat16*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = to_bfloat16(f(to_float(a[i]), to_float(b[i])));
}
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x + y; });
}
void bf16_max(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x > y ? x : y; });
}
void bf16_min(void* in, void* inout, int* len, MPI_Datatype*) {
  bf16_reduce(in, inout, len, [](float x, float y) { return x < y ? x : y; });
}

MPI_Op bf16_op(ReduceOp op) {
  // Created once, after MPI_Init (the first bf16 reduction), commutative.
  static const MPI_Op sum = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&bf16_sum, 1, &o);
    return o;
  }();
  static const MPI_Op max = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&bf16_max, 1, &o);
    return o;
  }();
  static const MPI_Op min = [] {
    MPI_Op o = MPI_OP_NULL;
    MPI_Op_create(&bf16_min, 1, &o);
    return o;
  }();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return sum;
    case ReduceOp::kMax:
      return max;
    case ReduceOp::kMin:
      return min;
  }
  return MPI_OP_NULL;
}

// MPI has no average: sum, then scale on completion.
MPI_Op mpi_op(ReduceOp op, DType type) {
  if (type == DType::kBFloat16) return bf16_op(op);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_OP_NULL;
}

void scale(void* data, std::size_t count, DType type, double factor) {
  if (type == DType::kFloat32) {
    auto* p = static_cast<float*>(data);
    const auto f = static_cast<float>(factor);
    for (std::size_t i = 0; i < count; ++i) p[i] *= f;
  } else if (type == DType::kFloat64) {
    auto* p = static_cast<double*>(data);
    for (std::size_t i = 0; i < count; ++i) p[i] *= factor;
  } else if (type == DType::kBFloat16) {
    auto* p = static_cast<BFloat16*>(data);
    const auto f = static_cast<float>(factor);
    for (std::size_t i = 0; i < count; ++i) p[i] = to_bfloat16(to_float(p[i]) * f);
  }
}

void require_float_for_avg(ReduceOp op, DType type) {
  if (op == ReduceOp::kAvg && type != DType::kFloat32 && type != DType::kFloat64 &&
      type != DType::kBFloat16)
    throw Error("ReduceOp::kAvg needs a floating-point type");
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return std::string(text, static_cast<std::size_t>(len));
}

class MpiRequest final : public RequestImpl {
 public:
  MpiRequest(std::string what, std::function<void()> on_complete)
      : what_(std::move(what)), on_complete_(std::move(on_complete)) {}
  ~MpiRequest() override {
    // Never leak an active request: MPI would write into freed buffers later.
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
  }
  MPI_Request* handle() { return &request_; }
  bool test() override {
    int flag = 0;
    check(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    if (flag) finish();
    return flag != 0;
  }
  void wait() override {
    check(MPI_Wait(&request_, MPI_STATUS_IGNORE));
    finish();
  }

 private:
  void check(int rc) {
    if (rc != MPI_SUCCESS) throw Error(fmt::format("{} failed: {}", what_, mpi_error_string(rc)));
  }
  void finish() {
    if (on_complete_) {
      auto f = std::move(on_complete_);
      on_complete_ = nullptr;
      f();
    }
  }
  std::string what_;
  std::function<void()> on_complete_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

bool g_we_initialised = false;

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("MpiCommunicator::world() called before MPI_Init");
  MPI_Comm dup = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  if (rc != MPI_SUCCESS)
    throw Error(fmt::format("MPI_Comm_dup(MPI_COMM_WORLD) failed: {}", mpi_error_string(rc)));
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(dup, true));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::adopt(MPI_Comm comm) {
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, true));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::borrow(MPI_Comm comm) {
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(comm, false));
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::create_group(MPI_Comm parent,
                                                               const std::vector<int>& ranks,
                                                               int tag) {
  const auto check = [&](int rc, const char* what) {
    if (rc != MPI_SUCCESS)
      throw Error(fmt::format("{} for the group of ranks [{}] failed: {}", what,
                              fmt::join(ranks, ", "), mpi_error_string(rc)));
  };
  MPI_Group whole = MPI_GROUP_NULL, part = MPI_GROUP_NULL;
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_group(parent, &whole), "MPI_Comm_group");
  const int incl = MPI_Group_incl(whole, static_cast<int>(ranks.size()), ranks.data(), &part);
  MPI_Group_free(&whole);
  check(incl, "MPI_Group_incl");
  const int made = MPI_Comm_create_group(parent, part, tag, &out);
  MPI_Group_free(&part);
  check(made, "MPI_Comm_create_group");
  return adopt(out);
}

std::string MpiCommunicator::describe() const {
  return fmt::format("mpi rank {}/{}", rank_, size_);
}

void MpiCommunicator::check(int rc, const char* what) const {
  if (rc != MPI_SUCCESS)
    throw Error(fmt::format("{} on {} failed: {}", what, describe(), mpi_error_string(rc)));
}

int MpiCommunicator::count_of(std::size_t count, const char* what) const {
  if (count > static_cast<std::size_t>(INT_MAX))
    throw Error(fmt::format("{} on {}: {} elements exceed MPI's int count; split the buffer", what,
                            describe(), count));
  return static_cast<int>(count);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out), "MPI_Comm_split");
  if (out == MPI_COMM_NULL) return nullptr;
  return adopt(out);
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate() const {
  MPI_Comm out = MPI_COMM_NULL;
  check(MPI_Comm_dup(comm_, &out), "MPI_Comm_dup");
  return adopt(out);
}

void MpiCommunicator::do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) {
  require_float_for_avg(op, type);
  check(MPI_Allreduce(MPI_IN_PLACE, data, count_of(count, "MPI_Allreduce"), mpi_type(type),
                      mpi_op(op, type), comm_),
        "MPI_Allreduce");
  if (op == ReduceOp::kAvg) scale(data, count, type, 1.0 / size_);
}

void MpiCommunicator::do_reduce_scatter(const void* send, void* recv, std::size_t recv_count,
                                        DType type, ReduceOp op) {
  require_float_for_avg(op, type);
  check(MPI_Reduce_scatter_block(send, recv, count_of(recv_count, "MPI_Reduce_scatter_block"),
                                 mpi_type(type), mpi_op(op, type), comm_),
        "MPI_Reduce_scatter_block");
  if (op == ReduceOp::kAvg) scale(recv, recv_count, type, 1.0 / size_);
}

void MpiCommunicator::do_all_gather(const void* send, void* recv, std::size_t send_count,
                                    DType type) {
  const int n = count_of(send_count, "MPI_Allgather");
  const bool in_place = send == static_cast<const char*>(recv) +
                                    static_cast<std::size_t>(rank_) * send_count * dtype_size(type);
  check(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n, mpi_type(type),
                      comm_),
        "MPI_Allgather");
}

void MpiCommunicator::do_broadcast(void* data, std::size_t count, DType type, int root) {
  check(MPI_Bcast(data, count_of(count, "MPI_Bcast"), mpi_type(type), root, comm_), "MPI_Bcast");
}

void MpiCommunicator::do_send(const void* data, std::size_t count, DType type, int dest, int tag) {
  check(MPI_Send(data, count_of(count, "MPI_Send"), mpi_type(type), dest, tag, comm_), "MPI_Send");
}

void MpiCommunicator::do_recv(void* data, std::size_t count, DType type, int source, int tag) {
  check(MPI_Recv(data, count_of(count, "MPI_Recv"), mpi_type(type), source, tag, comm_,
                 MPI_STATUS_IGNORE),
        "MPI_Recv");
}

void MpiCommunicator::do_barrier() {
  check(MPI_Barrier(comm_), "MPI_Barrier");
}

std::unique_ptr<RequestImpl> MpiCommunicator::do_iallreduce(void* data, std::size_t count,
                                                            DType type, ReduceOp op) {
  require_float_for_avg(op, type);
  std::function<void()> done;
  if (op == ReduceOp::kAvg) {
    const double f = 1.0 / size_;
    done = [data, count, type, f] { scale(data, count, type, f); };
  }
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Iallreduce on {}", describe()),
                                        std::move(done));
  check(MPI_Iallreduce(MPI_IN_PLACE, data, count_of(count, "MPI_Iallreduce"), mpi_type(type),
                       mpi_op(op, type), comm_, r->handle()),
        "MPI_Iallreduce");
  return r;
}

std::unique_ptr<RequestImpl> MpiCommunicator::do_ireduce_scatter(const void* send, void* recv,
                                                                 std::size_t recv_count, DType type,
                                                                 ReduceOp op) {
  require_float_for_avg(op, type);
  std::function<void()> done;
  if (op == ReduceOp::kAvg) {
    const double f = 1.0 / size_;
    done = [recv, recv_count, type, f] { scale(recv, recv_count, type, f); };
  }
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Ireduce_scatter_block on {}", describe()),
                                        std::move(done));
  check(MPI_Ireduce_scatter_block(send, recv, count_of(recv_count, "MPI_Ireduce_scatter_block"),
                                  mpi_type(type), mpi_op(op, type), comm_, r->handle()),
        "MPI_Ireduce_scatter_block");
  return r;
}

std::unique_ptr<RequestImpl> MpiCommunicator::do_iall_gather(const void* send, void* recv,
                                                             std::size_t send_count, DType type) {
  const int n = count_of(send_count, "MPI_Iallgather");
  const bool in_place = send == static_cast<const char*>(recv) +
                                    static_cast<std::size_t>(rank_) * send_count * dtype_size(type);
  auto r = std::make_unique<MpiRequest>(fmt::format("MPI_Iallgather on {}", describe()), nullptr);
  check(MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(type), recv, n, mpi_type(type),
                       comm_, r->handle()),
        "MPI_Iallgather");
  return r;
}

std::unique_ptr<RequestImpl> MpiCommunicator::do_isend(const void* data, std::size_t count,
                                                       DType type, int dest, int tag) {
  auto r = std::make_unique<MpiRequest>(
      fmt::format("MPI_Isend to rank {} (tag {}) on {}", dest, tag, describe()), nullptr);
  check(
      MPI_Isend(data, count_of(count, "MPI_Isend"), mpi_type(type), dest, tag, comm_, r->handle()),
      "MPI_Isend");
  return r;
}

std::unique_ptr<RequestImpl> MpiCommunicator::do_irecv(void* data, std::size_t count, DType type,
                                                       int source, int tag) {
  auto r = std::make_unique<MpiRequest>(
      fmt::format("MPI_Irecv from rank {} (tag {}) on {}", source, tag, describe()), nullptr);
  check(MPI_Irecv(data, count_of(count, "MPI_Irecv"), mpi_type(type), source, tag, comm_,
                  r->handle()),
        "MPI_Irecv");
  return r;
}

void init_mpi() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  if (rc != MPI_SUCCESS)
    throw Error(fmt::format("MPI_Init_thread failed: {}", mpi_error_string(rc)));
  g_we_initialised = true;
}

void finalize_mpi() {
  if (!g_we_initialised) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
  g_we_initialised = false;
}

bool launched_with_several_ranks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && std::atoi(v) > 1) return true;
  }
  return false;
}

int launcher_local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    const char* v = std::getenv(var);
    if (v != nullptr) return std::atoi(v);
  }
  return -1;
}

int launcher_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    const char* v = std::getenv(var);
    if (v != nullptr) return std::atoi(v);
  }
  return -1;
}

}  // namespace saturn::comm
