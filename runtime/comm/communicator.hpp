// Collective and point-to-point communication among the ranks of one job, behind one interface
// so that strategies do not depend on the transport: MPI now (mpi_communicator.hpp), NCCL once the
// CUDA backend exists. Every call is timed and its bytes counted, so benchmarks can report the
// fraction of a step spent communicating.
//
// Non-virtual public entry points (typed, timed) call the protected do_* hooks a backend
// implements. Buffers are host pointers for MPI; a NCCL backend takes device pointers with the
// same calls. Counts are elements, not bytes.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "runtime/core/dtype.hpp"

namespace saturn {
class Device;
}

namespace saturn::comm {

// Element types (bf16 included) are the runtime's (runtime/core/dtype.hpp).
using saturn::DType;
using saturn::dtype_of;
using saturn::dtype_size;

enum class ReduceOp { kSum, kAvg, kMax, kMin };

// The kinds of collective operation, as strategies' estimates and the calibration name them
// (CommStats byte conventions: allreduce and reduce-scatter count the whole buffer, all-gather
// and send the rank's contribution).
enum class CollOp { kAllreduce, kAllGather, kReduceScatter, kSendRecv };

const char* reduce_op_name(ReduceOp op);

// What one communicator did since it was created or last reset. `seconds` is wall time spent
// inside blocking calls, starting non-blocking ones and waiting on their requests: the
// communication time a step could not hide behind compute. `bytes` is the payload this rank
// handed to operations (allreduce: the buffer; reduce-scatter: its whole send buffer; all-gather
// and send: its own contribution; recv: what arrived), not wire traffic, which depends on the
// algorithm (a ring allreduce moves 2(p-1)/p of the buffer).
struct CommStats {
  double seconds = 0;
  std::uint64_t bytes = 0;
  std::uint64_t calls = 0;
  CommStats& operator+=(const CommStats& o) {
    seconds += o.seconds;
    bytes += o.bytes;
    calls += o.calls;
    return *this;
  }
};

// Backend state of one non-blocking operation.
class RequestImpl {
 public:
  virtual ~RequestImpl() = default;
  // True once complete (and completion work, e.g. averaging, is done). Never blocks.
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// A handle to a non-blocking operation: wait() before touching its buffers. A default-constructed
// Request is complete. Destroying an incomplete request waits for it, so buffers never outlive
// the transfer by accident. It must not outlive its communicator.
class Request {
 public:
  Request() = default;
  Request(std::unique_ptr<RequestImpl> impl, CommStats* stats)
      : impl_(std::move(impl)), stats_(stats) {}
  Request(Request&&) noexcept = default;
  Request& operator=(Request&& o) noexcept;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  ~Request();

  void wait();
  bool test();
  bool pending() const { return impl_ != nullptr; }

 private:
  std::unique_ptr<RequestImpl> impl_;
  CommStats* stats_ = nullptr;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // For messages: "mpi rank 1/4".
  virtual std::string describe() const = 0;

  // ---- blocking ------------------------------------------------------------------------------
  // In place over `count` elements on every rank.
  template <typename T>
  void allreduce(T* data, std::size_t count, ReduceOp op) {
    allreduce(data, count, dtype_of<T>(), op);
  }
  void allreduce(void* data, std::size_t count, DType type, ReduceOp op);
  // send holds size() * recv_count elements; rank r receives the reduction of block r.
  template <typename T>
  void reduce_scatter(const T* send, T* recv, std::size_t recv_count, ReduceOp op) {
    reduce_scatter(send, recv, recv_count, dtype_of<T>(), op);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                      ReduceOp op);
  // recv holds size() * send_count elements, rank r's contribution at block r. send may be
  // recv + rank() * send_count (in place).
  template <typename T>
  void all_gather(const T* send, T* recv, std::size_t send_count) {
    all_gather(send, recv, send_count, dtype_of<T>());
  }
  void all_gather(const void* send, void* recv, std::size_t send_count, DType type);
  template <typename T>
  void broadcast(T* data, std::size_t count, int root) {
    broadcast(data, count, dtype_of<T>(), root);
  }
  void broadcast(void* data, std::size_t count, DType type, int root);
  template <typename T>
  void send(const T* data, std::size_t count, int dest, int tag) {
    send(data, count, dtype_of<T>(), dest, tag);
  }
  void send(const void* data, std::size_t count, DType type, int dest, int tag);
  template <typename T>
  void recv(T* data, std::size_t count, int source, int tag) {
    recv(data, count, dtype_of<T>(), source, tag);
  }
  void recv(void* data, std::size_t count, DType type, int source, int tag);
  void barrier();

