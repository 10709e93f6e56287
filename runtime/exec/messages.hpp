// The control plane of `saturn run`: small JSON messages on a duplicate of MPI_COMM_WORLD
// between the coordinator (a thread on rank 0) and the workers (every rank's main thread, rank
// 0's included). Payloads are JSON text: rare, tiny, and readable in a debugger.
#pragma once

#include <mpi.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace saturn::exec {

enum Tag : int {
  kTagReady = 101,     // worker -> coordinator: free for work (after a job or at start)
  kTagCommand = 102,   // coordinator -> worker: {"type":"launch",...} or {"type":"exit","code":N}
  kTagProgress = 103,  // job leader -> coordinator: a step's metrics
  kTagReport = 104,    // job leader -> coordinator: a segment ended (finished|stopped|failed)
  kTagStop = 105,      // coordinator -> job leader: checkpoint at the next step and stop
  kTagShutdown = 106,  // rank 0 main thread -> coordinator: the run is over / abort
};

void send_json(MPI_Comm comm, int dest, int tag, const nlohmann::json& message);
// Blocking receive of one message with `tag` from `source` (MPI_ANY_SOURCE allowed).
nlohmann::json recv_json(MPI_Comm comm, int source, int tag, int* from = nullptr);
// Non-blocking: a message with `tag` from `source` if one is waiting.
std::optional<nlohmann::json> try_recv_json(MPI_Comm comm, int source, int tag,
                                            int* from = nullptr);

// Sends that must not wait for their receiver: a rank that trains reads commands only between
// segments, and a message above MPI's eager limit (a few KiB on shared memory: the jobs of a
// `saturn submit`) would hold the coordinator until then. Each is kept until it completed; the
// destructor waits for the rest. Messages to one rank with one tag still arrive in order,
// also among blocking send_json ones.
class PendingSends {
 public:
  PendingSends() = default;
  PendingSends(const PendingSends&) = delete;
  PendingSends& operator=(const PendingSends&) = delete;
  ~PendingSends();
  void send_json(MPI_Comm comm, int dest, int tag, const nlohmann::json& message);
  void progress();  // forgets those completed

 private:
  struct Send {
    std::unique_ptr<std::string> text;  // alive, and in place, until the send completed
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<Send> sends_;
};

}  // namespace saturn::exec
