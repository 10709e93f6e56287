// packing_search_bound (see bounds.hpp): depth-first search over job-to-node assignments.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <tuple>

#include "solver/bounds.hpp"
#include "solver/clock.hpp"
#include "solver/schedule.hpp"

namespace saturn::solver {

namespace {

// The exact test of a node's biggest jobs is monotone in the time the node has: kept across
// the trial values of one bisection, per (node type, classes of its jobs): the most time
// proven too little, and the least time proven enough.
using RigidMemo = std::map<std::pair<int, std::vector<int>>, std::pair<double, double>>;

// Whether jobs fit one node of `devices` devices within `avail`, without preemption: an exact
// search over semi-active schedules. Any schedule can be left-shifted, job by job, until each
// job starts at time 0 or at the end of another job (devices only free up at ends), without
// lengthening it, so a feasible schedule exists exactly when a semi-active one does. The search
// walks the decision times in increasing order (0, then each end) and at each chooses which
// jobs start there and in which option; jobs of one class are interchangeable (the class's next
// job is started), and the jobs started at one time are chosen in non-decreasing (class,
// option) order. Prunings, each of which discards only states from which no schedule exists or
// schedules that another branch contains in a form with strictly smaller starts:
//  - area: devices left idle before the current time are lost, so the area already committed,
//    the idle area and the rest's least area must fit in devices x avail;
//  - left shift: a job is not started at t if as many devices as it needs were idle over the
//    stretch just before t: started at that stretch's beginning instead, it would end sooner and
//    hold the same devices from t on (that schedule is searched too, and each such shift lowers
//    the sum of starts, so the shifts end);
//  - dominance: a state (the jobs still to start, and when the running jobs end) that failed
//    from time t0, with no left shift pruned at t0, fails from any t >= t0 whose running jobs
//    hold, at every instant from t on, at least as many devices (any completion of the later
//    state completes the earlier one).
class NodeScheduleSearch {
 public:
  struct Class {
    int count = 0;
    std::vector<std::pair<int, double>> opts;  // (devices, time), each time <= avail
    double least_area = kInfinity, least_time = kInfinity;
  };
  // One job started in the schedule found: its class, option (index into Class::opts), start.
  struct Start {
    size_t cls;
    size_t option;
    double start;
  };

  NodeScheduleSearch(int devices, double avail, std::vector<Class> classes, long budget,
                     SolverClock::time_point deadline)
      : G_(devices),
        limit_(avail * (1 + 1e-9)),
        classes_(std::move(classes)),
        budget_(budget),
        deadline_(deadline) {
    for (const Class& c : classes_) {
      rest_area_ += c.count * c.least_area;
      to_start_ += c.count;
      least_.push_back(c.least_area);
    }
  }

  // 1: a schedule exists; 0: none exists; -1: out of budget.
  int decide() {
    for (const Class& c : classes_)
      if (c.count > 0 && c.opts.empty()) return 0;
    if (rest_area_ > G_ * limit_) return 0;
    const bool found = at_event(0.0);
    return aborted_ ? -1 : found ? 1 : 0;
  }

  // After decide() returned 1: the schedule found, one entry per job.
  const std::vector<Start>& schedule() const { return found_; }

 private:
  struct Run {
    double end;
    int devices;
  };
  struct Idle {  // devices free over [from, to) in every completion of the partial schedule
    double from, to;
    int devices;
  };
  struct Failed {
    double t;
    std::vector<Run> running;  // sorted by end
  };

  bool out_of_budget() {
    SolverClock::tick(kNodeScheduleUnits);  // a node
    if (--budget_ < 0 || ((budget_ & 1023) == 0 && SolverClock::now() > deadline_)) aborted_ = true;
    return aborted_;
  }

  // Devices the runs hold at instant x.
  static int held(const std::vector<Run>& runs, double x) {
    int h = 0;
    for (const Run& r : runs)
      if (r.end > x) h += r.devices;
    return h;
  }

  // Whether the failed state `f` is at least as free as the current one at time t.
  bool dominated_by(const Failed& f, double t) const {
    if (f.t > t) return false;
    if (held(f.running, t) > held(running_, t)) return false;
    for (const Run& r : f.running)
      if (r.end > t && held(f.running, r.end) > held(running_, r.end)) return false;
    for (const Run& r : running_)
      if (held(f.running, r.end) > held(running_, r.end)) return false;
    return true;
  }

  std::vector<int> counts() const {
    std::vector<int> c;
    c.reserve(classes_.size());
    for (const Class& k : classes_) c.push_back(k.count);
    return c;
  }

