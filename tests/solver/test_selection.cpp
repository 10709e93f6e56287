// Planning for model selection (selection.hpp) and the selection simulator (selection_sim.hpp).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "instances.hpp"
#include "solver/selection.hpp"
#include "solver/selection_sim.hpp"

using namespace saturn::solver;
using saturn::solver::testing::cfg;

namespace {

SelectionRule halving(long long r0, double eta, int rungs) {
  SelectionRule r;
  r.method = SelectionMethod::successive_halving;
  r.min_steps = r0;
  r.reduction_factor = eta;
  r.max_rungs = rungs;
  return r;
}

// 8 jobs of 800 steps on 4 devices; two speeds, so reports at a rung arrive at different times.
Problem sweep() {
  Problem p;
  p.cluster = parse_cluster_spec("1x4");
  for (int i = 0; i < 8; ++i) {
    const double t = i % 2 ? 8000.0 : 5000.0;
    Job j{fmt::format("j{}", i), {}, 800};
    j.configs.push_back(cfg("ddp", 1, 1, t));
    j.configs.push_back(cfg("fsdp", 2, 1, 0.55 * t));
    j.configs.push_back(cfg("fsdp", 4, 1, 0.3 * t));
    p.jobs.push_back(j);
  }
  return p;
}

SelectionSimOptions sim_options(SelectionMethod method, unsigned seed) {
  SelectionSimOptions o;
  o.rule = halving(50, 2, 3);  // rungs at 50, 100, 200 of 800 steps
  o.rule.method = method;
  o.metric_seed = seed;
  o.replan.restart_cost_s = 60;
  o.replan.solve.time_limit_s = 0.1;
  o.replan.solve.use_milp = false;
  return o;
}

// Successive halving recomputed from the metrics alone: at rung k the best
// max(1, floor(n / eta)) of the n survivors continue (lower loss, then lower index).
std::vector<int> halving_by_hand(int jobs, const SelectionRule& rule, unsigned seed) {
  std::vector<int> stopped(static_cast<size_t>(jobs), -1), alive;
  for (int j = 0; j < jobs; ++j) alive.push_back(j);
  for (int k = 0; k < rule.max_rungs; ++k) {
    std::sort(alive.begin(), alive.end(), [&](int a, int b) {
      const double ma = selection_metric(seed, a, k), mb = selection_metric(seed, b, k);
      return ma != mb ? ma < mb : a < b;
    });
    const size_t keep = std::max<size_t>(
        1,
        static_cast<size_t>(std::floor(static_cast<double>(alive.size()) / rule.reduction_factor)));
    for (size_t i = keep; i < alive.size(); ++i) stopped[static_cast<size_t>(alive[i])] = k;
    alive.resize(keep);
  }
  return stopped;
}

int rank_among(const std::vector<int>& jobs, int job, int rung, unsigned seed) {
  int better = 0;
  for (int other : jobs) {
    const double mo = selection_metric(seed, other, rung), mj = selection_metric(seed, job, rung);
    better += mo < mj || (mo == mj && other < job);
  }
  return better;
}

}  // namespace

TEST(Selection, RungsKeepAndExpectedWork) {
  const SelectionRule r = halving(100, 2, 3);
  EXPECT_EQ(rung_steps(r, 1000), (std::vector<long long>{100, 200, 400}));
  EXPECT_EQ(rung_steps(r, 150), (std::vector<long long>{100, 150, 150}));  // capped at the end
  EXPECT_EQ(rung_keep(r, 12), 6);
  EXPECT_EQ(rung_keep(r, 3), 1);
  EXPECT_EQ(rung_keep(r, 1), 1);
  EXPECT_EQ(rung_keep(halving(1, 3, 2), 8), 2);
  // 100 steps surely, 100 with 1/2, 200 with 1/4, the last 600 with 1/8.
  EXPECT_DOUBLE_EQ(expected_remaining_steps(r, 1000), 100 + 50 + 50 + 75);
  EXPECT_DOUBLE_EQ(expected_work_fraction(r, 1000), 0.275);
  // Promoted past rungs 0 and 1, at step 200: the next 200 surely, the last 600 with 1/2.
  EXPECT_DOUBLE_EQ(expected_remaining_steps(r, 1000, 200, 2), 200 + 300);
  // Waiting at rung 1 for the decision: everything after it is conditional.
  EXPECT_DOUBLE_EQ(expected_remaining_steps(r, 1000, 200, 1), 100 + 150);
  // Past the last rung: the rest runs surely.
  EXPECT_DOUBLE_EQ(expected_work_fraction(r, 1000, 500, 3), 1.0);
  EXPECT_DOUBLE_EQ(expected_work_fraction(r, 1000, 1000, 3), 1.0);

  Problem p = sweep();
  const Problem e = expected_work_problem(p, halving(50, 2, 3));
  // 50 + 25 + 25 + 600/8 = 175 of 800 steps.
  EXPECT_DOUBLE_EQ(e.jobs[1].configs[2].time_s, p.jobs[1].configs[2].time_s * 175.0 / 800.0);
  EXPECT_EQ(e.jobs[1].steps, 800);

  EXPECT_THROW(check_rule(halving(0, 2, 3)), SolverError);
  EXPECT_THROW(check_rule(halving(10, 1.0, 3)), SolverError);
  EXPECT_THROW(check_rule(halving(10, 2, 0)), SolverError);
  EXPECT_THROW(rung_steps(r, 0), SolverError);
  EXPECT_THROW(expected_remaining_steps(r, 1000, 1200, 0), SolverError);
  p.jobs[3].steps = 0;
  try {
    expected_work_problem(p, r);
    FAIL() << "a job without steps was accepted";
  } catch (const SolverError& err) {
    EXPECT_NE(std::string(err.what()).find("'j3'"), std::string::npos) << err.what();
  }
}

