// The plan validator used by every test and by the executor before it runs a plan.
#pragma once

#include <string>
#include <vector>

#include "solver/problem.hpp"

namespace saturn::solver {

// Every violation found, one sentence each naming the job(s), device or node; empty when the
// plan is valid. Checks: one entry per job with a configuration that exists; devices that
// exist, as many as the configuration needs, on the listed nodes, all on one node unless the
// configuration spans whole nodes (then the same number on each of exactly `nodes` nodes, and
// no other job on those nodes meanwhile); device memory within the node's capacity; run time
// equal to the configuration's; never two jobs on one device at once; pinned configurations
// start at 0 on their devices; makespan_s equal to the latest end.
std::vector<std::string> validate_plan(const Problem& problem, const Plan& plan);

// Throws SolverError listing the violations when there are any.
void check_plan(const Problem& problem, const Plan& plan);

}  // namespace saturn::solver
