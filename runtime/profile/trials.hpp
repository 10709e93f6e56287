// Real trials: a configuration runs a few optimizer steps of its real strategy on a rank group
// of its size (a sub-communicator of the world), after warm-up, and reports its step time, its
// evaluation time and its peak memory. Trials of different configurations run at the same time
// on disjoint groups, list-scheduled by their expected length (a rank runs its trials one after
// another); a trial that fails (out of memory, any error) is agreed by its group and recorded as
// infeasible without disturbing the others.
//
// Contention: on a CPU node whose ranks outnumber its cores, a rank's speed depends on how many
// ranks compute at once. The executor keeps every rank busy, so by default ranks a stage of the
// schedule leaves idle run replicas of its trials (more samples of them), and ranks idle even so
// run "ballast" GEMMs until every trial has ended: every trial then sees the contention it will
// see in the batch. `serialize` runs one trial at a time (with ballast off: an uncontended
// measurement, for comparison).
#pragma once

#include "runtime/backend/device.hpp"

#include <cstddef>
#include <functional>
#include <map>
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
  // The estimate's step and evaluation times: they order and pack the schedule (0: unknown).
  double est_step_s = 0;
  double est_eval_s = 0;
};

struct TrialOptions {
  int warmup_steps = 1;   // untimed steps first (first-touch of memory, caches)
  int measure_steps = 1;  // timed steps; the median is the measurement
  // Steps of a few milliseconds: more timed steps, until they add up to this (at most
  // max_timed_steps): the median of two such steps is at the mercy of one time slice.
  double min_timed_s = 0.03;
  int max_timed_steps = 12;
  bool serialize = false;    // one trial at a time
  bool ballast = true;       // idle ranks compute while trials run (see above)
  bool measure_eval = true;  // also time one evaluation (else Measurement::eval_s = 0)
  // The backend the trials run on, this rank's device (the launch binding's), and the capacity
  // of each trial rank's device pool and host pool (offload); 0: unlimited.
  Resources resources;
  // Wall-clock budget of one trial in seconds (0: none). A configuration so slow that its
  // steps overrun it is not worth more trial time: the steps done so far are the measurement
  // (Measurement::reason says so), and the trials after it are not held up much longer.
  double time_limit_s = 60;
  // The contended synchronisation waits known already, by group size (the calibration's): a
  // probe measures only the sizes missing here.
  std::map<int, double> contended_sync_s;
};

// The world's ranks by node (the trials' placement): a single-node configuration of degree d
// runs on d ranks of one node; a multi-node one on degree/nodes ranks of each of `nodes` nodes.
struct RankTopology {
  std::vector<std::vector<int>> nodes;
  int ranks() const;
  int largest_node() const;
  bool fits(const ConfigSpec& config) const;
};

// A trial's expected wall time under `options`: set-up (about a step), warm-up and timed steps,
// one evaluation; capped by the time limit.
double expected_trial_s(const TrialRequest& trial, const TrialOptions& options);

// What the schedule places: a group of a configuration's shape (its degree and nodes) for an
// expected time; a trial, or a probe (probes run in a stage of their own, after the trials).
struct ScheduleItem {
  ConfigSpec config;
  double expected_s = 0;
  bool probe = false;
};

// Where and when an item runs: its world ranks in group order, its stage, and its expected start
// and end (seconds from the schedule's start).
struct Placement {
  std::size_t item = 0;
  std::vector<int> ranks;
  int stage = 0;
  double start_s = 0;
  double end_s = 0;
  bool replica = false;  // a further run of the item, on ranks its stage would leave idle
};

// Every item placed, in order of expected start. Trials of one size (degree) form a stage, the
// widest first, and the probes a last one; a stage starts when the one before it has ended: a
// trial's neighbours are then trials like it or ballast, as in a batch of such jobs (a 1-rank trial
// beside 2-rank trials, whose ranks leave the processor inside their collectives, measured 1.2-1.6x
// faster than the same jobs ran in the batch). Within a stage, longest first, each at the earliest
// time enough ranks of a node (of `nodes` nodes when multi-node) are free for its whole expected
// length, on the node that leaves the fewest free ranks (best fit): a rank runs several short
// trials while another runs a long one. Ranks a stage would leave idle run replicas of its
// trials (Placement::replica; longest first, none past the stage's end): a run_trials
// measurement is the median of its runs. With `serialize`, one item at a time. Each rank runs
// its items in this order (one global order, so no two ranks wait on each other in a cycle);
// an item starts when the last of its ranks is free, whatever the expectation said.
std::vector<Placement> schedule_trials(const std::vector<ScheduleItem>& items,
                                       const RankTopology& topology, bool serialize);

// Work that must see a full batch's contention too, on `degree` ranks of one node (the run
// directory's checkpoint writes, a group's synchronisation): the probes run together after the
// trials, the ranks without one computing ballast. (Beside single-rank trials they would give
// those trials the processor whenever they sleep in a write or a wait: such trials measured a
// third faster than their jobs ran.)
struct SideProbe {
  int degree = 1;
  double expected_s = 0.1;
  std::function<void(comm::Communicator& group)> run;  // collective over the probe's group
};

struct TrialRunStats {
  double expected_s = 0;  // the schedule's expected length
  double seconds = 0;     // what the trials took, the probes included
  // Each single-node group size of the trials smaller than a node: its synchronisation wait
  // beside computing ranks (Measurement::sync_s), known or probed now.
  std::map<int, double> contended_sync_s;
};

// Collective over `world`: runs every trial (each must fit the topology) and every probe, and
// returns one Measurement per trial, identical on every rank. A probe's results stay on its
// group's ranks (its `run` puts them where the caller reads them).
std::vector<Measurement> run_trials(const std::vector<TrialRequest>& trials,
                                    const RankTopology& topology, comm::Communicator& world,
                                    const TrialOptions& options, TrialRunStats* stats = nullptr,
                                    const std::vector<SideProbe>& probes = {});

// Collective over `group` (size == the configuration's degree): one trial. Never throws for a
// failure of the configuration itself (it is the measurement's reason).
Measurement run_one_trial(const TrialRequest& trial, comm::Communicator& group,
                          const TrialOptions& options);

}  // namespace saturn::profile
