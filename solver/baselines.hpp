// The baselines of the Saturn paper (Section 4.3), for comparison in benchmarks and the
// simulator. They choose among all feasible configurations (no Pareto filtering), as a user
// or an existing scheduler would.
//
//  current practice  each job takes all devices of one node (its configuration of that size
//                    with the hand-picked strategy — FSDP in the paper — else its fastest
//                    configuration fitting the node), jobs run one after another on whichever
//                    node frees first, in input order.
//  min               each job takes its configuration with the fewest devices (the fastest of
//                    those), LPT list scheduling with backfilling.
//  optimus-greedy    Optimus*-greedy with a random scheduler: whenever devices free up, the
//                    waiting jobs, in a random order, start where they fit in their
//                    fewest-device configuration; then the free devices of each node go, one
//                    configuration step at a time, to the job just started there whose run
//                    time drops most per added device, while any drop remains.
//  random            a random feasible configuration per job, random list order.
#pragma once

#include <string>

#include "solver/schedule.hpp"

namespace saturn::solver {

enum class Baseline { current_practice, min, optimus_greedy, random };
const char* to_string(Baseline b);

// `prepared` should come from prepare(problem, /*pareto=*/false).
// `current_practice_strategy`: the strategy label (prefix) current practice prefers on a whole
// node; "" for the job's fastest whole-node configuration.
Schedule baseline_schedule(const Prepared& prepared, Baseline which, unsigned seed = 1,
                           const std::string& current_practice_strategy = "fsdp");

// Convenience: prepare, schedule, map devices, validate. lower_bound_s is left 0.
Plan baseline_plan(const Problem& problem, Baseline which, unsigned seed = 1,
                   const std::string& current_practice_strategy = "fsdp");

}  // namespace saturn::solver