  // Arrived at decision time t (nothing may start before it any more).
  bool at_event(double t) {
    if (out_of_budget()) return false;
    for (const Class& c : classes_)
      if (c.count > 0 && t + c.least_time > limit_) return false;
    std::vector<Failed>& failed = failed_[counts()];
    for (const Failed& f : failed)
      if (dominated_by(f, t)) return false;
    // From t on, only options ending by the limit remain: the rest's least area can only grow.
    const std::vector<double> least_before = least_;
    const double rest_before = rest_area_;
    rest_area_ = 0;
    for (size_t k = 0; k < classes_.size(); ++k) {
      double least = kInfinity;
      for (const auto& [g, time] : classes_[k].opts)
        if (t + time <= limit_) least = std::min(least, g * time);
      least_[k] = least;
      if (classes_[k].count > 0) rest_area_ += classes_[k].count * least;
    }
    bool found = false;
    if (started_area_ + rest_area_ + idle_area_ <= G_ * limit_) found = start_at(t, 0, 0);
    least_ = least_before;
    rest_area_ = rest_before;
    if (found || aborted_) return found;
    // The left shift at t pruned starts that only a schedule outside this subtree replaces:
    // then the failure is this state's with its past, not one to reuse for others.
    int min_devices = G_ + 1;
    for (const Class& c : classes_)
      if (c.count > 0)
        for (const auto& [g, time] : c.opts) min_devices = std::min(min_devices, g);
    if (fits_earlier(min_devices)) return false;
    std::vector<Failed>& again = failed_[counts()];
    if (again.size() < 8) {
      std::vector<Run> runs = running_;
      std::sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.end < b.end; });
      again.push_back({t, std::move(runs)});
    }
    return false;
  }

  // Whether g devices were idle over the stretch that ends at t: then a job started at t could
  // start at the stretch's beginning instead, on those devices until t and on its own after.
  bool fits_earlier(int g) const { return !idle_.empty() && idle_.back().devices >= g; }

  // At time t, start more jobs (from class k0, option o0 on in the canonical order) or move on.
  bool start_at(double t, size_t k0, size_t o0) {
    if (to_start_ == 0) {
      found_ = trail_;
      return true;
    }
    int used = 0;
    for (const Run& r : running_) used += r.devices;
    const int free = G_ - used;
    for (size_t k = k0; k < classes_.size() && !aborted_; ++k) {
      Class& c = classes_[k];
      if (c.count == 0) continue;
      for (size_t o = k == k0 ? o0 : 0; o < c.opts.size(); ++o) {
        const auto [g, time] = c.opts[o];
        if (g > free || t + time > limit_) continue;
        if (started_area_ + g * time + rest_area_ - least_[k] + idle_area_ > G_ * limit_) continue;
        if (fits_earlier(g)) continue;
        --c.count;
        --to_start_;
        rest_area_ -= least_[k];
        started_area_ += g * time;
        running_.push_back({t + time, g});
        trail_.push_back({k, o, t});
        const bool found = start_at(t, k, o);
        trail_.pop_back();
        running_.pop_back();
        started_area_ -= g * time;
        rest_area_ += least_[k];
        ++to_start_;
        ++c.count;
        if (found) return true;
        if (aborted_) return false;
      }
    }
    // Move on to the next end; the devices free until then stay idle.
    double next = kInfinity;
    for (const Run& r : running_) next = std::min(next, r.end);
    if (!std::isfinite(next)) return false;
    const double lost = free * (next - t);
    if (started_area_ + rest_area_ + idle_area_ + lost > G_ * limit_) return false;
    std::vector<Run> before = running_;
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [&](const Run& r) { return r.end <= next; }),
                   running_.end());
    idle_area_ += lost;
    idle_.push_back({t, next, free});
    const bool found = at_event(next);
    idle_.pop_back();
    idle_area_ -= lost;
    running_ = std::move(before);
    return found;
  }

  int G_;
  double limit_;
  std::vector<Class> classes_;
  long budget_;
  SolverClock::time_point deadline_;
  bool aborted_ = false;
  std::vector<Run> running_;
  std::vector<Start> trail_, found_;  // the jobs started on the current branch; the schedule
  std::vector<Idle> idle_;  // the stretches between decision times, up to the current time
  int to_start_ = 0;
  // Device-time within [0, avail]: of the jobs started, of the rest at their least, left idle.
  double started_area_ = 0, rest_area_ = 0, idle_area_ = 0;
  std::vector<double> least_;  // per class: least area among options that still fit in time
  std::map<std::vector<int>, std::vector<Failed>> failed_;
};

