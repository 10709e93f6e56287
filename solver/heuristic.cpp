#include "solver/heuristic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "solver/clock.hpp"

namespace saturn::solver {

namespace {

using Clock = SolverClock;

const Option& opt(const Prepared& p, size_t j, int o) {
  return p.options[j][static_cast<size_t>(o)];
}

// Schedules compare by makespan, then by how many jobs end at the makespan, then by a tie-break
// (below). The count guides the search across plateaus: when several jobs end together at the
// makespan, speeding up one of them does not lower it but is progress, although moving any one
// of them alone may worsen the tie-break.
struct Key {
  double makespan = kInfinity;
  int critical = 0;
  double tiebreak = kInfinity;
  bool better_than(const Key& k) const {
    if (!std::isfinite(k.makespan)) return std::isfinite(makespan);
    if (!std::isfinite(makespan)) return false;
    const double eps = 1e-9 * std::max(1.0, k.makespan);
    if (makespan < k.makespan - eps) return true;
    if (makespan > k.makespan + eps) return false;
    if (critical != k.critical) return critical < k.critical;
    return tiebreak < k.tiebreak - eps;
  }
};

// What decides between schedules of one makespan and critical count. The sum of the jobs' ends
// pulls jobs earlier (compact lists); the total work (device-seconds of the chosen options) lets
// jobs take their cheaper shapes while the makespan holds, which frees devices that a later move
// turns into a shorter makespan. Each one's local optima are often not the other's: on the
// heavy-tailed held-out family (docs/solver.md) the sum of ends alone stalls 0.5-1.4 % above
// CP-SAT's best, and alternating the two by epoch of the local search halves that.
enum class Tiebreak { sum_of_ends, work };

// What one job adds to the tie-break: both are sums over the jobs, so a partial schedule's value
// bounds every completion's from below. A job not placed (a partial list) adds nothing.
double tiebreak_of(const Prepared& p, size_t j, const Placement& pl, Tiebreak t) {
  if (pl.option < 0) return 0.0;
  return t == Tiebreak::work ? p.options[j][static_cast<size_t>(pl.option)].min_area : pl.end;
}

Key key_of(const Prepared& p, const Schedule& s, Tiebreak t) {
  Key k;
  k.makespan = s.makespan;
  if (!std::isfinite(s.makespan)) return k;
  k.tiebreak = 0;
  const double at = s.makespan * (1 - 1e-9);
  for (size_t j = 0; j < s.jobs.size(); ++j) {
    const Placement& pl = s.jobs[j];
    k.tiebreak += tiebreak_of(p, j, pl, t);
    k.critical += pl.end >= at;
  }
  return k;
}

// Options chosen while list scheduling: the earliest-finishing option whose work is within
// (1 + slack) of the job's least work.
std::vector<int> greedy_finish(const Prepared& p, const std::vector<int>& order, double slack) {
  std::vector<int> chosen(p.num_jobs(), 0);
  ClusterState state(p);
  std::vector<int> sorted = order;
  std::stable_partition(sorted.begin(), sorted.end(), [&](int j) {
    for (const Option& o : p.options[static_cast<size_t>(j)])
      if (o.pinned) return true;
    return false;
  });
  for (int j : sorted) {
    const size_t ju = static_cast<size_t>(j);
    double least = kInfinity;
    for (const Option& o : p.options[ju]) least = std::min(least, o.min_area);
    Placement best;
    best.end = kInfinity;
    double best_area = kInfinity;
    for (size_t o = 0; o < p.options[ju].size(); ++o) {
      const Option& option = p.options[ju][o];
      if (option.min_area > least * (1 + slack) && !option.pinned) continue;
      Placement pl = state.earliest(option, option.time_s, 0.0);
      if (option.pinned && pl.start > 0) continue;
      if (pl.end < best.end || (pl.end == best.end && option.min_area < best_area)) {
        best = pl;
        best.option = static_cast<int>(o);
        best_area = option.min_area;
      }
    }
    if (best.option < 0) continue;  // nothing fits (a pinned conflict): list_schedule reports it
    chosen[ju] = best.option;
    state.reserve(opt(p, ju, best.option), best);
  }
  return chosen;
}

std::vector<int> area_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]).min_area >
           opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]).min_area;
  });
  return order;
}

std::vector<int> wide_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Option& x = opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]);
    const Option& y = opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]);
    const int gx = x.devices * x.nodes, gy = y.devices * y.nodes;
    if (gx != gy) return gx > gy;
    return x.time_s > y.time_s;
  });
  return order;
}

// Large-neighbourhood step: the jobs in `freed` leave the schedule, every other job keeps its
// start and nodes, and the freed jobs are put back in the best way there is: every order of
// them, each in every option and (single-node) node at its earliest start given what is
// placed, by depth-first branch and bound on (makespan, sum of ends). Serial placement over all
// orders and choices yields every active placement of the freed jobs around the fixed ones, so
// within its budget the window is solved exactly. Identical jobs are placed in one order only.
// Then the whole schedule is listed again in start order with the nodes found (left shift).
// Returns the result when it beats `cur`; `budget` counts placements and is decreased.
struct WindowResult {
  bool improved = false;
  std::vector<int> option, order, node;
  Schedule schedule;
};

