#include "runtime/profile/trials.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
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
#include "runtime/model/weight_cache.hpp"
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

double expected_trial_s(const TrialRequest& trial, const TrialOptions& o) {
  // Unknown estimates count alike: only the order among trials matters then.
  const double step = trial.est_step_s > 0 ? trial.est_step_s : 1.0;
  const int timed =
      std::max(std::max(o.measure_steps, 1),
               std::min(o.max_timed_steps, static_cast<int>(std::ceil(o.min_timed_s / step))));
  const double s = (1 + o.warmup_steps + timed) * step + (o.measure_eval ? trial.est_eval_s : 0);
  return o.time_limit_s > 0 ? std::min(s, o.time_limit_s) : s;
}

namespace {

// Each world rank's expected busy intervals, as the schedule fills them.
class RankCalendar {
 public:
  bool free(int rank, double from, double to) const {
    const auto it = busy_.find(rank);
    if (it == busy_.end()) return true;
    constexpr double kEps = 1e-12;
    for (const auto& [s, e] : it->second)
      if (s < to - kEps && from < e - kEps) return false;
    return true;
  }
  void book(const std::vector<int>& ranks, double from, double to) {
    for (int r : ranks) busy_[r].emplace_back(from, to);
  }
  // The times a trial may start at: 0 and every booked end, ascending.
  std::vector<double> starts() const {
    std::vector<double> t{0.0};
    for (const auto& [rank, spans] : busy_)
      for (const auto& span : spans) t.push_back(span.second);
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
    return t;
  }

 private:
  std::map<int, std::vector<std::pair<double, double>>> busy_;
};

// The ranks a configuration takes if it starts at `from` for `length` seconds, or none.
std::vector<int> free_ranks_for(const ConfigSpec& c, const RankTopology& topology,
                                const RankCalendar& calendar, double from, double length) {
  std::vector<std::vector<int>> free(topology.nodes.size());
  for (std::size_t n = 0; n < topology.nodes.size(); ++n)
    for (int r : topology.nodes[n])
      if (calendar.free(r, from, from + length)) free[n].push_back(r);
  std::vector<int> ranks;
  if (c.nodes <= 1) {
    // Best fit: the node with the fewest free ranks that still holds it leaves room for big ones.
    int best = -1;
    for (std::size_t n = 0; n < free.size(); ++n) {
      if (static_cast<int>(free[n].size()) < c.degree) continue;
      if (best < 0 || free[n].size() < free[static_cast<std::size_t>(best)].size())
        best = static_cast<int>(n);
    }
    if (best >= 0) {
      const auto& node = free[static_cast<std::size_t>(best)];
      ranks.assign(node.begin(), node.begin() + c.degree);
    }
    return ranks;
  }
  const auto per = static_cast<std::size_t>(c.degree / c.nodes);
  int used = 0;
  for (std::size_t n = 0; n < free.size() && used < c.nodes; ++n)
    if (free[n].size() >= per) {
      ranks.insert(ranks.end(), free[n].begin(),
                   free[n].begin() + static_cast<std::ptrdiff_t>(per));
      ++used;
    }
  if (used < c.nodes) ranks.clear();
  return ranks;
}

// Fills the ranks a stage leaves idle from its start with replicas of its trials, longest
// first, round after round while one fits: a replica costs no time, gives its trial another
// sample, and is the neighbour a batch of such jobs has (ballast only stands in for one). Not in
// the gaps a stage's end leaves: a replica started there on the estimates' word would hold the
// stage up whenever they are short.
void add_replicas(const std::vector<ScheduleItem>& items, const RankTopology& topology,
                  double stage_start, RankCalendar& calendar, std::vector<Placement>& placed) {
  std::vector<Placement> originals;
  for (const Placement& p : placed)
    if (p.start_s >= stage_start && !p.replica && !items[p.item].probe) originals.push_back(p);
  for (bool added = true; added;) {
    added = false;
    for (const Placement& o : originals) {
      const double length = o.end_s - o.start_s;
      if (length <= 0) continue;  // an empty interval would fit forever
      std::vector<int> ranks =
          free_ranks_for(items[o.item].config, topology, calendar, stage_start, length);
      if (ranks.empty()) continue;
      calendar.book(ranks, stage_start, stage_start + length);
      placed.push_back(
          Placement{o.item, std::move(ranks), o.stage, stage_start, stage_start + length, true});
      added = true;
    }
  }
}

}  // namespace