class Packing {
 public:
  Packing(const Prepared& p, double T, SolverClock::time_point deadline, long node_limit,
          RigidMemo& memo, bool exact_nodes)
      : p_(p),
        T_(T),
        deadline_(deadline),
        node_limit_(node_limit),
        memo_(memo),
        exact_nodes_(exact_nodes) {
    const Cluster& cluster = p.cluster();
    const size_t N = cluster.nodes.size();
    load_.assign(N, 0.0);
    wide_.assign(N, 0.0);
    on_.resize(N);
    // Node types: (devices, memory) numbered in order of appearance (devices * 1000003 + ...
    // overflowed an int for nodes of over 2000 devices).
    std::map<std::pair<int, double>, int> types;
    for (size_t n = 0; n < N; ++n)
      type_.push_back(
          types
              .emplace(std::make_pair(cluster.nodes[n].devices, cluster.nodes[n].memory_gib),
                       static_cast<int>(types.size()))
              .first->second);
    // Per job: least node-time on each node for single-node options, and per whole-node
    // width k the shortest option (with its eligible nodes).
    items_.resize(p.num_jobs());
    for (size_t j = 0; j < p.num_jobs(); ++j) {
      Item& it = items_[j];
      it.single.assign(N, kInfinity);
      it.fastest.assign(N, kInfinity);
      for (const Option& o : p.options[j]) {
        if (o.time_s > T) continue;
        it.area = std::min(it.area, o.min_area);
        if (o.whole_nodes()) {
          auto w = std::find_if(it.wide.begin(), it.wide.end(), [&](const Wide& x) {
            return x.k == o.nodes && x.eligible == o.eligible;
          });
          const int index = static_cast<int>(&o - p.options[j].data());
          if (w == it.wide.end()) {
            it.wide.push_back({o.nodes, o.time_s, o.eligible, index});
          } else if (o.time_s < w->time) {
            w->time = o.time_s;
            w->option = index;
          }
        } else {
          for (int n : o.eligible) {
            const double G = cluster.nodes[static_cast<size_t>(n)].devices;
            it.single[static_cast<size_t>(n)] =
                std::min(it.single[static_cast<size_t>(n)], o.devices / G * o.time_s);
            it.fastest[static_cast<size_t>(n)] =
                std::min(it.fastest[static_cast<size_t>(n)], o.time_s);
          }
        }
      }
      it.least = *std::min_element(it.single.begin(), it.single.end());
      for (const Wide& w : it.wide) it.least = std::min(it.least, w.k * w.time);
      feasible_ = feasible_ && std::isfinite(it.least);
      for (const Option& o : p.options[j]) pinned_ = pinned_ || o.pinned;
    }
    class_rep_.assign(static_cast<size_t>(p.num_classes), 0);
    for (size_t j = p.num_jobs(); j-- > 0;) class_rep_[static_cast<size_t>(p.job_class[j])] = j;
    choice_.assign(p.num_jobs(), 0);
    wide_pick_.resize(p.num_jobs());
    order_.resize(p.num_jobs());
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(),
              [&](size_t a, size_t b) { return items_[a].least > items_[b].least; });
    remaining_ = 0;
    for (const Item& it : items_) {
      remaining_ += it.least;
      remaining_area_ += it.area;
    }
    for (const Node& node : cluster.nodes) devices_.push_back(node.devices);
    // Only the big items are placed; the small ones count by their total node-time against
    // the total slack (a relaxation, so a refutation stays valid). Keeps many-job searches
    // short without losing what makes packings infeasible: the big jobs.
    depth_limit_ = 0;
    while (depth_limit_ < order_.size() && depth_limit_ < 24 &&
           (order_.size() <= 16 || items_[order_[depth_limit_]].least >= 0.05 * T))
      ++depth_limit_;
  }

  // 1: a packing exists; 0: none exists; -1: undecided (limits).
  int decide() {
    if (!feasible_) return 0;
    const int r = search(0);
    return aborted_ ? -1 : r;
  }

  // Turns the search into one for plans (packing_schedule): every job is placed (no small jobs
  // counted by area), and a node passes only when the exact search finds a schedule of its
  // jobs within `node_budget` states, so a packing found is a plan (build). A node test out of
  // budget fails: then "no packing" is no proof (refuted()).
  void find_plans(long node_budget) {
    primal_ = true;
    primal_budget_ = node_budget;
    depth_limit_ = order_.size();
  }

  // After decide() returned 0 with find_plans: whether that is a proof (no node test ran out
  // of budget; every other test and pruning is exact or a relaxation, and every job is placed).
  bool refuted() const { return primal_ && !narrow_small_ && !undecided_node_ && !aborted_; }
  // Small jobs (least area at most 3% of a node's) keep only options within 10% of their
  // least area: fewer branches for the exact node tests, no proofs.
  void narrow_small() { narrow_small_ = true; }

  // After decide() returned 1 with find_plans: the plan of that packing. Whole-node jobs run
  // first, one after another in the order placed, and each node's own jobs after them in the
  // schedule its exact search found. False when a node's jobs no longer fit in the time the
  // whole-node jobs leave (they were tested against the sum of those jobs' times, which the
  // sequence exceeds only when their node sets differ) or the search runs out of budget.
  bool build(Schedule& out) const {
    const size_t J = p_.num_jobs(), N = load_.size();
    out.jobs.assign(J, Placement{});
    out.makespan = 0;
    std::vector<double> free_from(N, 0.0);
    std::vector<std::vector<size_t>> on(N);
    for (size_t d = 0; d < J; ++d) {
      const size_t j = order_[d];
      if (choice_[d] < N) {
        on[choice_[d]].push_back(j);
        continue;
      }
      const auto& [option, nodes] = wide_pick_[d];
      double start = 0;
      for (int n : nodes) start = std::max(start, free_from[static_cast<size_t>(n)]);
      Placement& pl = out.jobs[j];
      pl.option = option;
      pl.nodes = nodes;
      pl.start = start;
      pl.end = start + p_.options[j][static_cast<size_t>(option)].time_s;
      for (int n : nodes) free_from[static_cast<size_t>(n)] = pl.end;
    }
    for (size_t n = 0; n < N; ++n) {
      if (on[n].empty()) continue;
      std::sort(on[n].begin(), on[n].end(),
                [&](size_t a, size_t b) { return p_.job_class[a] < p_.job_class[b]; });
      std::vector<NodeScheduleSearch::Class> classes;
      std::vector<std::vector<int>> option_index;  // per class: Prepared option of each opt
      std::vector<std::vector<size_t>> members;    // per class: its jobs on this node
      const double avail = T_ * (1 + 1e-9) - free_from[n];
      for (size_t i = 0; i < on[n].size(); ++i) {
        const size_t j = on[n][i];
        if (i > 0 && p_.job_class[on[n][i - 1]] == p_.job_class[j]) {
          ++classes.back().count;
          members.back().push_back(j);
          continue;
        }
        classes.push_back(node_class(j, n, avail, &option_index.emplace_back()));
        members.push_back({j});
      }
      NodeScheduleSearch search(p_.cluster().nodes[n].devices, avail, std::move(classes),
                                primal_budget_, deadline_);
      if (search.decide() != 1) return false;
      std::vector<size_t> next(members.size(), 0);
      for (const NodeScheduleSearch::Start& st : search.schedule()) {
        const size_t j = members[st.cls][next[st.cls]++];
        Placement& pl = out.jobs[j];
        pl.option = option_index[st.cls][st.option];
        pl.nodes = {static_cast<int>(n)};
        pl.start = free_from[n] + st.start;
        pl.end = pl.start + p_.options[j][static_cast<size_t>(pl.option)].time_s;
      }
    }
    for (const Placement& pl : out.jobs) {
      if (pl.option < 0) return false;
      out.makespan = std::max(out.makespan, pl.end);
    }
    return true;
  }

 private:
  struct Wide {
    int k;
    double time;
    std::vector<int> eligible;
    int option;  // index into Prepared::options of the job: the shortest of this width
  };
  struct Item {
    std::vector<double> single;   // per node
    std::vector<double> fastest;  // per node: the shortest single-node option
    double area = kInfinity;      // least device-time
    std::vector<Wide> wide;
    double least = 0;
  };

  bool out_of_budget() {
    SolverClock::tick(kPackingNodeUnits);  // a node
    if (++nodes_ > node_limit_) return true;
    if ((nodes_ & 1023) == 0 && SolverClock::now() > deadline_) return true;
    return false;
  }

  int search(size_t depth) {
    if (depth == depth_limit_) return rest_fits() ? 1 : 0;
    if (out_of_budget()) {
      aborted_ = true;
      return 0;
    }
    if (!rest_fits()) return 0;
    const size_t j = order_[depth];
    const Item& it = items_[j];
    remaining_ -= it.least;
    remaining_area_ -= it.area;
    const double eps = 1e-9 * T_;
    const size_t N = load_.size();
    // Identical jobs (one class, adjacent in the order) take their places in a canonical
    // order: single nodes by index, then whole-node options. Any packing can be permuted into
    // that order, so nothing is lost.
    size_t first = 0;
    if (depth > 0 && !pinned_ && p_.job_class[j] == p_.job_class[order_[depth - 1]])
      first = choice_[depth - 1];
    for (size_t n = first; n < N && !aborted_; ++n) {
      if (!std::isfinite(it.single[n]) || load_[n] + it.single[n] > T_ + eps) continue;
      // Nodes of one type in the same state are interchangeable: try the first only. (Not with
      // pinned jobs, which tell nodes apart.)
      bool seen = false;
      for (size_t m = first; m < n && !seen && !pinned_; ++m)
        seen = type_[m] == type_[n] && load_[m] == load_[n] && wide_[m] == wide_[n] &&
               on_[m] == on_[n] && std::isfinite(it.single[m]);
      if (seen) continue;
      load_[n] += it.single[n];
      on_[n].insert(std::upper_bound(on_[n].begin(), on_[n].end(), p_.job_class[j]),
                    p_.job_class[j]);
      choice_[depth] = n;
      int r = 0;
      if (node_fits(n)) r = search(depth + 1);
      on_[n].erase(std::find(on_[n].begin(), on_[n].end(), p_.job_class[j]));
      load_[n] -= it.single[n];
      if (r == 1) return restore(it, 1);
    }
    choice_[depth] = N;
    for (const Wide& w : it.wide) {
      if (aborted_) break;
      std::vector<int> pick;
      if (wide_search(w, 0, pick, depth)) return restore(it, 1);
    }
    return restore(it, 0);
  }

  // Whether the single-node jobs put on node n can run there in the time whole-node jobs leave
  // it: their preemptive single-node LP (options no longer than T) must fit. Stronger than the
  // node-time load when jobs cannot share the node (two jobs each over half of it run one after
  // the other).
  bool node_fits(size_t n) {
    const double avail = T_ * (1 + 1e-9) - wide_[n];
    if (avail < 0) return false;
    if (on_[n].empty()) return true;
    // One job: its shortest option (jobs of a class have the same options).
    if (on_[n].size() == 1) return items_[class_rep_[on_[n][0]]].fastest[n] <= avail;
    if (pinned_) return true;
    const auto key = std::make_pair(type_[n], on_[n]);
    auto it = lp_cache_.find(key);
    if (it == lp_cache_.end()) {
      // One representative job per class placed there; the LP needs only their options.
      Problem sub;
      sub.cluster.nodes = {p_.cluster().nodes[n]};
      for (int k : on_[n]) {
        const Job& job = p_.problem->jobs[class_rep_[k]];
        Job copy{job.id + "#" + std::to_string(sub.jobs.size()), {}, job.steps};
        for (const Config& c : job.configs)
          if (c.nodes <= 1 && !c.pinned()) copy.configs.push_back(c);
        sub.jobs.push_back(std::move(copy));
      }
      double v = std::nan("");
      try {
        const Prepared sp = prepare(sub);
        v = single_node_lp_time(sp, T_, deadline_);
      } catch (const SolverError&) {
        // A job with no configuration for this node alone: no claim.
      }
      it = lp_cache_.emplace(key, v).first;
    }
    if (it->second > avail) return false;  // NaN (not solved in time) claims nothing
    if (primal_) {
      auto [known_fit, fresh] =
          primal_memo_.try_emplace(std::make_tuple(type_[n], on_[n], avail), false);
      if (fresh) {
        const int r = all_fit(n, avail, primal_budget_);
        known_fit->second = r == 1;
        undecided_node_ = undecided_node_ || r < 0;
      }
      return known_fit->second;
    }
    auto [known, inserted] =
        memo_.try_emplace(std::make_pair(type_[n], on_[n]), -kInfinity, kInfinity);
    (void)inserted;
    auto& [too_little, enough] = known->second;
    if (avail <= too_little) return false;
    if (avail >= enough) return true;
    // Six jobs first (cheap), then eight; a test out of budget (-1) claims nothing.
    int r = rigid_fits(n, avail, 6);
    if (r == 1 && on_[n].size() > 6) r = rigid_fits(n, avail, 8);
    // Beyond eight jobs the rest count by area only, which small jobs squeezed into the
    // gaps of big ones can pass although no schedule exists: then all of them, exactly.
    // A test out of budget is not repeated for the same jobs and time (other nodes' packings
    // bring the node back to the same state many times in one trial).
    if (r == 1 && exact_nodes_ && on_[n].size() > 8) {
      const auto state = std::make_tuple(type_[n], on_[n], avail);
      if (undecided_.count(state) == 0) {
        r = all_fit(n, avail);
        if (r < 0) undecided_.insert(state);
      }
    }
    if (r == 0) too_little = std::max(too_little, avail);
    if (r == 1) enough = std::min(enough, avail);
    return r != 0;
  }

  // The LP lets jobs pause and move; real ones run without a break. Exactly for the node's
  // biggest jobs (at most `count`): is there a choice of their options, and an order, whose
  // list schedule on the node ends within `avail`, with the other jobs' least area fitting
  // too? Serial list scheduling over all orders yields every active schedule, and an optimal
  // one among them, so "no" is a proof. 1: fits; 0: proven not to; -1: out of budget.
  int rigid_fits(size_t n, double avail, size_t count) {
    struct Job {
      int cls;
      std::vector<std::pair<int, double>> opts;  // (devices, time) with time <= avail
      double least = kInfinity;
    };
    const int G = p_.cluster().nodes[n].devices;
    std::vector<Job> jobs;
    for (int k : on_[n]) {
      Job job{k, {}, kInfinity};
      for (const Option& o : p_.options[class_rep_[static_cast<size_t>(k)]]) {
        if (o.whole_nodes() || o.time_s > avail ||
            std::find(o.eligible.begin(), o.eligible.end(), static_cast<int>(n)) ==
                o.eligible.end())
          continue;
        job.opts.emplace_back(o.devices, o.time_s);
        job.least = std::min(job.least, o.devices * o.time_s);
      }
      if (job.opts.empty()) return 0;
      jobs.push_back(std::move(job));
    }
    std::stable_sort(jobs.begin(), jobs.end(),
                     [](const Job& a, const Job& b) { return a.least > b.least; });
    const size_t big = std::min(jobs.size(), count);
    double small_area = 0;
    for (size_t i = big; i < jobs.size(); ++i) small_area += jobs[i].least;
    std::vector<int> pick(big, 0);
    long budget = 200000;  // list schedules
    bool undecided = false;
    // Options by job, identical jobs in non-decreasing option index (any choice is such a
    // choice after renaming identical jobs).
    std::function<bool(size_t, double)> choose = [&](size_t i, double area) -> bool {
      if (area + small_area > G * avail * (1 + 1e-9)) return false;
      if (i == big) return orders_fit(jobs, pick, G, avail, budget, undecided);
      size_t from = 0;
      if (i > 0 && jobs[i].cls == jobs[i - 1].cls) from = static_cast<size_t>(pick[i - 1]);
      for (size_t o = from; o < jobs[i].opts.size(); ++o) {
        pick[i] = static_cast<int>(o);
        const auto& [g, t] = jobs[i].opts[o];
        if (choose(i + 1, area + g * t)) return true;
        if (undecided) return true;
      }
      return false;
    };
    const bool fits = choose(0, 0.0);
    return undecided ? -1 : fits ? 1 : 0;
  }

  // All the jobs on node n, exactly (NodeScheduleSearch). 1: fit; 0: proven not to; -1: out
  // of budget.
  int all_fit(size_t n, double avail, long budget = 500000) {
    std::vector<NodeScheduleSearch::Class> classes;
    for (size_t i = 0; i < on_[n].size(); ++i) {
      const int k = on_[n][i];
      if (i > 0 && on_[n][i - 1] == k) {
        ++classes.back().count;
        continue;
      }
      classes.push_back(node_class(class_rep_[static_cast<size_t>(k)], n, avail, nullptr));
    }
    NodeScheduleSearch search(p_.cluster().nodes[n].devices, avail, std::move(classes), budget,
                              deadline_);
    return search.decide();
  }

  // Job j's single-node options on node n no longer than avail, as a class of one job of the
  // exact node search; with `index`, the Prepared option index of each.
  NodeScheduleSearch::Class node_class(size_t j, size_t n, double avail,
                                       std::vector<int>* index) const {
    NodeScheduleSearch::Class c;
    c.count = 1;
    for (size_t o = 0; o < p_.options[j].size(); ++o) {
      const Option& x = p_.options[j][o];
      if (x.whole_nodes() || x.pinned || x.time_s > avail ||
          std::find(x.eligible.begin(), x.eligible.end(), static_cast<int>(n)) == x.eligible.end())
        continue;
      c.opts.emplace_back(x.devices, x.time_s);
      c.least_area = std::min(c.least_area, x.devices * x.time_s);
      c.least_time = std::min(c.least_time, x.time_s);
      if (index) index->push_back(static_cast<int>(o));
    }
    if (narrow_small_ && c.least_area <= 0.03 * p_.cluster().nodes[n].devices * avail) {
      NodeScheduleSearch::Class k = c;
      k.opts.clear();
      std::vector<int> kept;
      for (size_t i = 0; i < c.opts.size(); ++i)
        if (c.opts[i].first * c.opts[i].second <= 1.1 * c.least_area) {
          k.opts.push_back(c.opts[i]);
          if (index) kept.push_back((*index)[index->size() - c.opts.size() + i]);
        }
      k.least_time = kInfinity;
      for (const auto& [g, t] : k.opts) k.least_time = std::min(k.least_time, t);
      if (index) {
        index->resize(index->size() - c.opts.size());
        index->insert(index->end(), kept.begin(), kept.end());
      }
      return k;
    }
    return c;
  }

  template <class Jobs>
  bool orders_fit(const Jobs& jobs, const std::vector<int>& pick, int G, double avail, long& budget,
                  bool& undecided) {
    const size_t m = pick.size();
    std::vector<std::pair<int, double>> items(m);
    for (size_t i = 0; i < m; ++i) items[i] = jobs[i].opts[static_cast<size_t>(pick[i])];
    std::sort(items.begin(), items.end());
    const double limit = avail * (1 + 1e-9);
    struct Run {
      double start, end;
      int devices;
    };
    std::vector<Run> placed;
    placed.reserve(m);
    do {
      SolverClock::tick(kNodeScheduleUnits);  // a node
      if (--budget < 0 || ((budget & 255) == 0 && SolverClock::now() > deadline_)) {
        undecided = true;
        return true;
      }
      placed.clear();
      bool ok = true;
      for (const auto& [g, t] : items) {
        // Earliest start: time 0 or the end of a placed job, where g devices stay free for t.
        double best = kInfinity;
        auto room_at = [&](double x) {
          int used = g;
          for (const Run& a : placed)
            if (a.start <= x && x < a.end) used += a.devices;
          return used <= G;
        };
        // Usage is piecewise constant and rises only at starts: check at s and at every start
        // inside (s, s + t).
        auto free_over = [&](double s) {
          if (!room_at(s)) return false;
          for (const Run& a : placed)
            if (a.start > s && a.start < s + t && !room_at(a.start)) return false;
          return true;
        };
        if (free_over(0.0)) best = 0.0;
        for (const Run& a : placed)
          if (a.end < best && free_over(a.end)) best = a.end;
        if (best + t > limit) {
          ok = false;
          break;
        }
        placed.push_back({best, best + t, g});
      }
      if (ok) return true;
    } while (std::next_permutation(items.begin(), items.end()));
    return false;
  }

  int restore(const Item& it, int r) {
    remaining_ += it.least;
    remaining_area_ += it.area;
    return r;
  }

  // The jobs not placed yet fit the time nodes have left: in node-time (each at its least on
  // any node) and in device-time (a node of G devices with node-time s left has G x s; this
  // one tells big nodes from small ones).
  bool rest_fits() const {
    double slack = 0, area = 0;
    for (size_t n = 0; n < load_.size(); ++n) {
      slack += std::max(0.0, T_ - load_[n]);
      area += std::max(0.0, T_ - load_[n]) * devices_[n];
    }
    return remaining_ <= slack * (1 + 1e-12) && remaining_area_ <= area * (1 + 1e-12);
  }

  bool wide_search(const Wide& w, size_t from, std::vector<int>& pick, size_t depth) {
    if (static_cast<int>(pick.size()) == w.k) {
      wide_pick_[depth] = {w.option, pick};
      bool fits = true;
      for (int n : pick) {
        load_[static_cast<size_t>(n)] += w.time;
        wide_[static_cast<size_t>(n)] += w.time;
        fits = fits && node_fits(static_cast<size_t>(n));
      }
      const int r = fits ? search(depth + 1) : 0;
      for (int n : pick) {
        load_[static_cast<size_t>(n)] -= w.time;
        wide_[static_cast<size_t>(n)] -= w.time;
      }
      return r == 1;
    }
    for (size_t i = from; i < w.eligible.size() && !aborted_; ++i) {
      const int n = w.eligible[i];
      if (load_[static_cast<size_t>(n)] + w.time > T_ * (1 + 1e-9)) continue;
      pick.push_back(n);
      const bool ok = wide_search(w, i + 1, pick, depth);
      pick.pop_back();
      if (ok) return true;
    }
    return false;
  }

  const Prepared& p_;
  double T_;
  SolverClock::time_point deadline_;
  long node_limit_;
  long nodes_ = 0;
  bool aborted_ = false;
  bool feasible_ = true;
  bool pinned_ = false;
  std::vector<double> load_;
  std::vector<double> wide_;          // per node: time held by whole-node jobs
  std::vector<std::vector<int>> on_;  // per node: classes of its single-node jobs, sorted
  std::vector<size_t> class_rep_;     // a job of each class
  std::vector<size_t> choice_;        // per depth: node index, or N for a whole-node option
  std::vector<std::pair<int, std::vector<int>>> wide_pick_;  // per depth: option and nodes
  bool primal_ = false;          // find_plans: every node tested exactly, undecided = does not fit
  bool undecided_node_ = false;  // find_plans: a node test ran out of budget
  bool narrow_small_ = false;    // narrow_small: small jobs in their least-work options only
  long primal_budget_ = 0;
  std::map<std::tuple<int, std::vector<int>, double>, bool> primal_memo_;
  std::map<std::pair<int, std::vector<int>>, double> lp_cache_;
  RigidMemo& memo_;
  bool exact_nodes_;
  std::set<std::tuple<int, std::vector<int>, double>> undecided_;  // exact node tests
  std::vector<int> type_;
  std::vector<Item> items_;
  std::vector<size_t> order_;
  size_t depth_limit_ = 0;
  double remaining_ = 0;
  double remaining_area_ = 0;
  std::vector<double> devices_;  // per node
};

