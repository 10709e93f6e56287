#include "runtime/profile/profiler.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <set>
#include <tuple>

#include "runtime/comm/agree.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/profile/text_comm.hpp"
#include "runtime/profile/util.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn::profile {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// One distinct job shape: the jobs that share it share every estimate and trial.
struct Shape {
  std::string signature;
  std::string model_name;
  ModelConfig model;
  TrainConfig train;
  std::vector<std::size_t> jobs;  // workload job indices
};

struct Candidate {
  std::size_t shape = 0;
  ConfigSpec config;
  ProfileKey key;
  std::string key_id;
  CostEstimate est;
  std::optional<Measurement> measured;
  bool tried_now = false;
  bool in_problem = false;
  bool current_practice = false;  // the hand-picked whole-node configuration (always offered)
  std::string status;
};

// (degree, nodes) pairs the cluster offers: every count up to the largest node on one node,
// then k whole nodes of g devices for every node size g that k nodes reach.
std::vector<std::pair<int, int>> device_counts(const solver::Cluster& cluster) {
  std::set<std::pair<int, int>> out;
  int largest = 0;
  for (const auto& n : cluster.nodes) largest = std::max(largest, n.devices);
  for (int d = 1; d <= largest; ++d) out.insert({d, 1});
  std::set<int> sizes;
  for (const auto& n : cluster.nodes) sizes.insert(n.devices);
  for (int g : sizes) {
    const auto reach = std::count_if(cluster.nodes.begin(), cluster.nodes.end(),
                                     [&](const solver::Node& n) { return n.devices >= g; });
    for (int k = 2; k <= reach; ++k) out.insert({k * g, k});
  }
  std::vector<std::pair<int, int>> v(out.begin(), out.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second < b.second;
  });
  return v;
}

// Knob settings worth estimating per strategy: its registry entry's (the defaults,
// recomputation: less memory, more time; a pipeline's GPipe schedule: more memory, sometimes a
// shorter step).
const std::vector<std::vector<std::string>>& knob_variants(const std::string& strategy) {
  return parallel::strategy_info(strategy).knob_variants;
}

bool wanted_at(const std::string& strategy, int degree, const std::vector<std::string>& allowed) {
  const parallel::StrategyInfo& info = parallel::strategy_info(strategy);
  if (degree < info.min_degree || (info.max_degree > 0 && degree > info.max_degree)) return false;
  // At one device, strategies that split or shard nothing there all do the plain single-device
  // work, with more bookkeeping: when the registry's first such strategy (its plainest) is
  // allowed, it alone is tried there.
  if (degree == 1 && info.plain_at_one_device)
    for (const auto& first : parallel::strategy_registry())
      if (first.offered && first.plain_at_one_device)
        return first.name == strategy ||
               std::find(allowed.begin(), allowed.end(), first.name) == allowed.end();
  return true;
}

bool is_oom(const std::string& reason) {
  return reason.find("out of memory") != std::string::npos ||
         reason.find("exceed") != std::string::npos;
}

// A stored measurement stands unless it was an out-of-memory failure under a smaller device
// capacity than the trial would have now.
bool reusable(const Measurement& m, std::size_t capacity) {
  if (m.feasible || !is_oom(m.reason)) return true;
  if (m.device_capacity == 0) return true;
  return capacity != 0 && capacity <= m.device_capacity;
}

class Profiler {
 public:
  Profiler(const ProfileRequest& request, const ProfileOptions& options, Hardware hardware,
           Calibration calibration, ProfileStore store)
      : req_(request),
        opt_(options),
        hw_(std::move(hardware)),
        cal_(std::move(calibration)),
        store_(std::move(store)) {
    if (req_.workload == nullptr) throw InputError("profile: no workload given");
    capacity_ = req_.resources.device_bytes;
    if (capacity_ == 0)
      for (const auto& n : req_.cluster.nodes)
        capacity_ = std::max(capacity_, static_cast<std::size_t>(n.memory_gib * kGiB));
    trial_capacity_ =
        opt_.trial.resources.device_bytes > 0 ? opt_.trial.resources.device_bytes : capacity_;
  }

  void estimate() {
    const Workload& w = *req_.workload;
    const std::vector<std::string> allowed =
        w.strategies.empty() ? parallel::strategy_names() : w.strategies;
    std::map<std::string, std::size_t> by_sig;
    for (std::size_t j = 0; j < w.jobs.size(); ++j) {
      if (steps_of(j) <= 0) continue;
      const JobSpec& job = w.jobs[j];
      const std::string sig = signature_of(job.model, job.train);
      auto [it, fresh] = by_sig.try_emplace(sig, shapes_.size());
      if (fresh) shapes_.push_back(Shape{sig, job.model_name, job.model, job.train, {}});
      shapes_[it->second].jobs.push_back(j);
    }
    const auto counts = device_counts(req_.cluster);
    const std::string now = utc_now();
    const std::string hw_id = hw_.id();  // hashes every node's rank count: once, not per candidate
    for (std::size_t s = 0; s < shapes_.size(); ++s)
      for (const auto& [degree, nodes] : counts)
        for (const auto& name : allowed) {
          if (!wanted_at(name, degree, allowed)) continue;
          for (const auto& knobs : knob_variants(name)) {
            Candidate c;
            c.shape = s;
            c.config = ConfigSpec{name, knobs, degree, nodes};
            c.key = ProfileKey{shapes_[s].signature, c.config, hw_id};
            c.key_id = c.key.id();
            c.est = estimate_cost(shapes_[s].model, shapes_[s].train, c.config, cal_, capacity_,
                                  req_.resources.host_bytes, req_.resources.device);
            if (const ProfileEntry* e = store_.find(c.key_id); e && e->measured)
              if (reusable(*e->measured, trial_capacity_)) c.measured = e->measured;
            c.status = c.est.feasible ? "estimate" : "infeasible: " + c.est.reason;
            c.current_practice = !opt_.current_practice.empty() && name == opt_.current_practice &&
                                 knobs.empty() && nodes == 1 && is_node_size(degree);
            ProfileEntry entry;
            entry.key = c.key;
            entry.model_name = shapes_[s].model_name;
            entry.estimate = c.est;
            entry.estimated_utc = now;
            if (const ProfileEntry* old = store_.find(c.key_id)) entry.measured = old->measured;
            store_.put(entry);
            cands_.push_back(std::move(c));
          }
        }
  }

