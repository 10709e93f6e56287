// Real trials: a configuration runs a few optimizer steps of its real strategy on a rank group
// of its size (a sub-communicator of the world), after warm-up, and reports its step time, its
// evaluation time and its peak memory. Trials of different configurations run at the same time
// on disjoint groups, packed into rounds; a trial that fails (out of memory, any error) is agreed
// by its group and recorded as infeasible without disturbing the others.
//
// Contention: on a CPU node whose ranks outnumber its cores, a rank's speed depends on how many
// ranks compute at once. The executor keeps every rank busy, so by default ranks left idle in a
// round run "ballast" GEMMs until the round ends: every trial then sees the contention it will
// see in the batch. `serialize` runs one trial per round (with ballast off: an uncontended
// measurement, for comparison).
#pragma once

#include "runtime/backend/device.hpp"

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/config.hpp"
#include "runtime/profile/cost_model.hpp"
#include "runtime/profile/store.hpp"

namespace saturn::profile {

struct TrialRequest {
  ModelConfig model;
  TrainConfig train;
  ConfigSpec config;
};

struct TrialOptions {
  int warmup_steps = 1;      // untimed steps first (first-touch of memory, caches)
  int measure_steps = 2;     // timed steps; the median is the measurement
  bool serialize = false;    // one trial at a time
  bool ballast = true;       // idle ranks compute while a round runs (see above)
  bool measure_eval = true;  // also time one evaluation (else Measurement::eval_s = 0)
  // The backend the trials run on, this rank's device (the launch binding's), and the capacity
  // of each trial rank's device pool and host pool (offload); 0: unlimited.
  Resources resources;
  // Wall-clock budget of one trial in seconds (0: none). A configuration so slow that its
  // steps overrun it is not worth more trial time: the steps done so far are the measurement
  // (Measurement::reason says so), and the round's other groups are not held up much longer.
  double time_limit_s = 60;
};

// The world's ranks by node (the trials' placement): a single-node configuration of degree d
// runs on d ranks of one node; a multi-node one on degree/nodes ranks of each of `nodes` nodes.
struct RankTopology {
  std::vector<std::vector<int>> nodes;
  int ranks() const;
  int largest_node() const;
  bool fits(const ConfigSpec& config) const;
};

// Which trials run together: rounds of (trial index, world ranks in group order).
struct Placement {
  std::size_t trial = 0;
  std::vector<int> ranks;
};
std::vector<std::vector<Placement>> schedule_trials(const std::vector<TrialRequest>& trials,
                                                    const RankTopology& topology, bool serialize);

struct TrialRunStats {
  int rounds = 0;
  double seconds = 0;
};

// Collective over `world`: runs `work` on this rank (it may be nothing), then, with `ballast`,
// keeps the rank computing (small GEMMs) until every rank has finished its own: what ranks
// without work do while others measure, so that the measurement sees the contention of a full
// batch. Without `ballast` a rank that is done just waits. An exception from `work` is rethrown
// once every rank is done.
void run_beside_ballast(comm::Communicator& world, bool ballast, const std::function<void()>& work);

// Collective over `world`: runs every trial (each must fit the topology) and returns one
// Measurement per trial, identical on every rank.
std::vector<Measurement> run_trials(const std::vector<TrialRequest>& trials,
                                    const RankTopology& topology, comm::Communicator& world,
                                    const TrialOptions& options, TrialRunStats* stats = nullptr);

// Collective over `group` (size == the configuration's degree): one trial. Never throws for a
// failure of the configuration itself (it is the measurement's reason).
Measurement run_one_trial(const TrialRequest& trial, comm::Communicator& group,
                          const TrialOptions& options);

}  // namespace saturn::profile