WindowResult resolve_window(const Prepared& p, const std::vector<int>& freed,
                            const std::vector<int>& cur_option, const Schedule& cur,
                            double max_time, Tiebreak tiebreak, long& budget) {
  WindowResult out;
  const size_t J = p.num_jobs();
  std::vector<char> is_freed(J, 0);
  for (int j : freed) is_freed[static_cast<size_t>(j)] = 1;
  ClusterState base(p);
  double fixed_makespan = 0, fixed_sum = 0;
  for (size_t j = 0; j < J; ++j) {
    if (is_freed[j]) continue;
    const Placement& pl = cur.jobs[j];
    base.reserve(opt(p, j, pl.option), pl);
    fixed_makespan = std::max(fixed_makespan, pl.end);
    fixed_sum += tiebreak_of(p, j, pl, tiebreak);
  }
  const size_t k = freed.size();
  // The window's own objective is (makespan, tie-break), which partial placements bound from
  // below; the critical count is compared on the whole result only.
  Key best = key_of(p, cur, tiebreak);
  best.critical = 0;
  std::vector<Placement> place(k), best_place;
  std::vector<char> done(k, 0);
  std::vector<int> one(1);
  std::function<void(const ClusterState&, size_t, double, double)> dfs =
      [&](const ClusterState& state, size_t depth, double makespan, double sum) {
        if (depth == k) {
          const Key key{makespan, 0, sum};
          if (key.better_than(best)) {
            best = key;
            best_place = place;
          }
          return;
        }
        for (size_t i = 0; i < k && budget > 0; ++i) {
          if (done[i]) continue;
          const size_t j = static_cast<size_t>(freed[i]);
          // Of identical jobs not placed yet, only the first is placed next.
          bool twin_first = false;
          for (size_t m = 0; m < i && !twin_first; ++m)
            twin_first = !done[m] && p.job_class[static_cast<size_t>(freed[m])] == p.job_class[j];
          if (twin_first) continue;
          for (size_t o = 0; o < p.options[j].size() && budget > 0; ++o) {
            const Option& option = p.options[j][o];
            if (option.pinned || option.time_s >= max_time) continue;
            const size_t choices = option.whole_nodes() ? 1 : option.eligible.size();
            for (size_t c = 0; c < choices && budget > 0; ++c) {
              --budget;
              const std::vector<int>* fixed = nullptr;
              if (!option.whole_nodes()) {
                one[0] = option.eligible[c];
                fixed = &one;
              }
              Placement pl = state.earliest(option, option.time_s, 0.0, fixed);
              if (!std::isfinite(pl.start)) continue;
              pl.option = static_cast<int>(o);
              const double m = std::max(makespan, pl.end);
              const double tb = sum + tiebreak_of(p, j, pl, tiebreak);
              // The tie-break only adds up: a partial placement no better than the best is pruned.
              if (!Key{m, 0, tb}.better_than(best)) continue;
              ClusterState next = state;
              next.reserve(option, pl);
              place[i] = pl;
              done[i] = 1;
              dfs(next, depth + 1, m, tb);
              done[i] = 0;
            }
          }
        }
      };
  dfs(base, 0, fixed_makespan, fixed_sum);
  if (best_place.empty()) return out;
  Schedule s = cur;
  for (size_t i = 0; i < k; ++i) s.jobs[static_cast<size_t>(freed[i])] = best_place[i];
  out.option = cur_option;
  out.node.assign(J, -1);
  for (size_t j = 0; j < J; ++j) {
    out.option[j] = s.jobs[j].option;
    if (s.jobs[j].nodes.size() == 1) out.node[j] = s.jobs[j].nodes[0];
  }
  out.order = start_order(s);
  out.schedule = list_schedule_on(p, out.option, out.order, out.node);
  out.improved = key_of(p, out.schedule, tiebreak).better_than(key_of(p, cur, tiebreak));
  return out;
}

}  // namespace

std::vector<int> allot_within(const Prepared& p, double T) {
  std::vector<int> out(p.num_jobs(), 0);
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    int best = -1, fastest = 0;
    for (size_t o = 0; o < p.options[j].size(); ++o) {
      const Option& x = p.options[j][o];
      if (x.time_s < p.options[j][static_cast<size_t>(fastest)].time_s)
        fastest = static_cast<int>(o);
      if (x.time_s > T * (1 + 1e-12)) continue;
      if (best < 0 || x.min_area < opt(p, j, best).min_area ||
          (x.min_area == opt(p, j, best).min_area && x.time_s < opt(p, j, best).time_s))
        best = static_cast<int>(o);
    }
    out[j] = best >= 0 ? best : fastest;
  }
  return out;
}

std::vector<int> lpt_order(const Prepared& p, const std::vector<int>& option) {
  std::vector<int> order(p.num_jobs());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const Option& x = opt(p, static_cast<size_t>(a), option[static_cast<size_t>(a)]);
    const Option& y = opt(p, static_cast<size_t>(b), option[static_cast<size_t>(b)]);
    if (x.time_s != y.time_s) return x.time_s > y.time_s;
    return x.devices * x.nodes > y.devices * y.nodes;
  });
  return order;
}

namespace {

// Jobs ending at the schedule's makespan.
std::vector<size_t> ending_last(const Schedule& s) {
  std::vector<size_t> out;
  for (size_t j = 0; j < s.jobs.size(); ++j)
    if (s.jobs[j].end >= s.makespan * (1 - 1e-12)) out.push_back(j);
  return out;
}

// Per job the nodes its single-node options may use, when there are at least two to choose from
// (the node move's choices).
std::vector<std::vector<int>> node_choices_of(const Prepared& p) {
  const size_t N = p.cluster().nodes.size();
  std::vector<std::vector<int>> choices(p.num_jobs());
  for (size_t j = 0; j < p.num_jobs(); ++j) {
    std::vector<char> any(N, 0);
    for (const Option& o : p.options[j])
      if (!o.whole_nodes() && !o.pinned)
        for (int n : o.eligible) any[static_cast<size_t>(n)] = 1;
    for (size_t n = 0; n < N; ++n)
      if (any[n]) choices[j].push_back(static_cast<int>(n));
    if (choices[j].size() < 2) choices[j].clear();
  }
  return choices;
}

bool any_pinned(const Prepared& p) {
  for (const auto& options : p.options)
    for (const Option& o : options)
      if (o.pinned) return true;
  return false;
}

// Iterated local search over (option, node, list position) per job, in epochs (run() tells the
// story). Three lists are kept: the current one, the epoch's best and the overall best.
class LocalSearch {
 public:
  // `start.node` has one entry per job.
  LocalSearch(const Prepared& p, HeuristicResult start, const HeuristicOptions& opts,
              Clock::time_point t0);
  HeuristicResult run();