// One bisection of packing_search_bound.
double bisect(const Prepared& p, double lower, double upper, SolverClock::time_point deadline,
              bool exact_nodes) {
  constexpr long kNodeLimit = 2000000;
  RigidMemo memo;
  double lo = lower, hi = upper;  // lo: proven bound; hi: not refuted
  // First the strongest claim: no plan shorter than the one in hand (proves it optimal).
  {
    const double just_below = upper * (1 - 1e-9);
    if (just_below <= lo) return lo;
    Packing packing(p, just_below, deadline, kNodeLimit, memo, exact_nodes);
    const int r = packing.decide();
    if (r == 0) return just_below;
  }
  // Packings exist at every T above one that has one: when one exists (or the search cannot
  // tell) just above the bound in hand, bisection cannot gain 0.1%; stop.
  {
    const double just_above = lo * (1 + 1e-3);
    if (just_above < hi) {
      Packing packing(p, just_above, deadline, kNodeLimit, memo, exact_nodes);
      if (packing.decide() != 0) return lo;
    }
  }
  // Down to 1e-9: a bound a hair below an optimal plan would stop the solve before the MILP
  // proves it (the gap tolerance is 1e-4), short of status optimal.
  for (int it = 0; it < 40 && hi - lo > 1e-9 * hi; ++it) {
    if (SolverClock::now() > deadline) break;
    const double mid = 0.5 * (lo + hi);
    Packing packing(p, mid, deadline, kNodeLimit, memo, exact_nodes);
    const int r = packing.decide();
    if (r == 0)
      lo = mid;  // no packing within mid: every plan is longer
    else
      hi = mid;  // a packing exists, or undecided: no claim
  }
  return lo;
}

}  // namespace