TEST(SelectionSim, HalvingInsideAndOutsideStopWhatTheRuleSays) {
  const Problem p = sweep();
  for (unsigned seed : {1u, 2u, 3u}) {
    SelectionSimOptions o = sim_options(SelectionMethod::successive_halving, seed);
    const std::vector<int> expect = halving_by_hand(8, o.rule, seed);
    ASSERT_EQ(std::count(expect.begin(), expect.end(), -1), 1);  // 8 -> 4 -> 2 -> 1
    o.policy = SelectionSimOptions::Policy::outside;
    const SelectionSimResult out = simulate_selection(p, o);
    EXPECT_EQ(out.stopped_rung, expect) << "outside, seed " << seed;
    o.policy = SelectionSimOptions::Policy::inside;
    o.speculate = true;  // pending decisions train on: the same decisions
    EXPECT_EQ(simulate_selection(p, o).stopped_rung, expect) << "speculating, seed " << seed;
    o.speculate = false;
    o.policy = SelectionSimOptions::Policy::inside;
    for (auto planning :
         {SelectionSimOptions::Planning::expected_work, SelectionSimOptions::Planning::full_steps,
          SelectionSimOptions::Planning::next_rung}) {
      o.planning = planning;
      const SelectionSimResult in = simulate_selection(p, o);
      EXPECT_EQ(in.stopped_rung, expect) << "inside " << to_string(planning) << ", seed " << seed;
      EXPECT_EQ(in.decisions.size(), 8u + 4u + 2u);
      EXPECT_GT(in.selection_time_s, 0.0);
      // Decisions are taken when they are determined: a promotion at rung k needs the job's
      // worst possible rank within the keep, a stop its best possible rank beyond it, given
      // only the reports that had arrived.
      const int reaching[] = {8, 4, 2};
      for (const SelectionDecision& d : in.decisions) {
        const auto& rep = in.reports[static_cast<size_t>(d.rung)];
        const std::vector<int> seen(rep.begin(), rep.begin() + d.reported);
        ASSERT_NE(std::find(seen.begin(), seen.end(), d.job), seen.end());
        const int keep = reaching[d.rung] / 2;
        const int rank = rank_among(seen, d.job, d.rung, seed);
        if (d.promoted)
          EXPECT_LE(rank + (reaching[d.rung] - d.reported) + 1, keep);
        else
          EXPECT_GT(rank + 1, keep);
      }
      // ...and no later: at the first report after which the rule determines it.
      for (const SelectionDecision& d : in.decisions) {
        const auto& rep = in.reports[static_cast<size_t>(d.rung)];
        const int keep = reaching[d.rung] / 2;
        int m = 1;
        for (; m <= static_cast<int>(rep.size()); ++m) {
          const std::vector<int> seen(rep.begin(), rep.begin() + m);
          if (std::find(seen.begin(), seen.end(), d.job) == seen.end()) continue;
          const int rank = rank_among(seen, d.job, d.rung, seed);
          if (rank + (reaching[d.rung] - m) + 1 <= keep || rank + 1 > keep) break;
        }
        ASSERT_LE(m, static_cast<int>(rep.size()));
        EXPECT_DOUBLE_EQ(d.time_s,
                         in.report_times[static_cast<size_t>(d.rung)][static_cast<size_t>(m - 1)])
            << "job " << d.job << " rung " << d.rung;
      }
    }
  }
}