  // ---- non-blocking: the buffers belong to the operation until the request completes -------
  template <typename T>
  Request iallreduce(T* data, std::size_t count, ReduceOp op) {
    return iallreduce(data, count, dtype_of<T>(), op);
  }
  Request iallreduce(void* data, std::size_t count, DType type, ReduceOp op);
  template <typename T>
  Request ireduce_scatter(const T* send, T* recv, std::size_t recv_count, ReduceOp op) {
    return ireduce_scatter(send, recv, recv_count, dtype_of<T>(), op);
  }
  Request ireduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                          ReduceOp op);
  template <typename T>
  Request iall_gather(const T* send, T* recv, std::size_t send_count) {
    return iall_gather(send, recv, send_count, dtype_of<T>());
  }
  Request iall_gather(const void* send, void* recv, std::size_t send_count, DType type);
  template <typename T>
  Request isend(const T* data, std::size_t count, int dest, int tag) {
    return isend(data, count, dtype_of<T>(), dest, tag);
  }
  Request isend(const void* data, std::size_t count, DType type, int dest, int tag);
  template <typename T>
  Request irecv(T* data, std::size_t count, int source, int tag) {
    return irecv(data, count, dtype_of<T>(), source, tag);
  }
  Request irecv(void* data, std::size_t count, DType type, int source, int tag);

  // Collective over this communicator: ranks passing the same color >= 0 form a new
  // communicator, ordered by key (then by rank); color < 0 returns nullptr (not a member).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

 protected:
  virtual void do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) = 0;
  virtual void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                                 ReduceOp op) = 0;
  virtual void do_all_gather(const void* send, void* recv, std::size_t send_count, DType type) = 0;
  virtual void do_broadcast(void* data, std::size_t count, DType type, int root) = 0;
  virtual void do_send(const void* data, std::size_t count, DType type, int dest, int tag) = 0;
  virtual void do_recv(void* data, std::size_t count, DType type, int source, int tag) = 0;
  virtual void do_barrier() = 0;
  virtual std::unique_ptr<RequestImpl> do_iallreduce(void* data, std::size_t count, DType type,
                                                     ReduceOp op) = 0;
  virtual std::unique_ptr<RequestImpl> do_ireduce_scatter(const void* send, void* recv,
                                                          std::size_t recv_count, DType type,
                                                          ReduceOp op) = 0;
  virtual std::unique_ptr<RequestImpl> do_iall_gather(const void* send, void* recv,
                                                      std::size_t send_count, DType type) = 0;
  virtual std::unique_ptr<RequestImpl> do_isend(const void* data, std::size_t count, DType type,
                                                int dest, int tag) = 0;
  virtual std::unique_ptr<RequestImpl> do_irecv(void* data, std::size_t count, DType type,
                                                int source, int tag) = 0;

 private:
  // Times f() and books it (and `bytes`) to this communicator's stats.
  template <typename F>
  auto timed(std::uint64_t bytes, F&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    struct Book {
      CommStats& s;
      std::chrono::steady_clock::time_point t0;
      std::uint64_t bytes;
      ~Book() {
        s.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        s.bytes += bytes;
        ++s.calls;
      }
    } book{stats_, t0, bytes};
    return f();
  }
  CommStats stats_;
};

// A communicator of one rank (no transport): every collective is a copy or a no-op. Lets a
// strategy at degree 1 run without MPI, and tests run strategies in one process. Its copies
// go through `device` when one is given (buffers in device memory), else they are host memcpy.
class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(Device* device = nullptr) : device_(device) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "self (1 rank)"; }
  std::unique_ptr<Communicator> split(int color, int key) override;

 protected:
  void do_allreduce(void*, std::size_t, DType, ReduceOp) override {}
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                         ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType type) override;
  void do_broadcast(void*, std::size_t, DType, int root) override;
  void do_send(const void*, std::size_t, DType, int dest, int tag) override;
  void do_recv(void*, std::size_t, DType, int source, int tag) override;
  void do_barrier() override {}
  std::unique_ptr<RequestImpl> do_iallreduce(void* data, std::size_t count, DType type,
                                             ReduceOp op) override;
  std::unique_ptr<RequestImpl> do_ireduce_scatter(const void* send, void* recv,
                                                  std::size_t recv_count, DType type,
                                                  ReduceOp op) override;
  std::unique_ptr<RequestImpl> do_iall_gather(const void* send, void* recv, std::size_t send_count,
                                              DType type) override;
  std::unique_ptr<RequestImpl> do_isend(const void* data, std::size_t count, DType type, int dest,
                                        int tag) override;
  std::unique_ptr<RequestImpl> do_irecv(void* data, std::size_t count, DType type, int source,
                                        int tag) override;

 private:
  void move(void* dst, const void* src, std::size_t bytes);
  Device* device_;
};

}  // namespace saturn::comm
