// The control plane of `saturn run`: small JSON messages on a duplicate of MPI_COMM_WORLD
// between the coordinator (a thread on rank 0) and the workers (every rank's main thread, rank
// 0's included). Payloads are JSON text: rare, tiny, and readable in a debugger.
#pragma once

#include <mpi.h>

#include <nlohmann/json.hpp>
#include <optional>

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

}  // namespace saturn::exec