std::vector<Placement> schedule_trials(const std::vector<ScheduleItem>& items,
                                       const RankTopology& topology, bool serialize) {
  for (const auto& t : items)
    if (!topology.fits(t.config))
      throw Error(fmt::format("trial {} at degree {} on {} node(s) does not fit the {} ranks",
                              t.config.label(), t.config.degree, t.config.nodes, topology.ranks()));
  const auto stage_of = [&](std::size_t i) { return items[i].probe ? 0 : items[i].config.degree; };
  // Widest stage first; within a stage, longest first, each at its earliest start in the stage.
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (stage_of(a) != stage_of(b)) return stage_of(a) > stage_of(b);
    return items[a].expected_s > items[b].expected_s;
  });
  RankCalendar calendar;
  double stage_start = 0, last_end = 0;
  int stage = -1;
  std::vector<Placement> placed;
  for (std::size_t k = 0; k < order.size(); ++k) {
    const std::size_t i = order[k];
    const double length = items[i].expected_s;
    if (k == 0 || stage_of(i) != stage_of(order[k - 1])) {
      if (!serialize) add_replicas(items, topology, stage_start, calendar, placed);
      ++stage;
      stage_start = last_end;
    }
    std::vector<double> starts{serialize ? last_end : stage_start};
    if (!serialize)
      for (double t : calendar.starts())
        if (t > stage_start) starts.push_back(t);
    for (double from : starts) {
      std::vector<int> ranks = free_ranks_for(items[i].config, topology, calendar, from, length);
      if (ranks.empty()) continue;
      calendar.book(ranks, from, from + length);
      last_end = std::max(last_end, from + length);
      placed.push_back(Placement{i, std::move(ranks), stage, from, from + length});
      break;
    }
  }
  if (!serialize) add_replicas(items, topology, stage_start, calendar, placed);
  std::stable_sort(placed.begin(), placed.end(), [](const Placement& a, const Placement& b) {
    return a.start_s < b.start_s || (a.start_s == b.start_s && a.item < b.item);
  });
  return placed;
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
  const auto more = [&](int i) {
    if (i < std::max(o.measure_steps, 1)) return true;
    double timed = 0;
    for (double t : times) timed += t;
    return timed < o.min_timed_s && i < o.max_timed_steps;
  };
  for (int i = 0; !stopped_early && more(i); ++i) {
    group.barrier();
    times.push_back(timed_step());
    if (more(i + 1) && over_limit()) stopped_early = true;
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
    // Past the steps asked for, the timed window was adding steps this short.
    const bool in_window = static_cast<int>(times.size()) >= std::max(o.measure_steps, 1);
    m.reason = in_window
                   ? fmt::format(
                         "trial time limit of {:.0f} s reached after {} timed step(s) of up "
                         "to {} (steps this short are timed until they add up to {:.0f} ms)",
                         o.time_limit_s, times.size(), o.max_timed_steps, 1e3 * o.min_timed_s)
                   : fmt::format("trial time limit of {:.0f} s reached after {} of {} timed steps",
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

// What drawing the initial weights the trials had from memory would have taken, on this rank.
double weights_served_s() {
  const CanonicalWeightCache* cache = CanonicalWeightCache::active();
  return cache ? cache->saved_s() : 0.0;
}

}  // namespace

Measurement run_one_trial(const TrialRequest& trial, comm::Communicator& group,
                          const TrialOptions& o) {
  // From when the whole group is here: a rank may come from a trial that ended later.
  group.barrier();
  const auto t0 = Clock::now();
  Measurement m;
  m.device_capacity = o.resources.device_bytes;
  m.measured_utc = utc_now();
  try {
    const cpu::FixedGemmGrid grid(trial.train.reproducible);  // time what the job will run
    const double served_before = weights_served_s();
    TrialRig rig = set_up_trial(trial, group, o);
    // A segment's start draws the initial weights, which a trial may have had from memory.
    m.setup_s = max_over(group, seconds_since(t0) + weights_served_s() - served_before);
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

namespace {

// Keeps this rank computing until `done` completes (every rank of a barrier is there), which is
// expected at `expected_end`. MPI_Test yields the processor when ranks are oversubscribed, so it
// is called only between bursts of GEMMs: a rank that tested after every small GEMM would sit
// idle. But a collective completes only as its ranks test, each after its burst, so the bursts
// start at 1 ms and double up to 20 ms (ranks that end together part within a few ms), and
// before the expected end last at most half the time left to it (a rank that has computed
// since a stage's start is not in a long burst when the others arrive); past the expected end
// they grow again from 1 ms.
void ballast_until(comm::Request& done, Clock::time_point expected_end) {
  constexpr int n = 128;
  constexpr double kShortest = 0.001, kLongest = 0.02;
  std::vector<float> a(n * n, 0.5f), w(n * n, 0.25f), out(n * n);
  const auto t0 = Clock::now();
  long gemms = 0;
  double grown = kShortest;
  bool overdue = false;
  do {
    const double left = std::chrono::duration<double>(expected_end - Clock::now()).count();
    if (left <= 0 && !overdue) {
      overdue = true;
      grown = kShortest;
    }
    const double burst_s = left > 0 ? std::min(grown, std::max(kShortest, left / 2)) : grown;
    grown = std::min(2 * grown, kLongest);
    const auto burst = Clock::now();
    while (seconds_since(burst) < burst_s) {
      cpu::linear_forward(out.data(), a.data(), w.data(), nullptr, n, n, n,
                          cpu::WeightLayout::kInOut);
      ++gemms;
    }
  } while (!done.test());
  log::debug("ballast: {} GEMMs in {:.2f} s", gemms, seconds_since(t0));
}

// Collective over `comm`: a barrier at which this rank, with `ballast`, computes while it waits
// for the others, expected at `expected_end`.
void wait_beside_ballast(comm::Communicator& comm, bool ballast, Clock::time_point expected_end) {
  // A non-blocking allreduce as the barrier, polled between bursts of ballast.
  std::int32_t token = 1;
  comm::Request done = comm.iallreduce(&token, 1, comm::ReduceOp::kSum);
  if (ballast)
    ballast_until(done, expected_end);
  else
    done.wait();
}

// Collective over `world`: runs `work` on this rank (it may be nothing), then, with `ballast`,
// keeps the rank computing (small GEMMs) until every rank has finished its own (expected at
// `expected_end`): what ranks without work do while others measure, so that the measurement
// sees the contention of a full batch. Without `ballast` a rank that is done just waits. An
// exception from `work` on any rank becomes the same comm::AgreedFailure on every rank once all
// are done.
void run_beside_ballast(comm::Communicator& world, bool ballast, Clock::time_point expected_end,
                        const std::function<void()>& work) {
  std::exception_ptr failed;
  try {
    work();
  } catch (...) {
    failed = std::current_exception();
  }
  wait_beside_ballast(world, ballast, expected_end);
  comm::agree(world, failed);  // one rank's failure is every rank's, none left waiting
}

// One synchronisation of `group` (ranks of one node) while the node's other ranks compute, as a
// multi-rank checkpoint's collectives come in the batch: between file writes, beside other jobs.
// Each rank leaves the processor briefly before each of a burst of tiny allreduces (a write
// does), and the time beyond those pauses is the wait: the mean over the burst and the group.
// Where ranks share cores a partner that left the processor waits for a time slice to return,
// which a burst on a quiet node (microseconds) does not show. Collective over `group`.
double contended_sync_s(comm::Communicator& group) {
  constexpr int kCalls = 16;
  const auto pause = [] { std::this_thread::sleep_for(std::chrono::microseconds(20)); };
  auto t0 = Clock::now();
  for (int i = 0; i < kCalls; ++i) pause();
  const double pauses = seconds_since(t0);
  float x = 1.0f;
  group.barrier();
  t0 = Clock::now();
  for (int i = 0; i < kCalls; ++i) {
    pause();
    group.allreduce(&x, 1, comm::ReduceOp::kSum);
  }
  double mean = std::max(0.0, seconds_since(t0) - pauses) / kCalls;
  group.allreduce(&mean, 1, comm::ReduceOp::kSum);
  return mean / group.size();
}

// One item of the schedule on this rank's group: a trial (its measurement as JSON, from the
// group's first rank) or a probe.
void run_item(std::size_t item, comm::Communicator& group, const std::vector<TrialRequest>& trials,
              const std::vector<SideProbe>& probes, const TrialOptions& options, bool beside_others,
              nlohmann::json& results) {
  if (item >= trials.size()) {
    probes[item - trials.size()].run(group);
    return;
  }
  Measurement m = run_one_trial(trials[item], group, options);
  m.concurrent = beside_others;
  if (group.rank() == 0) results.push_back({{"trial", item}, {"m", measurement_to_json(m)}});
}

// One measurement of a trial from its runs (the original and its replicas, in any order): the
// median of their step, evaluation and set-up times, the largest peaks; a run that failed fails
// the trial (a replica runs what the job would run).
Measurement combine_runs(const std::vector<Measurement>& runs) {
  if (runs.empty()) return {};
  for (const Measurement& m : runs)
    if (!m.feasible) return m;
  Measurement c = runs.front();
  const auto median_of = [&](double Measurement::*field) {
    std::vector<double> v;
    for (const Measurement& m : runs) v.push_back(m.*field);
    return median(v);
  };
  c.step_s = median_of(&Measurement::step_s);
  c.eval_s = median_of(&Measurement::eval_s);
  c.setup_s = median_of(&Measurement::setup_s);
  c.comm_s = median_of(&Measurement::comm_s);
  c.steps = 0;
  for (const Measurement& m : runs) {
    c.steps += m.steps;
    c.step_min_s = std::min(c.step_min_s, m.step_min_s);
    c.step_max_s = std::max(c.step_max_s, m.step_max_s);
    c.peak_device_bytes = std::max(c.peak_device_bytes, m.peak_device_bytes);
    c.peak_host_bytes = std::max(c.peak_host_bytes, m.peak_host_bytes);
    c.wall_s = std::max(c.wall_s, m.wall_s);
    c.concurrent = c.concurrent || m.concurrent;
    if (c.reason.empty()) c.reason = m.reason;
  }
  return c;
}

// Collective over `world`: every trial's measurement, its runs' combined, from the results each
// rank's groups recorded.
std::vector<Measurement> gathered_measurements(comm::Communicator& world,
                                               const nlohmann::json& mine, std::size_t trials) {
  std::vector<std::vector<Measurement>> runs(trials);
  for (const auto& text : all_gather_text(world, mine.dump()))
    for (const auto& j : nlohmann::json::parse(text))
      runs.at(j.at("trial").get<std::size_t>()).push_back(measurement_from_json(j.at("m")));
  std::vector<Measurement> out;
  for (const auto& r : runs) out.push_back(combine_runs(r));
  return out;
}

// Collective over `world`: the probes' synchronisation waits (on their groups' ranks) on every
// rank, with the known ones of the sizes tried, into `sync_by_degree` and each single-node
// trial's measurement.
void agree_synchronisations(comm::Communicator& world, const std::vector<TrialRequest>& trials,
                            const std::map<int, double>& known,
                            std::map<int, double>& sync_by_degree, std::vector<Measurement>& out) {
  std::vector<double> syncs;
  for (const auto& [degree, sync] : sync_by_degree) syncs.push_back(sync);
  if (!syncs.empty()) world.allreduce(syncs.data(), syncs.size(), comm::ReduceOp::kMax);
  std::size_t n = 0;
  for (auto& [degree, sync] : sync_by_degree) sync = syncs[n++];
  for (const auto& t : trials)
    if (const auto it = known.find(t.config.degree); t.config.nodes == 1 && it != known.end())
      sync_by_degree[it->first] = it->second;
  for (std::size_t i = 0; i < trials.size(); ++i)
    if (const auto it = sync_by_degree.find(trials[i].config.degree);
        out[i].feasible && trials[i].config.nodes == 1 && it != sync_by_degree.end())
      out[i].sync_s = it->second;
}

// Each single-node group size of the trials smaller than the node, whose synchronisation a
// probe measures for their checkpoints' collectives (0 until it has) unless `known` has it. A
// group as large as the node has no neighbours: the calibration's wait prices it.
std::map<int, double> sync_probe_degrees(const std::vector<TrialRequest>& trials,
                                         const RankTopology& topology,
                                         const std::map<int, double>& known) {
  std::map<int, double> sync_by_degree;
  for (const auto& t : trials)
    if (t.config.degree > 1 && t.config.nodes == 1 && t.config.degree < topology.largest_node() &&
        !known.contains(t.config.degree))
      sync_by_degree[t.config.degree] = 0;
  return sync_by_degree;
}

// Every item's group, split up front (a split is collective over the world) in the schedule's
// order; this rank's are the items it runs, in that order (null elsewhere).
std::vector<std::unique_ptr<comm::Communicator>> split_groups(
    const std::vector<Placement>& schedule, comm::Communicator& world) {
  std::vector<std::unique_ptr<comm::Communicator>> groups;
  for (const Placement& p : schedule) {
    const auto it = std::find(p.ranks.begin(), p.ranks.end(), world.rank());
    groups.push_back(it == p.ranks.end() ? world.split(-1, 0)
                                         : world.split(0, static_cast<int>(it - p.ranks.begin())));
  }
  return groups;
}

// Others beside it by the schedule (an end that meets a start does not count).
bool overlapped(const std::vector<Placement>& schedule, const Placement& p) {
  return std::any_of(schedule.begin(), schedule.end(), [&](const Placement& q) {
    return &q != &p && q.start_s < p.end_s && p.start_s < q.end_s;
  });
}

bool same_ranks(std::vector<int> a, std::vector<int> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

// Collective over `world`: the stage schedule[first, end), this rank's items in order; a rank
// done with its items keeps computing until the stage ends.
void run_stage(std::size_t first, std::size_t end, const std::vector<Placement>& schedule,
               std::vector<std::unique_ptr<comm::Communicator>>& groups,
               const std::vector<TrialRequest>& trials, const std::vector<SideProbe>& probes,
               comm::Communicator& world, const TrialOptions& options, nlohmann::json& results) {
  const auto t0 = Clock::now();
  const auto expected_at = [&](double schedule_s) {
    return t0 + std::chrono::duration_cast<Clock::duration>(
                    std::chrono::duration<double>(schedule_s - schedule[first].start_s));
  };
  double expected = 0;
  for (std::size_t k = first; k < end; ++k)
    expected = std::max(expected, schedule[k].end_s - schedule[first].start_s);
  run_beside_ballast(world, options.ballast, expected_at(schedule[first].start_s + expected), [&] {
    const std::vector<int>* previous = nullptr;  // the ranks of this rank's last item
    for (std::size_t k = first; k < end; ++k) {
      if (!groups[k]) continue;
      // Until the last of the item's ranks is here (from an item that ran longer than expected),
      // this rank computes: the trials still running keep a full batch's contention. An item at
      // the stage's start, or on the ranks of this rank's item before, has its ranks together.
      if (schedule[k].start_s > schedule[first].start_s &&
          !(previous && same_ranks(*previous, schedule[k].ranks)))
        wait_beside_ballast(*groups[k], options.ballast, expected_at(schedule[k].start_s));
      previous = &schedule[k].ranks;
      run_item(schedule[k].item, *groups[k], trials, probes, options,
               overlapped(schedule, schedule[k]), results);
      groups[k].reset();  // a communicator held only while in use
    }
  });
  if (world.rank() == 0)
    log::debug("trial stage {}: {} item(s) in {:.2f} s (expected {:.2f} s)", schedule[first].stage,
               end - first, seconds_since(t0), expected);
}

}  // namespace

std::vector<Measurement> run_trials(const std::vector<TrialRequest>& trials,
                                    const RankTopology& topology, comm::Communicator& world,
                                    const TrialOptions& options, TrialRunStats* stats,
                                    const std::vector<SideProbe>& probes) {
  const auto t0 = Clock::now();
  // A rank draws the initial weights of each shape it tries once: its trials at other sizes
  // (every rank runs every shape's whole-node trial) take them from memory. Up to a model of
  // 64 M parameters; larger ones are drawn each time, as before.
  const CanonicalWeightCache weights(std::size_t{256} << 20);
  std::map<int, double> sync_by_degree =
      sync_probe_degrees(trials, topology, options.contended_sync_s);
  std::vector<SideProbe> all_probes = probes;
  for (auto& [degree, sync] : sync_by_degree)
    all_probes.push_back(SideProbe{degree, 0.05, [&sync = sync](comm::Communicator& group) {
                                     sync = contended_sync_s(group);
                                   }});
  if (trials.empty() && all_probes.empty()) return {};

  std::vector<ScheduleItem> items;
  for (const auto& t : trials) items.push_back({t.config, expected_trial_s(t, options), false});
  for (const auto& p : all_probes)
    items.push_back({ConfigSpec{"probe", {}, p.degree, 1}, p.expected_s, true});
  const std::vector<Placement> schedule = schedule_trials(items, topology, options.serialize);
  std::vector<std::unique_ptr<comm::Communicator>> groups = split_groups(schedule, world);
  nlohmann::json mine = nlohmann::json::array();
  for (std::size_t first = 0; first < schedule.size();) {
    std::size_t end = first;
    while (end < schedule.size() && schedule[end].stage == schedule[first].stage) ++end;
    run_stage(first, end, schedule, groups, trials, all_probes, world, options, mine);
    first = end;
  }

  std::vector<Measurement> out = gathered_measurements(world, mine, trials.size());
  agree_synchronisations(world, trials, options.contended_sync_s, sync_by_degree, out);
  if (stats) {
    stats->contended_sync_s = sync_by_degree;
    for (const Placement& p : schedule) stats->expected_s = std::max(stats->expected_s, p.end_s);
    stats->seconds = seconds_since(t0);
  }
  return out;
}

}  // namespace saturn::profile
