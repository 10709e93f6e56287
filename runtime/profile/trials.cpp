#include "runtime/profile/trials.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <numeric>
#include <thread>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/profile/text_comm.hpp"
#include "runtime/profile/util.hpp"

namespace saturn::profile {

int RankTopology::ranks() const {
  int n = 0;
  for (const auto& node : nodes) n += static_cast<int>(node.size());
  return n;
}

int RankTopology::largest_node() const {
  std::size_t n = 0;
  for (const auto& node : nodes) n = std::max(n, node.size());
  return static_cast<int>(n);
}

bool RankTopology::fits(const ConfigSpec& c) const {
  if (c.nodes <= 1) return c.degree <= largest_node();
  if (c.degree % c.nodes != 0) return false;
  const auto per = static_cast<std::size_t>(c.degree / c.nodes);
  const auto big = std::count_if(nodes.begin(), nodes.end(),
                                 [&](const std::vector<int>& n) { return n.size() >= per; });
  return big >= c.nodes;
}

std::vector<std::vector<Placement>> schedule_trials(const std::vector<TrialRequest>& trials,
                                                    const RankTopology& topology, bool serialize) {
  // Largest first, then first-fit into rounds; within a round a single-node trial takes the node
  // with the fewest free ranks that still fits it (best fit leaves room for big trials).
  std::vector<std::size_t> order(trials.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return trials[a].config.degree > trials[b].config.degree;
  });
  std::vector<std::vector<Placement>> rounds;
  std::vector<bool> placed(trials.size(), false);
  for (std::size_t i : order)
    if (!topology.fits(trials[i].config))
      throw Error(fmt::format("trial {} at degree {} on {} node(s) does not fit the {} ranks",
                              trials[i].config.label(), trials[i].config.degree,
                              trials[i].config.nodes, topology.ranks()));
  std::size_t left = trials.size();
  while (left > 0) {
    std::vector<std::vector<int>> free = topology.nodes;
    std::vector<Placement> round;
    for (std::size_t i : order) {
      if (placed[i]) continue;
      if (serialize && !round.empty()) break;
      const ConfigSpec& c = trials[i].config;
      Placement p{i, {}};
      if (c.nodes <= 1) {
        int best = -1;
        for (std::size_t n = 0; n < free.size(); ++n) {
          if (static_cast<int>(free[n].size()) < c.degree) continue;
          if (best < 0 || free[n].size() < free[static_cast<std::size_t>(best)].size())
            best = static_cast<int>(n);
        }
        if (best < 0) continue;
        auto& node = free[static_cast<std::size_t>(best)];
        p.ranks.assign(node.begin(), node.begin() + c.degree);
        node.erase(node.begin(), node.begin() + c.degree);
      } else {
        const auto per = static_cast<std::size_t>(c.degree / c.nodes);
        std::vector<std::size_t> use;
        for (std::size_t n = 0; n < free.size() && static_cast<int>(use.size()) < c.nodes; ++n)
          if (free[n].size() >= per) use.push_back(n);
        if (static_cast<int>(use.size()) < c.nodes) continue;
        for (std::size_t n : use) {
          p.ranks.insert(p.ranks.end(), free[n].begin(),
                         free[n].begin() + static_cast<std::ptrdiff_t>(per));
          free[n].erase(free[n].begin(), free[n].begin() + static_cast<std::ptrdiff_t>(per));
        }
      }
      placed[i] = true;
      --left;
      round.push_back(std::move(p));
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

namespace {

data::Batch synthetic_batch(std::int64_t rows, int T, int vocab, std::uint64_t seed,
                            const PackingConfig& packing) {
  // Step time does not depend on the token values; synthetic rows keep trials independent of
  // the data files (and of where the loader stands).
  data::Batch b;
  b.batch_size = rows;
  b.seq_len = T;
  const auto n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(T);
  b.inputs.resize(n);
  b.targets.resize(n);
  Rng rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    b.inputs[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
    b.targets[i] = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(vocab)));
  }
  // Packed records without cross-attention: one record per row, the most attention work a
  // window can hold (shorter records only skip more of it), so the trial's time bounds the
  // data's.
  if (!packing.cross_attention) {
    b.positions.resize(n);
    for (std::size_t i = 0; i < n; ++i)
      b.positions[i] = static_cast<std::int32_t>(i % static_cast<std::size_t>(T));
  }
  return b;
}

double max_over(comm::Communicator& c, double v) {
  c.allreduce(&v, 1, comm::ReduceOp::kMax);
  return v;
}

}  // namespace

namespace {

// What a trial runs on: the rank's device and host pools, the group's communicators and the
// strategy, set up.
struct TrialRig {
  std::unique_ptr<Device> device;
  std::unique_ptr<MemoryPool> host;  // in the memory the device copies from (pinned on a GPU)
  std::unique_ptr<comm::CommPair> comms;
  std::unique_ptr<parallel::Strategy> strategy;
};

// Builds the configuration's strategy on the group and sets it up (an error on any rank is the
// same AgreedFailure on all of them).
TrialRig set_up_trial(const TrialRequest& trial, comm::Communicator& group, const TrialOptions& o) {
  TrialRig rig;
  comm::agree_on(group, [&] {
    if (group.size() != trial.config.degree)
      throw Error(fmt::format("trial of {} at degree {} got a group of {} ranks",
                              trial.config.label(), trial.config.degree, group.size()));
    parallel::StrategySpec spec;
    spec.model = trial.model;
    spec.train = trial.train;
    spec.degree = trial.config.degree;
    spec.knobs = parallel::parse_knobs(trial.config.knobs);
    spec.backend = o.resources.device;
    rig.strategy = parallel::make_strategy(trial.config.strategy, spec);
    // The rank's own device (its binding), whatever group the trial put it in.
    const Resources& res = o.resources;
    rig.device = make_device(res.device, res.device_index >= 0 ? res.device_index : group.rank(),
                             res.device_bytes);
    rig.host = std::make_unique<MemoryPool>("host", res.host_bytes, rig.device->host_allocator());
  });
  rig.comms = comm::make_comm_pair(group, *rig.device);
  comm::agree_on(group, [&] { rig.strategy->setup(*rig.comms, *rig.device, *rig.host); });
  return rig;
}

// Warm-up and timed steps on a synthetic batch, within the trial's time limit (counted from
// t0): the step times into `m` (median, min, max, communication), and why it stopped early.
// Returns false when it did.
bool time_steps(const TrialRequest& trial, comm::Communicator& group, const TrialOptions& o,
                TrialRig& rig, DeviceTimer& timer, Clock::time_point t0, Measurement& m) {
  const TrainConfig& tc = trial.train;
  const data::Batch batch =
      synthetic_batch(tc.batch_size, tc.seq_len, trial.model.vocab_size, 1, tc.packing);
  std::int64_t step = 0;
  // Every rank of the group takes the same branch: the elapsed time is agreed (max) first.
  const auto over_limit = [&] {
    return o.time_limit_s > 0 && max_over(group, seconds_since(t0)) > o.time_limit_s;
  };
  // The slowest rank's step, by the device's timer.
  const auto timed_step = [&] {
    timer.start();
    comm::agree_on(group, [&] { rig.strategy->train_step(batch, step++); });
    timer.stop();
    return max_over(group, timer.seconds());
  };
  std::vector<double> warm_times, times;
  bool stopped_early = false;
  for (int w = 0; w < o.warmup_steps; ++w) {
    warm_times.push_back(timed_step());
    if (over_limit()) {
      stopped_early = true;
      break;
    }
  }
  rig.strategy->reset_stats();
  for (int i = 0; !stopped_early && i < std::max(o.measure_steps, 1); ++i) {
    group.barrier();
    times.push_back(timed_step());
    if (i + 1 < o.measure_steps && over_limit()) stopped_early = true;
  }
  if (times.empty()) {
    // Out of time during warm-up: its steps (first-touch included, so an over-estimate) are
    // all there is, and they still tell the solver this configuration is slow.
    times = warm_times;
    m.reason = fmt::format(
        "trial time limit of {:.0f} s reached during warm-up; step time from {} warm-up "
        "step(s), an over-estimate",
        o.time_limit_s, warm_times.size());
  } else if (stopped_early) {
    m.reason = fmt::format("trial time limit of {:.0f} s reached after {} of {} timed steps",
                           o.time_limit_s, times.size(), o.measure_steps);
  }
  m.steps = static_cast<int>(times.size());
  m.step_s = median(times);
  m.step_min_s = *std::min_element(times.begin(), times.end());
  m.step_max_s = *std::max_element(times.begin(), times.end());
  m.comm_s = max_over(group, rig.strategy->stats().comm.seconds) / static_cast<double>(m.steps);
  return !stopped_early;
}

// One evaluation (the job's eval_batches of validation rows), the slowest rank's time.
double time_eval(const TrialRequest& trial, comm::Communicator& group, TrialRig& rig,
                 DeviceTimer& timer) {
  const TrainConfig& tc = trial.train;
  const data::Batch val =
      synthetic_batch(eval_rows(tc), tc.seq_len, trial.model.vocab_size, 2, tc.packing);
  group.barrier();
  timer.start();
  comm::agree_on(group, [&] { rig.strategy->evaluate(val); });
  timer.stop();
  return max_over(group, timer.seconds());
}

}  // namespace

Measurement run_one_trial(const TrialRequest& trial, comm::Communicator& group,
                          const TrialOptions& o) {
  const auto t0 = Clock::now();
  Measurement m;
  m.device_capacity = o.resources.device_bytes;
  m.measured_utc = utc_now();
  try {
    const cpu::FixedGemmGrid grid(trial.train.reproducible);  // time what the job will run
    TrialRig rig = set_up_trial(trial, group, o);
    m.setup_s = max_over(group, seconds_since(t0));
    // Step times from the device's timer (CUDA events on the compute stream on a GPU; the
    // steady clock on the CPU).
    const std::unique_ptr<DeviceTimer> timer = rig.device->timer();
    m.clock = timer->clock();
    const bool whole = time_steps(trial, group, o, rig, *timer, t0, m);
    if (o.measure_eval && whole) m.eval_s = time_eval(trial, group, rig, *timer);
    std::int64_t peaks[2] = {static_cast<std::int64_t>(rig.device->memory().peak()),
                             static_cast<std::int64_t>(rig.host->peak())};
    group.allreduce(peaks, 2, comm::ReduceOp::kMax);
    m.peak_device_bytes = static_cast<std::size_t>(peaks[0]);
    m.peak_host_bytes = static_cast<std::size_t>(peaks[1]);
  } catch (const comm::AgreedFailure& e) {
    m.feasible = false;
    m.reason = e.what();
  }
  m.wall_s = max_over(group, seconds_since(t0));
  return m;
}

// Keeps this rank computing until `done` completes (every rank finished its part of the round).
// MPI_Test yields the processor when ranks are oversubscribed, so it is called only between
// bursts of about 20 ms of GEMMs: a rank that tested after every small GEMM would sit idle.
namespace {

void ballast_until(comm::Request& done) {
  constexpr int n = 128;
  std::vector<float> a(n * n, 0.5f), w(n * n, 0.25f), out(n * n);
  const auto t0 = Clock::now();
  long gemms = 0;
  do {
    const auto burst = Clock::now();
    while (seconds_since(burst) < 0.02) {
      cpu::linear_forward(out.data(), a.data(), w.data(), nullptr, n, n, n,
                          cpu::WeightLayout::kInOut);
      ++gemms;
    }
  } while (!done.test());
  log::debug("ballast: {} GEMMs in {:.2f} s", gemms, seconds_since(t0));
}

}  // namespace

void run_beside_ballast(comm::Communicator& world, bool ballast,
                        const std::function<void()>& work) {
  std::exception_ptr failed;
  try {
    work();
  } catch (...) {
    failed = std::current_exception();
  }
  // A non-blocking allreduce as the barrier, polled between bursts of ballast.
  std::int32_t token = 1;
  comm::Request done = world.iallreduce(&token, 1, comm::ReduceOp::kSum);
  if (ballast)
    ballast_until(done);
  else
    done.wait();
  if (failed) std::rethrow_exception(failed);
}

namespace {

// One synchronisation of a group of `degree` ranks of one node while the node's other ranks
// compute (ballast), as a multi-rank checkpoint's collectives come in the batch: between file
// writes, beside other jobs. Each rank leaves the processor briefly before each of a burst of
// tiny allreduces (a write does), and the time beyond those pauses is the wait: the mean over
// the burst and the group. Where ranks share cores a partner that left the processor waits for
// a time slice to return, which a burst on a quiet node (microseconds) does not show. Every
// rank of the world calls this.
double contended_sync_s(const RankTopology& topology, int degree, comm::Communicator& world,
                        bool ballast) {
  const std::vector<int>* largest = &topology.nodes.at(0);
  for (const auto& n : topology.nodes)
    if (n.size() > largest->size()) largest = &n;
  const std::vector<int>& node = *largest;
  const auto at = std::find(node.begin(), node.begin() + degree, world.rank());
  const bool in_group = at != node.begin() + degree;
  std::unique_ptr<comm::Communicator> group =
      world.split(in_group ? 0 : -1, static_cast<int>(at - node.begin()));
  double mean = 0;
  run_beside_ballast(world, ballast, [&] {
    if (!group) return;
    constexpr int kCalls = 16;
    const auto pause = [] { std::this_thread::sleep_for(std::chrono::microseconds(20)); };
    auto t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i) pause();
    const double pauses = seconds_since(t0);
    float x = 1.0f;
    group->barrier();
    t0 = Clock::now();
    for (int i = 0; i < kCalls; ++i) {
      pause();
      group->allreduce(&x, 1, comm::ReduceOp::kSum);
    }
    mean = std::max(0.0, seconds_since(t0) - pauses) / kCalls;
    group->allreduce(&mean, 1, comm::ReduceOp::kSum);
    mean /= group->size();
  });
  world.allreduce(&mean, 1, comm::ReduceOp::kMax);  // the group's, on every rank
  return mean;
}

}  // namespace