TEST(SelectionSim, AshaPromotesByTheResultsSoFar) {
  const Problem p = sweep();
  for (unsigned seed : {1u, 2u, 3u}) {
    SelectionSimOptions o = sim_options(SelectionMethod::asha, seed);
    const SelectionSimResult in = simulate_selection(p, o);
    std::vector<int> promoted_at(3, 0);
    for (const SelectionDecision& d : in.decisions) {
      const auto& rep = in.reports[static_cast<size_t>(d.rung)];
      const std::vector<int> seen(rep.begin(), rep.begin() + d.reported);
      const int rank = rank_among(seen, d.job, d.rung, seed);
      if (d.promoted) {
        ++promoted_at[static_cast<size_t>(d.rung)];
        // In the top floor(n / eta) of the n results so far (at least 1 once the rung closed).
        EXPECT_LT(rank, std::max(1, d.reported / 2)) << "job " << d.job << " rung " << d.rung;
      } else {
        // Stopped only when the rung is closed: all its reports are in, and it is not in the
        // top max(1, floor(n / eta)).
        EXPECT_EQ(d.reported, static_cast<int>(rep.size()));
        EXPECT_GE(rank, std::max(1, d.reported / 2));
      }
    }
    // Everyone reaching a rung was promoted from the one below.
    EXPECT_EQ(in.reports[0].size(), 8u);
    EXPECT_EQ(static_cast<int>(in.reports[1].size()), promoted_at[0]);
    EXPECT_EQ(static_cast<int>(in.reports[2].size()), promoted_at[1]);
    const long survivors = std::count(in.stopped_rung.begin(), in.stopped_rung.end(), -1);
    EXPECT_EQ(survivors, promoted_at[2]);
    EXPECT_GE(survivors, 1);
    // Outside the batch a tuner sees whole rungs: successive halving.
    o.policy = SelectionSimOptions::Policy::outside;
    EXPECT_EQ(simulate_selection(p, o).stopped_rung, halving_by_hand(8, o.rule, seed));
  }
}

TEST(SelectionSim, RejectsRungsPastAJobsEnd) {
  Problem p = sweep();
  p.jobs[2].steps = 150;  // its last rung (200) would be past its end
  SelectionSimOptions o = sim_options(SelectionMethod::successive_halving, 1);
  EXPECT_THROW(simulate_selection(p, o), SolverError);
}

// The bound on sweep() for a stop pattern worked by hand (rungs at 50, 100, 200 of 800 steps;
// even jobs 5000 s, odd 8000 s on one device; the fewest device-seconds per step are ddp x1's
// t/800, the fastest fsdp x4's 0.3 t/800): jobs 0-3 stop at rung 0, 4-5 at rung 1, 6 at rung 2,
// 7 runs to the end.
//  area: (50 (5000 + 8000 + 5000 + 8000) + 100 (5000 + 8000) + 200 * 5000 + 800 * 8000) / 800
//        = 12500 device-seconds over 4 devices = 3125 s;
//  longest: job 7, 0.3 * 8000 = 2400 s;
//  last decision: jobs 6 and 7 reach rung 2, keep 1, so both must report: job 7 gets there in
//  0.3 * 8000 / 4 = 600 s at the soonest, then runs 600 steps, 1800 s: 2400 s.
TEST(SelectionSim, LowerBoundWorkedByHand) {
  const Problem p = sweep();
  const SelectionRule rule = halving(50, 2, 3);
  EXPECT_NEAR(selection_time_lower_bound(p, rule, {0, 0, 0, 0, 1, 1, 2, -1}), 3125.0, 1e-9);
  // On two devices (fsdp x4 gone, the fastest is fsdp x2's 0.55 t/800 per step): area
  // 12500 / 2 = 6250 s; job 7's whole run 4400 s; the decision at 1100 s, then 3300 s.
  Problem two = p;
  two.cluster = parse_cluster_spec("1x2");
  for (Job& j : two.jobs) j.configs.pop_back();
  EXPECT_NEAR(selection_time_lower_bound(two, rule, {0, 0, 0, 0, 1, 1, 2, -1}), 6250.0, 1e-9);
  EXPECT_THROW(selection_time_lower_bound(p, rule, {0, 0, 0}), SolverError);
  EXPECT_THROW(selection_time_lower_bound(p, rule, {0, 0, 0, 0, 1, 1, 3, -1}), SolverError);
  SelectionRule asha = rule;
  asha.method = SelectionMethod::asha;
  EXPECT_THROW(selection_time_lower_bound(p, asha, {0, 0, 0, 0, 1, 1, 2, -1}), SolverError);
}

// No simulated policy beats the bound (the bound leaves out restarts and solve time).
TEST(SelectionSim, LowerBoundHoldsForBothPolicies) {
  const Problem p = sweep();
  for (unsigned seed : {1u, 2u, 3u}) {
    SelectionSimOptions o = sim_options(SelectionMethod::successive_halving, seed);
    for (auto policy :
         {SelectionSimOptions::Policy::outside, SelectionSimOptions::Policy::inside}) {
      o.policy = policy;
      const SelectionSimResult r = simulate_selection(p, o);
      const double bound = selection_time_lower_bound(p, o.rule, r.stopped_rung);
      EXPECT_GT(bound, 0.0);
      EXPECT_LE(bound, r.selection_time_s * (1 + 1e-12)) << to_string(policy) << ", seed " << seed;
    }
  }
}
