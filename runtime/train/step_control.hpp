// What the ranks of a job decide together after each step, in one reduction: whether training
// stops at this step boundary (with a checkpoint), and why. Every rank reports what it knows —
// the coordinator's stop reaches the job's leader only, a stop signal may reach one rank, the
// early_stop rule runs on the leader, a test's injected fault on one rank — and every rank gets
// the same decision, so no rank is left alone in a collective.
#pragma once

#include <cstdint>

#include "runtime/comm/communicator.hpp"

namespace saturn {

// One rank's view after a step.
struct StepRequests {
  bool stop = false;        // the coordinator asked for a stop, or a selection rung is reached
  int signal = 0;           // a stop signal this rank received (its number)
  bool early_stop = false;  // the job's early_stop rule fired
  bool fault = false;       // a failure injected for tests (SATURN_FAIL_JOB)
};

// What the job's ranks agreed.
struct StepDecision {
  bool stop = false;  // any reason below, or a stop request of some rank
  int signal = 0;     // the largest signal number any rank received (0: none)
  bool early_stop = false;
  bool fault = false;
};

// Collective over the job's ranks (one allreduce of four integers).
StepDecision agree_step(comm::Communicator& comm, const StepRequests& mine);

}  // namespace saturn