 private:
  // Share of the search's time each kind of large step (windows, ruin and recreate) may take.
  static constexpr double kWindowShare = 0.3;
  static constexpr double kRecreateShare = 0.3;

  Key key(const Schedule& s) const { return key_of(p_, s, tiebreak_); }
  bool time_left() const { return seconds_since(t0_) < opts_.time_limit_s; }
  bool at_bound() const { return best_.schedule.makespan <= opts_.stop_at * (1 + 1e-9); }

  // Restarts.
  void new_epoch();
  void kick();
  bool too_long(size_t j, int o) const;
  void shorten(std::vector<int>& option) const;

  // Descent from the current list.
  bool improve_critical();
  bool change_option(size_t j);
  bool change_node(size_t j);
  bool move_earlier(size_t j);
  bool widen_beside(size_t j);
  bool random_moves();
  bool random_move(std::vector<int>& option, std::vector<int>& order, std::vector<int>& node);
  bool random_node(std::vector<int>& node);
  bool random_option(std::vector<int>& option);
  bool random_trade(std::vector<int>& option);
  bool trade(std::vector<int>& option, size_t narrow, size_t widen) const;
  int next_width(size_t j, int o, bool wider) const;
  size_t partner_beside(size_t j);
  bool random_reorder(const std::vector<int>& option, std::vector<int>& order,
                      const std::vector<int>& node, bool swap);

  // Large steps from the epoch's best.
  bool window_step();
  void choose_window(const Schedule& base);
  bool recreate_step();
  bool ruin_recreate(const HeuristicResult& from, size_t k);
  bool ruin(const HeuristicResult& from, size_t k);
  void take(const HeuristicResult& from, size_t j, size_t k);
  void ruin_random(const HeuristicResult& from, size_t k);
  void ruin_near_start(const HeuristicResult& from, size_t k, bool around_critical);
  void ruin_node(const HeuristicResult& from, size_t k);
  void ruin_across_nodes(const HeuristicResult& from, size_t k);
  bool reinsert(size_t j);

  // Candidates.
  void start_candidate();
  bool try_candidate();
  bool evaluate_into(const std::vector<int>& option, const std::vector<int>& order,
                     const std::vector<int>& node, Schedule& out, double cutoff = kInfinity);
  Schedule evaluate(const std::vector<int>& option, const std::vector<int>& order,
                    const std::vector<int>& node);
  void justify(const std::vector<int>& option, std::vector<int>& order, std::vector<int>& node,
               Schedule& s);
  void list_by_end_desc(const Schedule& s);
  bool accept(const std::vector<int>& option, const std::vector<int>& order,
              const std::vector<int>& node, Schedule& s);

  const Prepared& p_;
  const HeuristicOptions& opts_;
  const Clock::time_point t0_;
  const size_t J_, N_;
  std::mt19937 rng_;
  std::uniform_int_distribution<size_t> pick_;  // a random job
  // Candidates without improvement that end a descent (local), an epoch, and the search.
  const long local_stall_, global_stall_, epoch_stall_;
  const std::vector<std::vector<int>> node_choices_;
  const bool justify_on_;

  // Alternates by epoch (Tiebreak); the keys below are of the current one.
  Tiebreak tiebreak_ = Tiebreak::sum_of_ends;
  HeuristicResult best_, epoch_best_, cur_;
  Key best_key_, epoch_key_, cur_key_;
  long evaluations_, since_best_ = 0, since_epoch_best_ = 0;
  long stall_ = 0;  // candidates since the current list last improved or was restarted
  bool improved_any_ = false;

