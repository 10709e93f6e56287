// The MPI backend of Communicator, over any MPI communicator (the world, or a job's group).
// Errors come back as saturn::Error naming the operation and the rank instead of aborting.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "runtime/comm/communicator.hpp"

namespace saturn::comm {

class MpiCommunicator final : public Communicator {
 public:
  // A private duplicate of MPI_COMM_WORLD, so our traffic never matches anyone else's messages.
  static std::unique_ptr<MpiCommunicator> world();
  // Takes ownership of `comm` (freed on destruction), e.g. from MPI_Comm_create_group.
  static std::unique_ptr<MpiCommunicator> adopt(MPI_Comm comm);
  // Uses `comm` without owning it; the caller keeps it alive.
  static std::unique_ptr<MpiCommunicator> borrow(MPI_Comm comm);
  // The communicator of `ranks` (ranks of `parent`, in that order), made by those ranks alone
  // (MPI_Comm_create_group with `tag`, which must be unique among groups made at once), owned.
  // Every MPI call is checked: Error naming it and the ranks.
  static std::unique_ptr<MpiCommunicator> create_group(MPI_Comm parent,
                                                       const std::vector<int>& ranks, int tag);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  // A communicator of the same ranks with its own context (MPI_Comm_dup): its messages never
  // match this one's.
  std::unique_ptr<MpiCommunicator> duplicate() const;
  MPI_Comm handle() const { return comm_; }

 protected:
  void do_allreduce(void* data, std::size_t count, DType type, ReduceOp op) override;
  void do_reduce_scatter(const void* send, void* recv, std::size_t recv_count, DType type,
                         ReduceOp op) override;
  void do_all_gather(const void* send, void* recv, std::size_t send_count, DType type) override;
  void do_broadcast(void* data, std::size_t count, DType type, int root) override;
  void do_send(const void* data, std::size_t count, DType type, int dest, int tag) override;
  void do_recv(void* data, std::size_t count, DType type, int source, int tag) override;
  void do_barrier() override;
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
  MpiCommunicator(MPI_Comm comm, bool owned);
  void check(int rc, const char* what) const;
  int count_of(std::size_t count, const char* what) const;

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

// Process-wide MPI set-up for executables that need MPI only sometimes (`saturn train` with a
// strategy). Initialises MPI (thread level FUNNELED: only the main thread calls MPI) unless
// already initialised; finalize_mpi() finalises only what init_mpi() started.
void init_mpi();
void finalize_mpi();
// init_mpi() for a scope: finalises on every way out, if this scope initialised MPI.
struct MpiSession {
  MpiSession() { init_mpi(); }
  ~MpiSession() { finalize_mpi(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};
// True when this process was started by mpirun/mpiexec/srun with more than one rank (read from
// the launcher's environment, without initialising MPI).
bool launched_with_several_ranks();
// This process's rank as the launcher's environment gives it, or -1 (not launched by one).
int launcher_rank();
// Its rank among the processes of its node (Open MPI, MPICH/Hydra, Slurm), or -1.
int launcher_local_rank();

}  // namespace saturn::comm