double packing_search_bound(const Prepared& p, double lower, double upper, double time_limit_s) {
  const auto deadline =
      SolverClock::now() + std::chrono::microseconds(static_cast<long long>(time_limit_s * 1e6));
  // Two passes: without, then with the exact test of nodes given more than eight jobs. That
  // test can take a second where the first pass settles a bound to 1e-9 in milliseconds, so the
  // first pass runs alone first (its bound is as strong as before the exact test existed) and
  // the second raises it with the time left.
  const double first = bisect(p, lower, upper, deadline, /*exact_nodes=*/false);
  if (first >= upper * (1 - 1e-9) * (1 - 1e-12) || SolverClock::now() > deadline) return first;
  return bisect(p, first, upper, deadline, /*exact_nodes=*/true);
}

int packing_schedule(const Prepared& p, double T, double time_limit_s, long node_budget,
                     Schedule& out, bool narrow_small) {
  for (const auto& options : p.options)
    for (const Option& o : options)
      if (o.pinned) return -1;  // the packing search does not place pinned jobs at time 0
  const auto deadline =
      SolverClock::now() + std::chrono::microseconds(static_cast<long long>(time_limit_s * 1e6));
  constexpr long kNodeLimit = 2000000;
  RigidMemo memo;
  Packing packing(p, T, deadline, kNodeLimit, memo, /*exact_nodes=*/true);
  packing.find_plans(node_budget);
  if (narrow_small) packing.narrow_small();
  const int r = packing.decide();
  if (r == 1) return packing.build(out) ? 1 : -1;
  return r == 0 && packing.refuted() ? 0 : -1;
}

int node_schedule_fits(int devices, double avail,
                       const std::vector<std::vector<std::pair<int, double>>>& jobs, long budget,
                       double time_limit_s) {
  std::map<std::vector<std::pair<int, double>>, int> counts;
  for (const auto& options : jobs) ++counts[options];
  std::vector<NodeScheduleSearch::Class> classes;
  for (const auto& [options, count] : counts) {
    NodeScheduleSearch::Class c;
    c.count = count;
    for (const auto& [g, time] : options) {
      if (g > devices || time > avail) continue;
      c.opts.emplace_back(g, time);
      c.least_area = std::min(c.least_area, g * time);
      c.least_time = std::min(c.least_time, time);
    }
    classes.push_back(std::move(c));
  }
  const auto deadline =
      SolverClock::now() + std::chrono::microseconds(static_cast<long long>(time_limit_s * 1e6));
  return NodeScheduleSearch(devices, avail, std::move(classes), budget, deadline).decide();
}

}  // namespace saturn::solver