  // Reused storage: the candidate's (option, order, node) and schedule, list positions, the
  // listing's timelines, the justification's passes, the large steps' jobs and trials.
  std::vector<int> option_, order_, node_;
  Schedule candidate_;
  std::vector<size_t> pos_;
  ClusterState scratch_;
  const std::vector<int> any_node_;
  std::vector<int> j_order_, j_node_;
  Schedule backward_, forward_;
  double window_seconds_ = 0, recreate_seconds_ = 0;
  std::vector<int> freed_, by_distance_;
  std::vector<size_t> partners_;
  std::vector<int> removed_, rr_option_, rr_order_, rr_node_, trial_order_;
  std::vector<char> is_removed_;
  std::vector<size_t> positions_;
  Schedule rr_schedule_, trial_;
};

LocalSearch::LocalSearch(const Prepared& p, HeuristicResult start, const HeuristicOptions& opts,
                         Clock::time_point t0)
    : p_(p),
      opts_(opts),
      t0_(t0),
      J_(p.num_jobs()),
      N_(p.cluster().nodes.size()),
      rng_(opts.seed),
      pick_(0, J_ - 1),
      local_stall_(100 + 2 * static_cast<long>(J_)),
      global_stall_(opts.stall_limit > 0 ? opts.stall_limit : std::numeric_limits<long>::max()),
      epoch_stall_(4000 + 100 * static_cast<long>(J_)),
      node_choices_(node_choices_of(p)),
      // Mirrored time breaks pinned jobs, which must start at time 0.
      justify_on_(!any_pinned(p)),
      best_(start),
      epoch_best_(start),
      cur_(std::move(start)),
      best_key_(key(best_.schedule)),
      epoch_key_(best_key_),
      cur_key_(best_key_),
      evaluations_(cur_.evaluations),
      pos_(J_),
      scratch_(p),
      any_node_(J_, -1),
      j_order_(J_),
      j_node_(J_),
      by_distance_(J_),
      is_removed_(J_) {}

// Descend from the current list (moves of the critical jobs first, then random ones) until a
// local stall; then a large step from the epoch's best while its share of the time allows, else
// a kick. An epoch that stops improving gives way to a new one from the overall best. Only the
// time limit, `stop_at` or `stall_limit` end the search: a stall is a reason to restart.
HeuristicResult LocalSearch::run() {
  while (time_left() && since_best_ < global_stall_ && !at_bound()) {
    if (since_epoch_best_ >= epoch_stall_) new_epoch();
    if (stall_ < local_stall_) {
      if (!improve_critical()) random_moves();
      continue;
    }
    if (recreate_seconds_ < kRecreateShare * seconds_since(t0_) && recreate_step()) continue;
    if (window_seconds_ < kWindowShare * seconds_since(t0_) && window_step()) continue;
    kick();
  }
  best_.evaluations = evaluations_;
  if (improved_any_ && best_.method.find("+local") == std::string::npos) best_.method += "+local";
  return std::move(best_);
}

// A new epoch starts from the overall best with a bigger kick than kick()'s, and with the other
// tie-break: searches from one start settle in different local optima.
void LocalSearch::new_epoch() {
  tiebreak_ = tiebreak_ == Tiebreak::sum_of_ends ? Tiebreak::work : Tiebreak::sum_of_ends;
  best_key_ = key(best_.schedule);
  cur_key_ = key(cur_.schedule);
  epoch_best_.option = best_.option;
  epoch_best_.order = best_.order;
  epoch_best_.node = best_.node;
  shorten(epoch_best_.option);
  const int kicks = 3 + static_cast<int>(rng_() % (1 + J_ / 3));
  for (int i = 0; i < kicks; ++i)
    random_move(epoch_best_.option, epoch_best_.order, epoch_best_.node);
  epoch_best_.schedule = evaluate(epoch_best_.option, epoch_best_.order, epoch_best_.node);
  justify(epoch_best_.option, epoch_best_.order, epoch_best_.node, epoch_best_.schedule);
  epoch_key_ = key(epoch_best_.schedule);
  since_epoch_best_ = 0;
  stall_ = local_stall_;  // start the epoch with a kick from its (new) best
}

// Restart from the epoch's best with 2-4 random moves, accepted whatever they do.
void LocalSearch::kick() {
  cur_.option = epoch_best_.option;
  cur_.order = epoch_best_.order;
  cur_.node = epoch_best_.node;
  shorten(cur_.option);
  const int kicks = 2 + static_cast<int>(rng_() % 3);
  for (int i = 0; i < kicks; ++i) random_move(cur_.option, cur_.order, cur_.node);
  cur_.schedule = evaluate(cur_.option, cur_.order, cur_.node);
  cur_key_ = key(cur_.schedule);
  stall_ = 0;
}

// An option at least as long as the best makespan so far cannot be part of a better plan. Every
// single move out of such a basin (a job alone on one device for the whole makespan) lengthens
// the schedule at first, so option moves skip these options and restarts take them out.
bool LocalSearch::too_long(size_t j, int o) const {
  const Option& x = opt(p_, j, o);
  return !x.pinned && x.time_s >= best_key_.makespan * (1 - 1e-9);
}

// Jobs in options too long (above) take their least-work option that is shorter.
void LocalSearch::shorten(std::vector<int>& option) const {
  for (size_t j = 0; j < J_; ++j) {
    if (!too_long(j, option[j])) continue;
    int shorter = -1;
    for (size_t o = 0; o < p_.options[j].size(); ++o)
      if (!too_long(j, static_cast<int>(o)) &&
          (shorter < 0 || opt(p_, j, static_cast<int>(o)).min_area < opt(p_, j, shorter).min_area))
        shorter = static_cast<int>(o);
    if (shorter >= 0) option[j] = shorter;
  }
}

// The first improving move of a job ending at the makespan: another option, another node, or
// an earlier list position.
bool LocalSearch::improve_critical() {
  for (size_t i = 0; i < cur_.order.size(); ++i) pos_[static_cast<size_t>(cur_.order[i])] = i;
  for (size_t j : ending_last(cur_.schedule))
    if (change_option(j) || change_node(j) || move_earlier(j) || widen_beside(j)) return true;
  return false;
}

bool LocalSearch::change_option(size_t j) {
  for (size_t o = 0; o < p_.options[j].size(); ++o) {
    if (static_cast<int>(o) == cur_.option[j] || too_long(j, static_cast<int>(o))) continue;
    start_candidate();
    option_[j] = static_cast<int>(o);
    if (try_candidate()) return true;
  }
  return false;
}

bool LocalSearch::change_node(size_t j) {
  const Placement& now = cur_.schedule.jobs[j];
  for (int n : node_choices_[j]) {
    if (n == cur_.node[j] || (now.nodes.size() == 1 && now.nodes[0] == n)) continue;
    start_candidate();
    node_[j] = n;
    if (try_candidate()) return true;
  }
  return false;
}

// To the front, halfway there, or one place earlier.
bool LocalSearch::move_earlier(size_t j) {
  const size_t at = pos_[j];
  for (size_t target : {size_t{0}, at / 2, at > 0 ? at - 1 : 0}) {
    if (target >= at) continue;
    start_candidate();
    order_.erase(order_.begin() + static_cast<std::ptrdiff_t>(at));
    order_.insert(order_.begin() + static_cast<std::ptrdiff_t>(target), static_cast<int>(j));
    if (try_candidate()) return true;
  }
  return false;
}

// A critical job takes its next wider option while a job running beside it on its node takes
// its next narrower one (up to three random neighbours): a wider option alone mostly finds the
// devices it needs busy.
bool LocalSearch::widen_beside(size_t j) {
  if (next_width(j, cur_.option[j], /*wider=*/true) < 0) return false;
  for (int tries = 0; tries < 3; ++tries) {
    const size_t b = partner_beside(j);
    if (b == J_) return false;
    start_candidate();
    if (trade(option_, b, j) && try_candidate()) return true;
  }
  return false;
}

// Up to 16 random moves from the current list, until one improves it; one in four trades
// devices between two jobs (random_trade).
bool LocalSearch::random_moves() {
  for (int tries = 0; tries < 16 && stall_ < local_stall_; ++tries) {
    start_candidate();
    const bool moved =
        rng_() % 4 == 0 ? random_trade(option_) : random_move(option_, order_, node_);
    if (moved && try_candidate()) return true;
  }
  return false;
}

// A random job takes its next narrower option and a job running beside it on its node its next
// wider one. Packing narrow jobs around wide ones needs both at once: either change alone
// leaves devices idle or finds them busy, and lengthens the schedule.
bool LocalSearch::random_trade(std::vector<int>& option) {
  const size_t a = pick_(rng_);
  const size_t b = partner_beside(a);
  return b != J_ && trade(option, a, b);
}

// Job `narrow` takes its next narrower option and job `widen` its next wider one, in `option`;
// false, and `option` unchanged, when either has none.
bool LocalSearch::trade(std::vector<int>& option, size_t narrow, size_t widen) const {
  const int narrower = next_width(narrow, option[narrow], /*wider=*/false);
  const int wider = next_width(widen, option[widen], /*wider=*/true);
  if (narrower < 0 || wider < 0) return false;
  option[narrow] = narrower;
  option[widen] = wider;
  return true;
}

// Job j's option with the next device count above (or below) option o's, the fastest of that
// count; -1 when there is none that is not too long, or j is pinned.
int LocalSearch::next_width(size_t j, int o, bool wider) const {
  const Option& now = opt(p_, j, o);
  if (now.pinned) return -1;
  const int w = now.devices * now.nodes;
  int best = -1, best_w = 0;
  for (size_t c = 0; c < p_.options[j].size(); ++c) {
    const Option& x = p_.options[j][c];
    const int xw = x.devices * x.nodes;
    if (x.pinned || (wider ? xw <= w : xw >= w) || too_long(j, static_cast<int>(c))) continue;
    const bool nearer = best < 0 || (wider ? xw < best_w : xw > best_w);
    if (nearer || (xw == best_w && x.time_s < opt(p_, j, best).time_s)) {
      best = static_cast<int>(c);
      best_w = xw;
    }
  }
  return best;
}

// A random job on job j's node in the current schedule whose run meets j's; J_ when none.
size_t LocalSearch::partner_beside(size_t j) {
  const Placement& c = cur_.schedule.jobs[j];
  if (c.nodes.size() != 1) return J_;
  partners_.clear();
  for (size_t b = 0; b < J_; ++b) {
    const Placement& pl = cur_.schedule.jobs[b];
    if (b != j && pl.nodes.size() == 1 && pl.nodes[0] == c.nodes[0] && pl.start <= c.end &&
        pl.end >= c.start)
      partners_.push_back(b);
  }
  return partners_.empty() ? J_ : partners_[rng_() % partners_.size()];
}

// A random change of the list: one job's option or node, a swap of two jobs, or a job moved
// earlier. False when it cannot change the schedule, so no evaluation is spent on it.
bool LocalSearch::random_move(std::vector<int>& option, std::vector<int>& order,
                              std::vector<int>& node) {
  const int kind = static_cast<int>(rng_() % (N_ > 1 ? 4 : 3));
  if (kind == 3) return random_node(node);
  if (kind == 0) return random_option(option);
  return random_reorder(option, order, node, /*swap=*/kind == 1);
}

// A job on a given node (or the scheduler's choice again).
bool LocalSearch::random_node(std::vector<int>& node) {
  const size_t j = pick_(rng_);
  const auto& choices = node_choices_[j];
  if (choices.empty()) return false;
  const int n = static_cast<int>(rng_() % (choices.size() + 1)) - 1;
  const int to = n < 0 ? -1 : choices[static_cast<size_t>(n)];
  if (to == node[j]) return false;
  node[j] = to;
  return true;
}

bool LocalSearch::random_option(std::vector<int>& option) {
  const size_t j = pick_(rng_);
  if (p_.options[j].size() < 2) return false;
  std::uniform_int_distribution<int> po(0, static_cast<int>(p_.options[j].size()) - 1);
  int o = po(rng_);
  if (o == option[j]) o = (o + 1) % static_cast<int>(p_.options[j].size());
  if (too_long(j, o)) return false;
  option[j] = o;
  return true;
}

// Two list positions: swap their jobs, or move the later one to the earlier place. Identical
// jobs in the same option and node trading places change nothing.
bool LocalSearch::random_reorder(const std::vector<int>& option, std::vector<int>& order,
                                 const std::vector<int>& node, bool swap) {
  const size_t a = pick_(rng_), b = pick_(rng_);
  const size_t ja = static_cast<size_t>(order[a]), jb = static_cast<size_t>(order[b]);
  const bool twins =
      p_.job_class[ja] == p_.job_class[jb] && option[ja] == option[jb] && node[ja] == node[jb];
  if (a == b || (twins && (swap || std::max(a, b) - std::min(a, b) == 1))) return false;
  if (swap) {
    std::swap(order[a], order[b]);
  } else {
    const int j = order[std::max(a, b)];
    order.erase(order.begin() + static_cast<std::ptrdiff_t>(std::max(a, b)));
    order.insert(order.begin() + static_cast<std::ptrdiff_t>(std::min(a, b)), j);
  }
  return true;
}

// Large-neighbourhood step: a window of 4-5 jobs of the epoch's best, across all nodes,
// re-placed exactly (resolve_window). It changes several jobs at once, which single moves reach
// only through worse schedules.
bool LocalSearch::window_step() {
  const auto l0 = Clock::now();
  const Schedule& base = epoch_best_.schedule;
  choose_window(base);
  if (freed_.empty()) return false;
  long budget = 40000;
  WindowResult w = resolve_window(p_, freed_, epoch_best_.option, base,
                                  best_key_.makespan * (1 - 1e-9), tiebreak_, budget);
  ++evaluations_;
  window_seconds_ += seconds_since(l0);
  if (!w.improved) return false;
  cur_key_ = key(epoch_best_.schedule);  // compare with the window's start
  stall_ = 0;
  return accept(w.option, w.order, w.node, w.schedule);
}

// The jobs starting nearest to a critical (or random) job's start; one window in three is the
// schedule's tail instead, the jobs ending last on every node: moving a job that ends the
// makespan to another node often needs jobs there to move or change shape at once, and these
// may start far apart.
void LocalSearch::choose_window(const Schedule& base) {
  size_t centre = pick_(rng_);
  if (rng_() % 2 == 0) {
    const std::vector<size_t> critical = ending_last(base);
    if (!critical.empty()) centre = critical[rng_() % critical.size()];
  }
  const bool tail = rng_() % 3 == 0;
  const double t = tail ? base.makespan : base.jobs[centre].start;
  auto when = [&](int j) {
    const Placement& pl = base.jobs[static_cast<size_t>(j)];
    return tail ? pl.end : pl.start;
  };
  std::iota(by_distance_.begin(), by_distance_.end(), 0);
  // Nearest first, ties broken at random so that repeated windows differ.
  std::shuffle(by_distance_.begin(), by_distance_.end(), rng_);
  std::stable_sort(by_distance_.begin(), by_distance_.end(),
                   [&](int a, int b) { return std::fabs(when(a) - t) < std::fabs(when(b) - t); });
  const size_t k = std::min(J_, size_t{4} + rng_() % 2);
  freed_.clear();
  for (size_t i = 0; i < J_ && freed_.size() < k; ++i) {
    const size_t j = static_cast<size_t>(by_distance_[i]);
    if (!opt(p_, j, epoch_best_.option[j]).pinned) freed_.push_back(static_cast<int>(j));
  }
}

// Ruin and recreate (the list form of large-neighbourhood search) on 2-4 jobs of the epoch's
// best, within its share of the time. Unlike the windows, the other jobs are listed again rather
// than kept at their starts, so freeing a job early in the schedule can shift every later one.
bool LocalSearch::recreate_step() {
  const auto r0 = Clock::now();
  const bool done = ruin_recreate(epoch_best_, 2 + rng_() % 3);
  recreate_seconds_ += seconds_since(r0);
  if (!done || !key(rr_schedule_).better_than(epoch_key_)) return false;
  cur_key_ = epoch_key_;  // compare with the step's start
  stall_ = 0;
  return accept(rr_option_, rr_order_, rr_node_, rr_schedule_);
}

// Takes k related (or random) jobs out of `from`'s list and puts each back, in random order, at
// its best (position, option, node); then justifies the whole list. The result is in rr_option_,
// rr_order_, rr_node_, rr_schedule_; false when nothing was taken or time ran out.
bool LocalSearch::ruin_recreate(const HeuristicResult& from, size_t k) {
  if (!ruin(from, std::min(J_, k))) return false;
  std::shuffle(removed_.begin(), removed_.end(), rng_);
  rr_option_ = from.option;
  rr_node_ = from.node;
  rr_order_.clear();
  for (int j : from.order)
    if (!is_removed_[static_cast<size_t>(j)]) rr_order_.push_back(j);
  for (int j : removed_)
    if (!reinsert(static_cast<size_t>(j))) return false;
  evaluate_into(rr_option_, rr_order_, rr_node_, rr_schedule_);
  justify(rr_option_, rr_order_, rr_node_, rr_schedule_);
  return true;
}

// Chooses the jobs to take out (removed_, is_removed_) one of several ways; the last one only
// on several nodes.
bool LocalSearch::ruin(const HeuristicResult& from, size_t k) {
  removed_.clear();
  std::fill(is_removed_.begin(), is_removed_.end(), 0);
  const auto how = rng_() % (N_ > 1 ? 5 : 3);
  if (how == 0)
    ruin_random(from, k);
  else if (how == 1 || how == 2)
    ruin_near_start(from, k, /*around_critical=*/how == 1);
  else if (how == 3)
    ruin_node(from, k);
  else
    ruin_across_nodes(from, k);
  return !removed_.empty();
}

void LocalSearch::take(const HeuristicResult& from, size_t j, size_t k) {
  if (is_removed_[j] || removed_.size() >= k || opt(p_, j, from.option[j]).pinned) return;
  is_removed_[j] = 1;
  removed_.push_back(static_cast<int>(j));
}

void LocalSearch::ruin_random(const HeuristicResult& from, size_t k) {
  for (size_t tries = 0; tries < 4 * k && removed_.size() < k; ++tries) take(from, pick_(rng_), k);
}

// A critical (or random) job and the jobs nearest to it in start time, on any node: the ones
// whose devices it would take or leave.
void LocalSearch::ruin_near_start(const HeuristicResult& from, size_t k, bool around_critical) {
  const Schedule& base = from.schedule;
  size_t centre = pick_(rng_);
  if (around_critical) {
    const std::vector<size_t> critical = ending_last(base);
    if (!critical.empty()) centre = critical[rng_() % critical.size()];
  }
  const double t = base.jobs[centre].start;
  std::iota(by_distance_.begin(), by_distance_.end(), 0);
  std::shuffle(by_distance_.begin(), by_distance_.end(), rng_);
  std::stable_sort(by_distance_.begin(), by_distance_.end(), [&](int a, int b) {
    return std::fabs(base.jobs[static_cast<size_t>(a)].start - t) <
           std::fabs(base.jobs[static_cast<size_t>(b)].start - t);
  });
  take(from, centre, k);
  for (size_t i = 0; i < J_ && removed_.size() < k; ++i)
    take(from, static_cast<size_t>(by_distance_[i]), k);
}

// Random jobs of one node, mostly of the node that ends last: jobs that share devices over time
// there (a long job's devices are a column that others must fill).
void LocalSearch::ruin_node(const HeuristicResult& from, size_t k) {
  const Schedule& base = from.schedule;
  size_t centre = pick_(rng_);
  if (rng_() % 3 != 0) {
    const std::vector<size_t> critical = ending_last(base);
    if (!critical.empty()) centre = critical.back();
  }
  if (base.jobs[centre].nodes.size() != 1) return;
  const int node_of = base.jobs[centre].nodes[0];
  std::iota(by_distance_.begin(), by_distance_.end(), 0);
  std::shuffle(by_distance_.begin(), by_distance_.end(), rng_);
  for (size_t i = 0; i < J_ && removed_.size() < k; ++i) {
    const Placement& pl = base.jobs[static_cast<size_t>(by_distance_[i])];
    if (pl.nodes.size() == 1 && pl.nodes[0] == node_of)
      take(from, static_cast<size_t>(by_distance_[i]), k);
  }
}

// A job ending the makespan on one node and 2 more jobs than the other ways take, of the other
// nodes, running while it does (nearest in time first): moving a job to another node pays only
// with that node repacked at once, which neither a single move nor one node's ruin can do.
void LocalSearch::ruin_across_nodes(const HeuristicResult& from, size_t k) {
  const Schedule& base = from.schedule;
  std::vector<size_t> critical = ending_last(base);
  std::erase_if(critical, [&](size_t j) { return base.jobs[j].nodes.size() != 1; });
  if (critical.empty()) return;
  const size_t centre = critical[rng_() % critical.size()];
  const int node_of = base.jobs[centre].nodes[0];
  const Placement& c = base.jobs[centre];
  k = std::min(J_, k + 2);
  take(from, centre, k);
  auto distance = [&](int j) {
    const Placement& pl = base.jobs[static_cast<size_t>(j)];
    if (pl.end > c.start && pl.start < c.end) return 0.0;  // overlaps it
    return std::min(std::fabs(pl.start - c.end), std::fabs(c.start - pl.end));
  };
  std::iota(by_distance_.begin(), by_distance_.end(), 0);
  std::shuffle(by_distance_.begin(), by_distance_.end(), rng_);
  std::stable_sort(by_distance_.begin(), by_distance_.end(),
                   [&](int a, int b) { return distance(a) < distance(b); });
  for (size_t i = 0; i < J_ && removed_.size() < k; ++i) {
    const Placement& pl = base.jobs[static_cast<size_t>(by_distance_[i])];
    if (pl.nodes.size() == 1 && pl.nodes[0] != node_of)
      take(from, static_cast<size_t>(by_distance_[i]), k);
  }
}

// Puts job j back into rr_order_ at the (position, option, node) that gives the best partial
// schedule; false when time ran out. Every position on small lists, 24 random ones on big lists
// (one insertion lists positions x options x nodes trials, each linear in the jobs).
bool LocalSearch::reinsert(size_t j) {
  positions_.resize(rr_order_.size() + 1);
  std::iota(positions_.begin(), positions_.end(), size_t{0});
  if (positions_.size() > 32) {
    std::shuffle(positions_.begin(), positions_.end(), rng_);
    positions_.resize(24);
  }
  if (!time_left()) return false;
  Key best_here;
  int best_o = rr_option_[j], best_n = rr_node_[j];
  size_t best_pos = rr_order_.size();
  static const std::vector<int> kAnyNode = {-1};
  const std::vector<int>& nodes = node_choices_[j].empty() ? kAnyNode : node_choices_[j];
  for (size_t o = 0; o < p_.options[j].size(); ++o) {
    if (too_long(j, static_cast<int>(o))) continue;
    rr_option_[j] = static_cast<int>(o);
    for (int n : nodes) {
      rr_node_[j] = n;
      for (size_t at : positions_) {
        trial_order_ = rr_order_;
        trial_order_.insert(trial_order_.begin() + static_cast<std::ptrdiff_t>(at),
                            static_cast<int>(j));
        // A trial that ends a job after the best trial's makespan cannot beat it (makespan
        // first in the key): listing stops there.
        const double cutoff =
            best_here.makespan +
            2e-9 * std::max(1.0, std::isfinite(best_here.makespan) ? best_here.makespan : 1.0);
        if (!evaluate_into(rr_option_, trial_order_, rr_node_, trial_, cutoff)) continue;
        const Key trial_key = key(trial_);
        if (!trial_key.better_than(best_here)) continue;
        best_here = trial_key;
        best_o = static_cast<int>(o);
        best_n = n;
        best_pos = at;
      }
    }
  }
  rr_option_[j] = best_o;
  rr_node_[j] = best_n;
  rr_order_.insert(rr_order_.begin() + static_cast<std::ptrdiff_t>(best_pos), static_cast<int>(j));
  return true;
}

// The candidate starts as a copy of the current list.
void LocalSearch::start_candidate() {
  option_ = cur_.option;
  order_ = cur_.order;
  node_ = cur_.node;
}

bool LocalSearch::try_candidate() {
  evaluate_into(option_, order_, node_, candidate_);
  justify(option_, order_, node_, candidate_);
  ++since_best_;
  ++since_epoch_best_;
  return accept(option_, order_, node_, candidate_);
}

// Into reused storage (list_schedule_on_into): allocation was a large share of the search's
// time. On one node the node choice is free (all -1).
bool LocalSearch::evaluate_into(const std::vector<int>& option, const std::vector<int>& order,
                                const std::vector<int>& node, Schedule& out, double cutoff) {
  ++evaluations_;
  return list_schedule_on_into(p_, option, order, N_ > 1 ? node : any_node_, out, scratch_, cutoff);
}

Schedule LocalSearch::evaluate(const std::vector<int>& option, const std::vector<int>& order,
                               const std::vector<int>& node) {
  Schedule s;
  evaluate_into(option, order, node, s);
  return s;
}

// Forward-backward improvement (double justification, as in list-scheduling heuristics for
// project scheduling): list the jobs again latest end first, which in mirrored time is a
// schedule no longer than this one, then forward again in the order of its mirrored starts,
// each job on the node it had. A job listed in the start order of a feasible schedule starts no
// later there, so neither pass lengthens the schedule; together they pack the jobs tighter from
// both ends. Takes the result when it is better.
void LocalSearch::justify(const std::vector<int>& option, std::vector<int>& order,
                          std::vector<int>& node, Schedule& s) {
  if (!justify_on_ || !std::isfinite(s.makespan)) return;
  list_by_end_desc(s);
  list_schedule_on_into(p_, option, j_order_, j_node_, backward_, scratch_);
  ++evaluations_;
  if (!std::isfinite(backward_.makespan)) return;
  list_by_end_desc(backward_);
  list_schedule_on_into(p_, option, j_order_, j_node_, forward_, scratch_);
  ++evaluations_;
  if (!key(forward_).better_than(key(s))) return;
  order = j_order_;
  node = j_node_;
  std::swap(s, forward_);
}

// j_order_: the jobs latest end first; j_node_: each job's node (-1 on several).
void LocalSearch::list_by_end_desc(const Schedule& s) {
  std::iota(j_order_.begin(), j_order_.end(), 0);
  std::stable_sort(j_order_.begin(), j_order_.end(), [&](int a, int b) {
    return s.jobs[static_cast<size_t>(a)].end > s.jobs[static_cast<size_t>(b)].end;
  });
  for (size_t j = 0; j < J_; ++j)
    j_node_[j] = s.jobs[j].nodes.size() == 1 ? s.jobs[j].nodes[0] : -1;
}

// Takes the candidate as the current list when it beats it (s keeps the old schedule's storage
// for the next candidate), and as the epoch's and the overall best when it beats those.
bool LocalSearch::accept(const std::vector<int>& option, const std::vector<int>& order,
                         const std::vector<int>& node, Schedule& s) {
  const Key k = key(s);
  if (!k.better_than(cur_key_)) {
    ++stall_;
    return false;
  }
  cur_key_ = k;
  cur_.option = option;
  cur_.order = order;
  cur_.node = node;
  std::swap(cur_.schedule, s);
  stall_ = 0;
  auto record = [&](HeuristicResult& to) {
    to.option = cur_.option;
    to.order = cur_.order;
    to.node = cur_.node;
    to.schedule = cur_.schedule;
  };
  if (cur_key_.better_than(epoch_key_)) {
    epoch_key_ = cur_key_;
    record(epoch_best_);
    since_epoch_best_ = 0;
  }
  if (cur_key_.better_than(best_key_)) {
    best_key_ = cur_key_;
    record(best_);
    since_best_ = 0;
    improved_any_ = true;
    if (opts_.on_improvement) opts_.on_improvement(best_.schedule.makespan);
  }
  return true;
}

}  // namespace

