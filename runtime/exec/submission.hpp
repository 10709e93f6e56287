// Rank 0's side of `saturn submit`: a request taken from RUN_DIR/spool is checked again against
// the batch as it is now (a submission accepted since it was written may have taken its ids),
// its jobs planned from this run's profiles, and the submission kept in RUN_DIR/submitted. The
// coordinator then adds the jobs (to every rank's workload, the job table) and re-plans.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/exec/coordinator.hpp"
#include "runtime/exec/spool.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct AcceptedSubmission {
  Workload batch;                // the batch with the new jobs after its own
  PlanningInput planning;        // the new jobs' planning entries
  std::vector<std::string> ids;  // the new jobs
  std::string sources;           // per job: how many configurations trials measured (for logs)
};

// Throws Error (InputError, IoError) with the reason to refuse the request; nothing is written
// then. `accepted`: the submissions already in the batch.
AcceptedSubmission accept_submission(const CoordinatorSetup& setup, const Workload& batch,
                                     const std::vector<Submission>& accepted,
                                     const SpoolRequest& request);

}  // namespace saturn::exec