std::vector<Measurement> run_trials(const std::vector<TrialRequest>& trials,
                                    const RankTopology& topology, comm::Communicator& world,
                                    const TrialOptions& options, TrialRunStats* stats) {
  const auto t0 = Clock::now();
  std::vector<Measurement> out(trials.size());
  if (trials.empty()) return out;
  const auto rounds = schedule_trials(trials, topology, options.serialize);
  const int me = world.rank();
  for (const auto& round : rounds) {
    int color = -1, key = 0;
    for (std::size_t g = 0; g < round.size(); ++g) {
      const auto& ranks = round[g].ranks;
      const auto it = std::find(ranks.begin(), ranks.end(), me);
      if (it != ranks.end()) {
        color = static_cast<int>(g);
        key = static_cast<int>(it - ranks.begin());
      }
    }
    std::unique_ptr<comm::Communicator> group = world.split(color, key);
    std::string result;
    // Idle ranks, and those whose trial ended first, keep computing until the round is over.
    run_beside_ballast(world, options.ballast, [&] {
      if (!group) return;
      const Placement& p = round[static_cast<std::size_t>(color)];
      Measurement m = run_one_trial(trials[p.trial], *group, options);
      m.concurrent = round.size() > 1;
      if (group->rank() == 0)
        result = nlohmann::json{{"trial", p.trial}, {"m", measurement_to_json(m)}}.dump();
    });
    for (const auto& text : all_gather_text(world, result)) {
      if (text.empty()) continue;
      const nlohmann::json j = nlohmann::json::parse(text);
      out.at(j.at("trial").get<std::size_t>()) = measurement_from_json(j.at("m"));
    }
  }
  // Each single-node group size's synchronisation beside computing ranks, for the trials of that
  // size (their checkpoints' collectives). A group as large as the node has no neighbours: the
  // calibration's wait prices it.
  std::map<int, double> sync_by_degree;
  for (const auto& t : trials)
    if (t.config.degree > 1 && t.config.nodes == 1 && t.config.degree < topology.largest_node())
      sync_by_degree[t.config.degree] = 0;
  for (auto& [degree, sync] : sync_by_degree)
    sync = contended_sync_s(topology, degree, world, options.ballast);
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (const auto it = sync_by_degree.find(trials[i].config.degree);
        out[i].feasible && trials[i].config.nodes == 1 && it != sync_by_degree.end())
      out[i].sync_s = it->second;
  if (stats) {
    stats->rounds = static_cast<int>(rounds.size());
    stats->seconds = seconds_since(t0);
  }
  return out;
}

}  // namespace saturn::profile
