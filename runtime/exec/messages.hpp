// The control plane of `saturn run`: typed messages on a duplicate of MPI_COMM_WORLD between the
// coordinator (a thread on rank 0) and the workers (every rank's main thread, rank 0's
// included). One struct per message; this file's send and try_receive functions are the only
// place they are encoded and decoded (as JSON text: rare, tiny, and readable in a debugger).
//
//   worker  -> coordinator  WorkerMessage: RankReady (free for work), StopSignal (a signal came)
//   coordinator -> worker   Command: LaunchSegment, AddJobs (`saturn submit`), Exit
//   job leader -> coordinator  Progress (a step's metrics), SegmentReport (a segment ended)
//   coordinator -> job leader  StopRequest (checkpoint at the next step and stop)
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "runtime/train/trainer.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

// One segment of one job to run: what the coordinator sends each of the job's ranks.
struct SegmentLaunch {
  std::string job_id;
  std::string strategy;            // a parallel::strategy_names() entry
  std::vector<std::string> knobs;  // KEY=VALUE (parallel::parse_knobs)
  std::vector<int> ranks;          // world ranks, ascending; ranks[0] leads
  int segment = 0;                 // 0, 1, ... per job (a re-plan starts a new one)
  int tag = 0;                     // MPI_Comm_create_group tag, unique among live launches
  // Stop (checkpointed) at this step: the job's next selection rung. 0: none.
  std::int64_t pause_step = 0;
};

// How a segment ended.
enum class SegmentStatus { kFinished, kStopped, kFailed };
const char* segment_status_name(SegmentStatus s);  // "finished", "stopped", "failed"

struct SegmentOutcome {
  SegmentStatus status = SegmentStatus::kFailed;
  std::int64_t step = 0;  // optimizer steps done when the segment ended
  std::string reason;     // failed: why; stopped: "signal N (SIGNAME)", "re-plan", ...
  int signal = 0;         // stopped by a stop signal some rank of the job received: its number
  std::optional<double> val_loss;  // the segment's last evaluation
  double peak_device_bytes = 0;
  // Stopped by the job's `early_stop:` rule: EarlyStopHit::to_json(); null otherwise.
  nlohmann::json early_stop;
  SegmentTimes times;  // where the segment's time went (the leader's clock)
};

// ---- worker -> coordinator
struct RankReady {};
struct StopSignal {
  int signal = 0;
};
using WorkerMessage = std::variant<RankReady, StopSignal>;

// ---- coordinator -> worker
struct LaunchSegment {
  SegmentLaunch launch;
};
struct AddJobs {  // jobs `saturn submit` added, for every rank's copy of the workload
  std::vector<JobSpec> jobs;
};
struct Exit {
  int code = 0;
};
using Command = std::variant<LaunchSegment, AddJobs, Exit>;

// ---- job leader -> coordinator
struct Progress {
  std::string job;
  std::int64_t step = 0;
  double loss = 0;
  double tokens_per_s = 0;
  double step_time_s = 0;  // as the coordinator sees it: evaluation and checkpoints included
  std::optional<double> val_loss;
  SegmentTimes times;  // the segment so far, by kind (steps, evaluations, checkpoints, set-up)
};
struct SegmentReport {
  std::string job;
  SegmentOutcome outcome;
};

// ---- coordinator -> job leader
struct StopRequest {
  std::string job;
  int segment = 0;  // the segment it is addressed to: a stop for an ended one is dropped
  std::string reason;
};

// Blocking sends (the message is small; MPI's eager protocol returns at once).
void send(MPI_Comm comm, int dest, const WorkerMessage& message);
void send(MPI_Comm comm, int dest, const Command& message);
void send(MPI_Comm comm, int dest, const Progress& message);
void send(MPI_Comm comm, int dest, const SegmentReport& message);
void send(MPI_Comm comm, int dest, const StopRequest& message);

// A message of type M from `source` (MPI_ANY_SOURCE allowed) if one is waiting; `from` gets its
// sender. M is one of WorkerMessage, Command, Progress, SegmentReport, StopRequest.
template <class M>
std::optional<M> try_receive(MPI_Comm comm, int source, int* from = nullptr);
// Waits for one (polling with a growing sleep: an idle rank must not spin on a core that
// ranks in training need).
template <class M>
M receive(MPI_Comm comm, int source, int* from = nullptr);

// Sends that must not wait for their receiver: a rank that trains reads commands only between
// segments, and a message above MPI's eager limit (a few KiB on shared memory: the jobs of a
// `saturn submit`) would hold the coordinator until then. Each is kept until it completed; the
// destructor waits for the rest. Messages to one rank still arrive in order, also among
// blocking sends.
class PendingSends {
 public:
  PendingSends() = default;
  PendingSends(const PendingSends&) = delete;
  PendingSends& operator=(const PendingSends&) = delete;
  ~PendingSends();
  void send(MPI_Comm comm, int dest, const Command& message);
  void progress();  // forgets those completed

 private:
  struct Send {
    std::unique_ptr<std::string> text;  // alive, and in place, until the send completed
    MPI_Request request = MPI_REQUEST_NULL;
  };
  std::vector<Send> sends_;
};

}  // namespace saturn::exec