HeuristicResult local_search(const Prepared& p, HeuristicResult start,
                             const HeuristicOptions& opts) {
  const auto t0 = Clock::now();
  const size_t J = p.num_jobs();
  if (J == 0) return start;
  if (start.node.size() != J) start.node.assign(J, -1);
  return LocalSearch(p, std::move(start), opts, t0).run();
}

HeuristicResult heuristic_schedule(const Prepared& p, double lower_bound,
                                   const HeuristicOptions& opts) {
  const auto t0 = Clock::now();
  HeuristicResult best;
  Key best_key;
  auto consider = [&](std::vector<int> option, std::vector<int> order, std::string method) {
    Schedule s = list_schedule(p, option, order);
    ++best.evaluations;
    const Key k = key_of(p, s, Tiebreak::sum_of_ends);
    if (k.better_than(best_key)) {
      best_key = k;
      best.schedule = std::move(s);
      best.option = std::move(option);
      best.order = std::move(order);
      best.method = std::move(method);
    }
  };
  const double factors[] = {1.0, 1.05, 1.1, 1.2, 1.35, 1.5, 2.0, 3.0, kInfinity};
  for (double f : factors) {
    const std::vector<int> option =
        std::isfinite(f) ? allot_within(p, f * lower_bound) : allot_within(p, 0.0);
    const std::string name = std::isfinite(f) ? fmt::format("area{:g}", f) : "fastest";
    consider(option, lpt_order(p, option), name + "+lpt");
    consider(option, area_order(p, option), name + "+work");
    consider(option, wide_order(p, option), name + "+wide");
  }
  // Greedy finish-time allotment, in the LPT order of the least-work options.
  const std::vector<int> least = allot_within(p, kInfinity);
  const std::vector<int> base_order = lpt_order(p, least);
  for (double slack : {0.0, 0.1, 0.25, 0.5, 1.0, kInfinity}) {
    const std::vector<int> option = greedy_finish(p, base_order, slack);
    consider(option, base_order, fmt::format("greedy{:g}", slack));
    consider(option, lpt_order(p, option), fmt::format("greedy{:g}+lpt", slack));
  }
  if (!opts.local_search) return best;
  HeuristicOptions ls = opts;
  ls.time_limit_s = std::max(0.0, opts.time_limit_s - seconds_since(t0));
  return local_search(p, std::move(best), ls);
}

}  // namespace saturn::solver