  // Which candidates to try; `fits` says whether the world can hold a configuration.
  template <typename Fits>
  std::vector<std::size_t> choose_trials(Fits&& fits) {
    // Groups: (shape, degree, nodes).
    std::map<std::tuple<std::size_t, int, int>, std::vector<std::size_t>> groups;
    for (std::size_t i = 0; i < cands_.size(); ++i)
      if (cands_[i].est.feasible)
        groups[{cands_[i].shape, cands_[i].config.degree, cands_[i].config.nodes}].push_back(i);
    std::map<std::tuple<std::size_t, int, int>, double> best;
    for (const auto& [g, members] : groups) {
      double b = std::numeric_limits<double>::infinity();
      for (std::size_t i : members) b = std::min(b, cands_[i].est.step_s);
      best[g] = b;
    }
    std::vector<std::size_t> chosen;
    for (const auto& [g, members] : groups) {
      const auto [shape, degree, nodes] = g;
      // Fewer devices doing it clearly faster make this device count useless to the solver.
      double smaller = std::numeric_limits<double>::infinity();
      int smaller_degree = 0;
      for (const auto& [g2, b2] : best)
        if (std::get<0>(g2) == shape && std::get<1>(g2) < degree && b2 < smaller) {
          smaller = b2;
          smaller_degree = std::get<1>(g2);
        }
      const bool outrun = best[g] >= (1.0 + opt_.dominance_margin) * smaller;
      std::vector<std::size_t> order = members;
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return cands_[a].est.step_s < cands_[b].est.step_s;
      });
      // A candidate selected for measurement: reuse the store's, or try it when this run can.
      auto measure = [&](std::size_t i, const char* why) {
        Candidate& c = cands_[i];
        if (c.measured && !opt_.refresh) {
          c.status = fmt::format("stored{}", why);
          ++stats_.trials_reused;
        } else if (!opt_.trials) {
          c.status = fmt::format("estimate (trials off){}", why);
        } else if (!fits(c.config)) {
          c.status = fmt::format("estimate (more ranks than this run has){}", why);
        } else {
          chosen.push_back(i);
        }
      };
      int taken = 0;
      for (std::size_t i : order) {
        Candidate& c = cands_[i];
        if (c.current_practice) {
          // Tried whatever the others say: the current-practice baseline runs exactly this.
          measure(i, " (current practice)");
          continue;
        }
        // Memory decides nothing when devices have no stated capacity: then only speed ranks.
        if (capacity_ > 0 && dominated(i, members)) {
          c.status = "estimate (dominated: another is faster with no more memory)";
          continue;
        }
        if (outrun) {
          c.status = fmt::format("estimate ({} device{} are faster)", smaller_degree,
                                 smaller_degree == 1 ? "" : "s");
          continue;
        }
        if (taken >= opt_.trials_per_degree || c.est.step_s > (1.0 + opt_.trial_window) * best[g]) {
          c.status = "estimate (not among the best estimates)";
          continue;
        }
        ++taken;
        measure(i, "");
      }
    }
    std::sort(chosen.begin(), chosen.end());
    // Measurements in the store count whatever this run would have tried.
    for (std::size_t i = 0; i < cands_.size(); ++i) {
      Candidate& c = cands_[i];
      if (!c.measured || std::binary_search(chosen.begin(), chosen.end(), i)) continue;
      if (c.status.rfind("stored", 0) == 0) continue;
      c.status = c.measured->feasible ? "stored" : "failed (stored): " + c.measured->reason;
    }
    return chosen;
  }

  std::vector<TrialRequest> requests(const std::vector<std::size_t>& chosen) const {
    std::vector<TrialRequest> out;
    for (std::size_t i : chosen) {
      const Shape& s = shapes_[cands_[i].shape];
      out.push_back(TrialRequest{s.model, s.train, cands_[i].config, cands_[i].est.step_s,
                                 cands_[i].est.eval_s});
    }
    return out;
  }

  void record(const std::vector<std::size_t>& chosen, const std::vector<Measurement>& results) {
    for (std::size_t k = 0; k < chosen.size(); ++k) {
      Candidate& c = cands_[chosen[k]];
      c.measured = results[k];
      c.tried_now = true;
      c.status = !results[k].feasible        ? "failed: " + results[k].reason
                 : results[k].reason.empty() ? std::string("tried")
                                             : "tried (" + results[k].reason + ")";
      if (c.current_practice) c.status += " (current practice)";
      ++stats_.trials_run;
      if (!results[k].feasible) ++stats_.trials_failed;
      ProfileEntry e = *store_.find(c.key_id);
      e.measured = results[k];
      store_.put(e);
    }
  }

  // The GEMM shapes the estimates time (every feasible candidate's micro-batch, at its tensor
  // shard): what a GPU calibration measures exactly.
  std::vector<GemmShape> gemm_shapes() const {
    std::vector<GemmShape> out;
    for (const auto& c : cands_) {
      if (!c.est.feasible || c.est.micro_batch <= 0) continue;
      const Shape& s = shapes_[c.shape];
      for (const auto& g : model_gemm_shapes(s.model, static_cast<int>(c.est.micro_batch),
                                             s.train.seq_len, c.est.tensor_degree))
        out.push_back(g);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  ProfileStore& store() { return store_; }
  ProfileStats& stats() { return stats_; }
  const Calibration& calibration() const { return cal_; }

  // Keeps what the trials' probes measured with the calibration (and in the store): later runs
  // on this hardware take it from there. Returns whether anything was new.
  bool keep_probes(const std::map<int, double>& contended_sync_s, const std::string& file_system,
                   const WriteRates& writes) {
    bool added = false;
    for (const auto& [group, s] : contended_sync_s)
      added |= cal_.contended_sync_s.emplace(group, s).second;
    if (!file_system.empty() && writes.measured())
      added |= cal_.checkpoint_writes.insert_or_assign(file_system, writes).second;
    if (added) store_.put_hardware(HardwareRecord{hw_, cal_});
    return added;
  }

  ProfileResult result() {
    ProfileResult r;
    r.hardware = hw_;
    r.calibration = cal_;
    r.checkpoint_writes = req_.checkpoint_writes;
    corrections();
    const Workload& w = *req_.workload;
    for (std::size_t j = 0; j < w.jobs.size(); ++j) {
      const std::int64_t steps = steps_of(j);
      if (steps <= 0) continue;
      const JobSpec& job = w.jobs[j];
      const std::size_t shape = shape_of(j);
      solver::Job sj;
      sj.id = job.id;
      sj.steps = steps;
      std::vector<ConfigDetail> details;
      std::map<std::pair<int, int>, std::vector<std::size_t>> groups;
      for (std::size_t i = 0; i < cands_.size(); ++i)
        if (cands_[i].shape == shape && usable(cands_[i]))
          groups[{cands_[i].config.degree, cands_[i].config.nodes}].push_back(i);
      for (const auto& [g, members] : groups)
        for (std::size_t i : members) {
          Candidate& c = cands_[i];
          if (!on_front(i, members) && !c.current_practice) continue;
          c.in_problem = true;
          ConfigDetail d = detail(c);
          solver::Config cfg;
          cfg.strategy = c.config.label();
          cfg.devices = c.config.degree;
          cfg.nodes = c.config.nodes;
          // The steps left are the job's last ones (a resumed job's, from its checkpoint).
          const std::int64_t from = std::max<std::int64_t>(0, job.train.steps - steps);
          cfg.time_s = std::max(run_parts(job.train, from, from + steps, d.costs()).total(), 1e-6);
          cfg.memory_gib = static_cast<double>(memory_of(c)) / kGiB;
          cfg.source = d.source;
          sj.configs.push_back(cfg);
          details.push_back(std::move(d));
        }
      if (sj.configs.empty()) throw InputError(no_fit_message(j));
      r.jobs.push_back(std::move(sj));
      r.details.push_back(std::move(details));
      r.job_index.push_back(j);
    }
    for (const auto& c : cands_) {
      ConfigRow row;
      const Shape& s = shapes_[c.shape];
      row.signature = s.signature;
      row.model_name = s.model_name;
      for (std::size_t j : s.jobs) row.jobs.push_back(w.jobs[j].id);
      row.config = c.config;
      row.key_id = c.key_id;
      row.estimate = c.est;
      row.measured = c.measured;
      row.tried_now = c.tried_now;
      row.in_problem = c.in_problem;
      row.status = c.status;
      r.rows.push_back(std::move(row));
    }
    stats_.jobs = static_cast<int>(r.jobs.size());
    stats_.signatures = static_cast<int>(shapes_.size());
    stats_.configs = static_cast<int>(cands_.size());
    stats_.feasible = static_cast<int>(std::count_if(
        cands_.begin(), cands_.end(), [](const Candidate& c) { return c.est.feasible; }));
    r.stats = stats_;
    return r;
  }

 private:
  std::int64_t steps_of(std::size_t j) const {
    if (req_.steps.empty()) return req_.workload->jobs[j].train.steps;
    return j < req_.steps.size() ? req_.steps[j] : 0;
  }

  std::size_t shape_of(std::size_t j) const {
    for (std::size_t s = 0; s < shapes_.size(); ++s)
      if (std::find(shapes_[s].jobs.begin(), shapes_[s].jobs.end(), j) != shapes_[s].jobs.end())
        return s;
    return 0;
  }

  // A node of the cluster has exactly this many devices.
  bool is_node_size(int degree) const {
    return std::any_of(req_.cluster.nodes.begin(), req_.cluster.nodes.end(),
                       [&](const solver::Node& n) { return n.devices == degree; });
  }

  // Another feasible member is at least as fast with no more memory (ties: the earlier one).
  bool dominated(std::size_t i, const std::vector<std::size_t>& members) const {
    const CostEstimate& a = cands_[i].est;
    for (std::size_t k : members) {
      if (k == i) continue;
      const CostEstimate& b = cands_[k].est;
      const bool no_worse =
          b.step_s <= a.step_s && b.device_bytes <= a.device_bytes && b.host_bytes <= a.host_bytes;
      const bool better =
          b.step_s < a.step_s || b.device_bytes < a.device_bytes || b.host_bytes < a.host_bytes;
      if (no_worse && (better || k < i)) return true;
    }
    return false;
  }

  bool usable(const Candidate& c) const {
    if (c.measured) return c.measured->feasible;
    return c.est.feasible;
  }

  double step_of(const Candidate& c) const {
    if (c.measured) return c.measured->step_s;
    return c.est.step_s * correction_for(c);
  }

  std::size_t memory_of(const Candidate& c) const {
    if (c.measured && c.measured->peak_device_bytes > 0) return c.measured->peak_device_bytes;
    return c.est.device_bytes;
  }

  // On the (step time, memory) Pareto front of its device count; memory counts only when
  // devices state a capacity (else nothing checks it). A configuration that was not tried must
  // beat the tried ones by the trial window: its time is a corrected estimate, and a plan built
  // on a guess that merely ties a measurement is a worse prediction of the same speed.
  bool on_front(std::size_t i, const std::vector<std::size_t>& members) const {
    const bool memory = capacity_ > 0;
    const double t = step_of(cands_[i]);
    const std::size_t m = memory_of(cands_[i]);
    const bool guess_i = !cands_[i].measured;
    for (std::size_t k : members) {
      if (k == i) continue;
      const std::size_t m2 = memory_of(cands_[k]);
      const bool guess_k = !cands_[k].measured;
      // Between a guess and a measurement the guess is charged the window.
      double ti = t, tk = step_of(cands_[k]);
      if (guess_i && !guess_k) ti *= 1.0 + opt_.trial_window;
      if (guess_k && !guess_i) tk *= 1.0 + opt_.trial_window;
      const bool no_worse = tk <= ti && (!memory || m2 <= m);
      const bool better = tk < ti || (memory && m2 < m) || (guess_i && !guess_k);
      if (no_worse && (better || k < i)) return false;
    }
    return true;
  }

  // Corrections for configurations that were not tried: the largest measured/estimated step
  // ratio of the tried ones of the same shape and device count (they ran the same work, on the
  // same ranks, under the same load; the largest, because the model's error differs by
  // strategy and a guess must not look better than the least favourable measurement beside it:
  // one strategy that the model overestimates made untried ones look 40 % faster than they
  // ran), else the median of the same strategy on this hardware (whole store), else of
  // everything measured on it.
  void corrections() {
    std::map<std::string, std::vector<double>> ratios;
    std::vector<double> all;
    const std::string hw_id = hw_.id();
    for (const auto& [id, e] : store_.entries()) {
      if (e.key.hardware != hw_id || !e.measured || !e.measured->feasible) continue;
      if (!e.estimate.feasible || e.estimate.step_s <= 0 || e.measured->step_s <= 0) continue;
      const double r = e.measured->step_s / e.estimate.step_s;
      ratios[e.key.config.strategy].push_back(r);
      all.push_back(r);
    }
    const double overall = all.empty() ? 1.0 : median(all);
    for (const auto& name : parallel::strategy_names()) {
      const auto it = ratios.find(name);
      correction_[name] = it == ratios.end() ? overall : median(it->second);
    }
    std::map<std::tuple<std::size_t, int, int>, std::vector<double>> local;
    for (const auto& c : cands_)
      if (c.measured && c.measured->feasible && c.est.feasible && c.est.step_s > 0)
        local[group_of(c)].push_back(c.measured->step_s / c.est.step_s);
    for (const auto& [g, r] : local) group_correction_[g] = *std::max_element(r.begin(), r.end());
  }

  static std::tuple<std::size_t, int, int> group_of(const Candidate& c) {
    return {c.shape, c.config.degree, c.config.nodes};
  }

  double correction_for(const Candidate& c) const {
    if (const auto it = group_correction_.find(group_of(c)); it != group_correction_.end())
      return it->second;
    const auto it = correction_.find(c.config.strategy);
    return it == correction_.end() ? 1.0 : it->second;
  }

  ConfigDetail detail(const Candidate& c) const {
    ConfigDetail d;
    d.strategy = c.config.strategy;
    d.knobs = c.config.knobs;
    d.degree = c.config.degree;
    d.nodes = c.config.nodes;
    d.signature = c.key.signature;
    d.key_id = c.key_id;
    d.estimate = c.est;
    d.measured = c.measured;
    if (c.measured) {
      d.step_s = c.measured->step_s;
      // A trial times one evaluation; a stored trial from before it did, none: then it scales
      // like the estimate's.
      d.eval_s = c.measured->eval_s > 0 ? c.measured->eval_s
                 : c.est.step_s > 0     ? c.est.eval_s * c.measured->step_s / c.est.step_s
                                        : 0.0;
      d.source = "trial";
    } else {
      d.correction = correction_for(c);
      d.step_s = c.est.step_s * d.correction;
      d.eval_s = c.est.eval_s * d.correction;
      d.source = "estimate";
    }
    d.checkpoint_s = checkpoint_seconds(shapes_[c.shape].model, c.config.degree,
                                        req_.checkpoint_writes, sync_s(c));
    d.start_s = c.measured && c.measured->setup_s > 0 ? c.measured->setup_s : typical_setup_s();
    return d;
  }

  // One synchronisation of the configuration's group (a checkpoint has hundreds): its trial's,
  // else the median of the trials of groups of its size and nodes, else the calibration's wait.
  double sync_s(const Candidate& c) const {
    if (c.measured && c.measured->sync_s > 0) return c.measured->sync_s;
    std::vector<double> v;
    for (const auto& o : cands_)
      if (o.measured && o.measured->sync_s > 0 && o.config.degree == c.config.degree &&
          o.config.nodes == c.config.nodes)
        v.push_back(o.measured->sync_s);
    if (v.empty()) return cal_.sync_seconds(c.config.degree, c.config.nodes > 1, 1.0);
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  // A configuration without a trial starts as the tried ones did (the median of their set-ups:
  // devices, communicators, the strategy's buffers); 0 when none was tried.
  double typical_setup_s() const {
    std::vector<double> v;
    for (const auto& c : cands_)
      if (c.measured && c.measured->setup_s > 0) v.push_back(c.measured->setup_s);
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  std::string no_fit_message(std::size_t j) const {
    const JobSpec& job = req_.workload->jobs[j];
    std::string reasons;
    std::set<std::string> seen;
    for (const auto& c : cands_) {
      if (c.shape != shape_of(j)) continue;
      const std::string why =
          c.measured && !c.measured->feasible ? c.measured->reason : c.est.reason;
      if (why.empty() || !seen.insert(why).second) continue;
      reasons += fmt::format("\n  {} on {}: {}", c.config.label(), c.config.degree, why);
      if (seen.size() >= 8) break;
    }
    return fmt::format("{}job {} fits no configuration on the cluster {}:{}",
                       job.where.empty() ? "" : job.where + ": ", job.id,
                       solver::format_cluster(req_.cluster), reasons);
  }

  const ProfileRequest& req_;
  const ProfileOptions& opt_;
  Hardware hw_;
  Calibration cal_;
  ProfileStore store_;
  std::size_t capacity_ = 0, trial_capacity_ = 0;
  std::vector<Shape> shapes_;
  std::vector<Candidate> cands_;
  std::map<std::string, double> correction_;
  std::map<std::tuple<std::size_t, int, int>, double> group_correction_;
  ProfileStats stats_;
};

ProfileRequest with_cluster(const ProfileRequest& request, const Hardware& hw) {
  ProfileRequest r = request;
  if (r.cluster.nodes.empty()) r.cluster = cluster_of(hw);
  return r;
}

}  // namespace

solver::Cluster cluster_of(const Hardware& hardware) {
  solver::Cluster c;
  for (std::size_t n = 0; n < hardware.ranks_per_node.size(); ++n)
    c.nodes.push_back(solver::Node{fmt::format("n{}", n), hardware.ranks_per_node[n], 0.0});
  return c;
}

RankTopology topology_of(const ProfileRequest& request, const std::vector<int>& node_of_rank) {
  RankTopology t;
  const int world = static_cast<int>(node_of_rank.size());
  if (!request.device_rank.empty()) {
    for (std::size_t n = 0; n < request.cluster.nodes.size(); ++n) {
      std::vector<int> ranks;
      const int first = request.cluster.first_device(static_cast<int>(n));
      for (int d = first; d < first + request.cluster.nodes[n].devices; ++d) {
        const auto idx = static_cast<std::size_t>(d);
        if (idx < request.device_rank.size() && request.device_rank[idx] < world)
          ranks.push_back(request.device_rank[idx]);
      }
      if (!ranks.empty()) t.nodes.push_back(std::move(ranks));
    }
    return t;
  }
  int nodes = 0;
  for (int n : node_of_rank) nodes = std::max(nodes, n + 1);
  t.nodes.resize(static_cast<std::size_t>(nodes));
  for (int r = 0; r < world; ++r)
    t.nodes[static_cast<std::size_t>(node_of_rank[static_cast<std::size_t>(r)])].push_back(r);
  return t;
}

std::filesystem::path default_calibration_cache() {
  if (const char* v = std::getenv("SATURN_CALIBRATION_CACHE")) {
    const std::string s(v);
    return s.empty() || s == "none" ? std::filesystem::path() : std::filesystem::path(s);
  }
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::filesystem::path(xdg) / "saturn" / "calibration.h5";
  const char* home = std::getenv("HOME");
  if (home && *home) return std::filesystem::path(home) / ".cache" / "saturn" / "calibration.h5";
  return {};
}

// The trials run on the request's backend.
TrialOptions trial_options(const ProfileOptions& options, const ProfileRequest& request) {
  TrialOptions t = options.trial;
  t.resources.device = request.resources.device;
  return t;
}

namespace {

// Rank 0 reads the store (and, when it lacks this hardware's calibration, takes it from the
// shared calibration cache); every rank returns the same copy.
ProfileStore load_store(comm::Communicator& world, const Hardware& hw,
                        const ProfileOptions& options, bool talk) {
  ProfileStore store;
  bool cal_from_cache = false;
  comm::agree_on(world, [&] {
    if (world.rank() != 0) return;
    if (!options.store.empty()) store = ProfileStore::load(options.store);
    const HardwareRecord* own = store.hardware(hw.id());
    if (options.recalibrate || options.calibration_cache.empty() || (own && own->calibration))
      return;
    try {
      const ProfileStore cache = ProfileStore::load(options.calibration_cache);
      if (const HardwareRecord* r = cache.hardware(hw.id());
          r && r->calibration && !r->calibration->quick) {
        store.put_hardware(*r);
        cal_from_cache = true;
      }
    } catch (const IoError& e) {
      log::warn("calibration cache {} not used: {}", options.calibration_cache.string(), e.what());
    }
  });
  if (talk && cal_from_cache)
    log::info("calibration of {} from the shared cache {}", hw.describe(),
              options.calibration_cache.string());
  std::string text = world.rank() == 0 ? store.to_text() : std::string();
  broadcast_text(world, text, 0);
  return ProfileStore::from_text(text);
}

// Calibration on the jobs' backend: each rank's GPU on CUDA, timed with its device timer.
CalibrationOptions calibration_options(const ProfileOptions& options,
                                       const ProfileRequest& request) {
  CalibrationOptions copt = options.calibration;
  copt.device = request.resources.device;
  copt.device_index = options.trial.resources.device_index;
  // Calibration measures rates, not what fits: it runs before any job and frees what it took,
  // so it uses the device's own memory as the CPU's calibration uses the host's, not the
  // jobs' --device-memory (a test's or a small device's cap would leave it nothing to time).
  // A measurement that does not fit the device itself is skipped and logged.
  copt.device_capacity = 0;
  return copt;
}

// Best effort: the cache saves later runs the calibration, and losing it costs only that.
void save_to_cache(comm::Communicator& world, const Hardware& hw, const ProfileOptions& options,
                   const Calibration& c) {
  if (world.rank() != 0 || options.calibration_cache.empty() || options.calibration.quick) return;
  try {
    ProfileStore only_calibration;
    only_calibration.put_hardware(HardwareRecord{hw, c});
    only_calibration.save(options.calibration_cache);
  } catch (const std::exception& e) {
    log::warn("calibration not cached in {}: {}", options.calibration_cache.string(), e.what());
  }
}

// This hardware's calibration: the store's, else measured now (and stored and cached).
Calibration stored_or_new_calibration(comm::Communicator& world, const Hardware& hw,
                                      const std::vector<int>& node_of_rank,
                                      const ProfileRequest& request, const ProfileOptions& options,
                                      ProfileStore& store, ProfileStats& stats, bool talk) {
  const HardwareRecord* rec = store.hardware(hw.id());
  // A stored calibration of another backend (written before GPU calibration existed) is not
  // this hardware's: calibrate again.
  const bool stored_fits =
      rec && rec->calibration &&
      (rec->calibration->device == "cpu") == (request.resources.device == DeviceKind::kCpu);
  if (talk && rec && rec->calibration && !stored_fits)
    log::info("the stored calibration of {} is the {}'s, not the {}'s: calibrating again",
              hw.describe(), rec->calibration->device, device_kind_name(request.resources.device));
  if (stored_fits && !options.recalibrate) return *rec->calibration;
  if (talk) log::info("calibrating {} (once per hardware)", hw.describe());
  Calibration cal = calibrate(world, hw, node_of_rank, calibration_options(options, request));
  store.put_hardware(HardwareRecord{hw, cal});
  stats.calibrated = true;
  stats.calibration_s = cal.seconds;
  save_to_cache(world, hw, options, cal);
  return cal;
}

// On CUDA, GEMM rates at the jobs' own shapes: estimate once to learn which shapes the estimates
// time (micro-batches do not depend on the rates), time those the calibration lacks.
void add_jobs_gemm_shapes(comm::Communicator& world, const Hardware& hw, const ProfileRequest& req,
                          const ProfileOptions& options, Calibration& cal, ProfileStore& store,
                          ProfileStats& stats, bool talk) {
  Profiler first(req, options, hw, cal, store);
  first.estimate();
  const auto t_shapes = Clock::now();
  const int added =
      add_gemm_shapes(world, cal, first.gemm_shapes(), calibration_options(options, req));
  if (added <= 0) return;
  store.put_hardware(HardwareRecord{hw, cal});
  save_to_cache(world, hw, options, cal);
  stats.calibration_s += seconds_since(t_shapes);
  if (talk)
    log::info("calibration: {} GEMM shape{} of the jobs timed on the GPU in {:.2f} s", added,
              added == 1 ? "" : "s", seconds_since(t_shapes));
}

// The request's checkpoint write probe, as a probe of the trials' schedule, unless the
// calibration knows the rates of its file system (then `req` gets them): `rates` gets its result
// on the rank that ran it (zeros elsewhere).
std::vector<SideProbe> write_probe(ProfileRequest& req, const Calibration& cal,
                                   double (&rates)[3]) {
  if (!req.measure_checkpoint_writes) return {};
  if (const auto it = cal.checkpoint_writes.find(req.checkpoint_file_system);
      !req.checkpoint_file_system.empty() && it != cal.checkpoint_writes.end()) {
    req.checkpoint_writes = it->second;
    req.measure_checkpoint_writes = nullptr;
    return {};
  }
  return {SideProbe{1, 0.2, [&req, &rates](comm::Communicator&) {
                      const WriteRates r = req.measure_checkpoint_writes();
                      rates[0] = r.latency_s;
                      rates[1] = r.bytes_per_s;
                      rates[2] = r.dataset_s;
                    }}};
}

// Tries the promising configurations on rank groups and records what they measured; measures
// the checkpoint writes with the trials' probes (into `req`) unless the calibration has them,
// and keeps the probes' results with the calibration (the shared cache's too).
void run_chosen_trials(Profiler& p, ProfileRequest& req, const ProfileRequest& request,
                       const std::vector<int>& node_of_rank, const Hardware& hw,
                       comm::Communicator& world, const ProfileOptions& options, bool talk) {
  const RankTopology topology = topology_of(req, node_of_rank);
  const std::vector<std::size_t> chosen =
      p.choose_trials([&](const ConfigSpec& c) { return topology.fits(c); });
  if (talk && !chosen.empty())
    log::info("{} trial{} on {} ranks", chosen.size(), chosen.size() == 1 ? "" : "s", world.size());
  TrialOptions trial = trial_options(options, request);
  trial.contended_sync_s = p.calibration().contended_sync_s;
  TrialRunStats ts;
  double rates[3] = {0, 0, 0};
  const std::vector<SideProbe> probes = write_probe(req, p.calibration(), rates);
  const bool measures_writes = !probes.empty();
  const std::vector<Measurement> results =
      run_trials(p.requests(chosen), topology, world, trial, &ts, probes);
  p.record(chosen, results);
  if (measures_writes) {
    world.allreduce(rates, 3, comm::ReduceOp::kMax);
    req.checkpoint_writes = WriteRates{rates[0], rates[1], rates[2]};
  }
  if (p.keep_probes(ts.contended_sync_s, measures_writes ? req.checkpoint_file_system : "",
                    req.checkpoint_writes))
    save_to_cache(world, hw, options, p.calibration());
  p.stats().trials_expected_s = ts.expected_s;
  double trials_s = ts.seconds;  // rank 0's, like every number of the result
  world.broadcast(&trials_s, 1, 0);
  p.stats().trials_s = trials_s;
}

}  // namespace

ProfileResult profile_workload(const ProfileRequest& request, comm::Communicator& world,
                               const ProfileOptions& options) {
  const auto t0 = Clock::now();
  const bool talk = !options.quiet && world.rank() == 0;
  std::vector<int> node_of_rank;
  const Hardware hw = detect_hardware(world, &node_of_rank, request.resources.device);
  ProfileRequest req = with_cluster(request, hw);

  ProfileStore store = load_store(world, hw, options, talk);
  ProfileStats pre;
  Calibration cal =
      stored_or_new_calibration(world, hw, node_of_rank, request, options, store, pre, talk);
  if (talk)
    log::info("calibration of {}: rates of {}, timed with {}", hw.id(), cal.device, cal.timer);
  if (request.resources.device == DeviceKind::kCuda)
    add_jobs_gemm_shapes(world, hw, req, options, cal, store, pre, talk);
  // The machine's speed now against the calibration's (also right after calibrating: the load
  // of a shared node moves in seconds).
  if (cal.probe_flops_per_s > 0) {
    cal.load_factor = cal.probe_flops_per_s / probe_speed(world, options.calibration.window_s);
    pre.load_factor = cal.load_factor;
  }

  Profiler p(req, options, hw, cal, std::move(store));
  p.stats() = pre;
  p.estimate();
  run_chosen_trials(p, req, request, node_of_rank, hw, world, options, talk);
  comm::agree_on(world, [&] {
    if (world.rank() == 0 && !options.store.empty()) p.store().save(options.store);
  });
  ProfileResult r = p.result();
  // Rank 0's clock, so that every rank returns the same result.
  double total = seconds_since(t0);
  world.broadcast(&total, 1, 0);
  r.stats.total_s = total;
  return r;
}

ProfileResult profile_from_store(const ProfileRequest& request, const ProfileOptions& options) {
  const auto t0 = Clock::now();
  const ProfileStore store =
      options.store.empty() ? ProfileStore() : ProfileStore::load(options.store);
  const auto& records = store.hardware_records();
  const HardwareRecord* rec = nullptr;
  if (!options.hardware_id.empty()) {
    rec = store.hardware(options.hardware_id);
    if (rec == nullptr) {
      std::string ids;
      for (const auto& [id, r] : records)
        ids += fmt::format("\n  {}  {}", id, r.hardware.describe());
      throw InputError(fmt::format("--hardware {}: the store {} has no such hardware{}{}",
                                   options.hardware_id, options.store.string(),
                                   ids.empty() ? " (it is empty)" : "; it has:", ids));
    }
  } else if (records.size() == 1) {
    rec = &records.begin()->second;
  } else if (records.size() > 1) {
    // Prefer the hardware this machine is (whatever its rank layout) laid out as the cluster.
    const Hardware local = detect_local_hardware();
    std::vector<const HardwareRecord*> match;
    for (const auto& [id, r] : records) {
      Hardware h = r.hardware;
      const bool same_machine = h.cpu_model == local.cpu_model && h.cores == local.cores &&
                                h.blas == local.blas && h.device_kind == local.device_kind;
      const bool same_layout =
          request.cluster.nodes.empty() ||
          solver::format_cluster(cluster_of(h)) == solver::format_cluster(request.cluster);
      if (same_machine && same_layout) match.push_back(&r);
    }
    if (match.size() != 1) {
      std::string ids;
      for (const auto& [id, r] : records)
        ids += fmt::format("\n  {}  {}", id, r.hardware.describe());
      throw InputError(fmt::format(
          "the store {} holds profiles of {} machines; choose one with --hardware ID:{}",
          options.store.string(), records.size(), ids));
    }
    rec = match.front();
  }
  Hardware hw;
  Calibration cal;
  bool nominal = false;
  if (rec != nullptr) {
    hw = rec->hardware;
    if (rec->calibration) {
      cal = *rec->calibration;
    } else {
      cal = nominal_calibration();
      nominal = true;
    }
  } else {
    hw = detect_local_hardware();
    if (!request.cluster.nodes.empty()) {
      hw.ranks_per_node.clear();
      for (const auto& n : request.cluster.nodes) hw.ranks_per_node.push_back(n.devices);
    }
    cal = nominal_calibration();
    nominal = true;
  }
  ProfileRequest req = with_cluster(request, hw);
  // The stored hardware's backend decides the estimates (memory and rates): a store profiled
  // with --device cuda is planned as CUDA jobs, from its GPU calibration.
  if (hw.device_kind != device_kind_name(DeviceKind::kCpu))
    req.resources.device = DeviceKind::kCuda;
  // Nominal numbers stand in for whichever backend the hardware is (and say they are nominal).
  if (nominal) cal.device = hw.device_kind;
  ProfileOptions opt = options;
  opt.trials = false;
  Profiler p(req, opt, hw, cal, store);
  p.estimate();
  p.choose_trials([](const ConfigSpec&) { return false; });
  ProfileResult r = p.result();
  r.nominal_calibration = nominal;
  r.stats.total_s = seconds_since(t0);
  return r;
}

ProfileResult profile_added_jobs(const ProfileRequest& request, const ProfileOptions& options,
                                 const ProfileStore& store, const Hardware& hardware,
                                 const Calibration& calibration) {
  const auto t0 = Clock::now();
  const ProfileRequest req = with_cluster(request, hardware);
  ProfileOptions opt = options;
  opt.trials = false;
  Profiler p(req, opt, hardware, calibration, store);
  p.estimate();
  p.choose_trials([](const ConfigSpec&) { return false; });
  ProfileResult r = p.result();
  r.stats.total_s = seconds_since(t0);
  return r;
}

WorkloadProblem problem_from_store(const std::filesystem::path& workload,
                                   const std::string& cluster_spec,
                                   const std::filesystem::path& store,
                                   const std::string& hardware_id) {
  WorkloadProblem in;
  LoadOptions lo;
  lo.check_data_files = false;
  in.workload = load_workload(workload, lo);
  const std::string spec = !cluster_spec.empty() ? cluster_spec : in.workload.cluster;
  ProfileRequest req;
  req.workload = &in.workload;
  if (spec != "auto") {
    try {
      req.cluster = solver::parse_cluster_spec(spec);
    } catch (const solver::SolverError& e) {
      // The workload's own cluster: was checked when it was loaded; so this is the flag.
      throw InputError(fmt::format("--cluster: {}", e.what()));
    }
  }
  in.store = store;
  if (in.store.empty()) {
    const auto fallback = RunDir::default_for(in.workload.name).profile_store();
    std::error_code ec;
    if (std::filesystem::exists(fallback, ec)) in.store = fallback;
  } else if (!std::filesystem::exists(in.store)) {
    throw InputError(
        fmt::format("--store {}: no such file (saturn profile creates it)", in.store.string()));
  }
  ProfileOptions opt;
  opt.store = in.store;
  opt.hardware_id = hardware_id;
  in.profile = profile_from_store(req, opt);
  in.problem.cluster = req.cluster.nodes.empty() ? cluster_of(in.profile.hardware) : req.cluster;
  in.problem.jobs = in.profile.jobs;
  return in;
}

std::string describe_sources(const WorkloadProblem& in) {
  int trial = 0, estimate = 0;
  for (const auto& job : in.problem.jobs)
    for (const auto& c : job.configs) (c.source == "trial" ? trial : estimate)++;
  return fmt::format(
      "profiles: {} configuration{} from trials, {} estimated; hardware {} ({}){}; store {}", trial,
      trial == 1 ? "" : "s", estimate, in.profile.hardware.id(), in.profile.hardware.describe(),
      in.profile.nominal_calibration ? ", not calibrated: nominal numbers" : "",
      in.store.empty() ? "none" : in.store.string());
}

namespace {

std::string pct(double estimate, double measured) {
  if (measured <= 0) return "";
  return fmt::format("{:+.1f}%", 100.0 * (estimate - measured) / measured);
}

std::string mib(std::size_t bytes) {
  return fmt::format("{:.2f}", static_cast<double>(bytes) / (1024.0 * 1024.0));
}

}  // namespace

std::string format_profile_table(const ProfileResult& r, bool all_rows) {
  std::string out;
  std::string last_sig;
  int hidden = 0;
  for (const auto& row : r.rows) {
    if (!all_rows && !row.estimate.feasible && !row.measured) {
      ++hidden;
      continue;
    }
    if (row.signature != last_sig) {
      last_sig = row.signature;
      std::string jobs;
      for (const auto& j : row.jobs) jobs += (jobs.empty() ? "" : ", ") + j;
      out += fmt::format("\n{} ({}) — jobs: {}\n", row.model_name, row.signature, jobs);
      out += fmt::format("  {:<28} {:>3} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}  {}\n", "config",
                         "dev", "est s", "trial s", "err", "est MiB", "peak MiB", "err", "status");
    }
    const auto& e = row.estimate;
    const auto& m = row.measured;
    const bool ok = m && m->feasible;
    const std::string dev = row.config.nodes > 1
                                ? fmt::format("{}/{}", row.config.degree, row.config.nodes)
                                : fmt::format("{}", row.config.degree);
    out += fmt::format(
        "  {:<28} {:>3} {:>9} {:>9} {:>7} {:>9} {:>9} {:>7}  {}{}\n", row.config.label(), dev,
        e.feasible ? fmt::format("{:.4f}", e.step_s) : "-",
        ok ? fmt::format("{:.4f}", m->step_s) : "-",
        ok && e.feasible ? pct(e.step_s, m->step_s) : "",
        e.device_bytes ? mib(e.device_bytes) : "-", ok ? mib(m->peak_device_bytes) : "-",
        ok && e.feasible
            ? pct(static_cast<double>(e.device_bytes), static_cast<double>(m->peak_device_bytes))
            : "",
        row.in_problem ? "* " : "", row.status);
  }
  if (hidden > 0)
    out += fmt::format(
        "\n({} configurations infeasible by the estimate are not shown; --all "
        "shows them)\n",
        hidden);
  out += "\n* offered to the solver (per device count: the step-time/memory Pareto front)\n";
  return out;
}

std::string format_profile_summary(const ProfileResult& r) {
  const ProfileStats& s = r.stats;
  std::vector<double> step_err, mem_err;
  for (const auto& row : r.rows) {
    if (!row.measured || !row.measured->feasible || !row.estimate.feasible) continue;
    if (row.measured->step_s > 0)
      step_err.push_back(std::abs(row.estimate.step_s - row.measured->step_s) /
                         row.measured->step_s);
    if (row.measured->peak_device_bytes > 0)
      mem_err.push_back(std::abs(static_cast<double>(row.estimate.device_bytes) -
                                 static_cast<double>(row.measured->peak_device_bytes)) /
                        static_cast<double>(row.measured->peak_device_bytes));
  }
  std::string out = fmt::format("hardware {}: {}{}\n", r.hardware.id(), r.hardware.describe(),
                                r.nominal_calibration ? " (not calibrated: nominal numbers)" : "");
  out += fmt::format(
      "{} jobs, {} shapes: {} configurations estimated ({} feasible); {} tried ({} failed), {} "
      "taken from the store\n",
      s.jobs, s.signatures, s.configs, s.feasible, s.trials_run, s.trials_failed, s.trials_reused);
  std::string clocks;
  for (const auto& row : r.rows)
    if (row.tried_now && row.measured && clocks.find(row.measured->clock) == std::string::npos)
      clocks += (clocks.empty() ? "" : ", ") + row.measured->clock;
  out += fmt::format("calibration: {} rates, timed with {}{}\n", r.calibration.device,
                     r.calibration.timer,
                     clocks.empty() ? "" : fmt::format("; trial step times from {}", clocks));
  out += fmt::format("time: calibration {:.2f} s{}, trials {:.2f} s{}, total {:.2f} s\n",
                     s.calibration_s, s.calibrated ? "" : " (stored)", s.trials_s,
                     s.trials_run > 0 ? fmt::format(" (scheduled for {:.2f} s by the estimates)",
                                                    s.trials_expected_s)
                                      : "",
                     s.total_s);
  if (std::abs(s.load_factor - 1.0) > 0.005)
    out += fmt::format("load: this node runs {:.2f}x {} than when calibrated (estimates scaled)\n",
                       s.load_factor >= 1 ? s.load_factor : 1.0 / s.load_factor,
                       s.load_factor >= 1 ? "slower" : "faster");
  if (!step_err.empty())
    out += fmt::format(
        "estimate vs measurement (median |error| over {} measured): step time {:.1f}%, peak "
        "memory {:.1f}%\n",
        step_err.size(), 100.0 * median(step_err), 100.0 * median(mem_err));
  return out;
}

}  // namespace saturn::profile
