// Plans you can reproduce (issue 33): under the work clock (SolveOptions::clock, the default)
// the same instance, options and seed give the same plan, byte for byte, whatever else runs on
// the machine: solved twice, then once more while two threads spin on the cores.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "solver/plan_io.hpp"
#include "solver/solve.hpp"
#include "solver/synthetic.hpp"
#include "tests/solver/instances.hpp"

using namespace saturn::solver;

namespace {

// Spins `threads` threads until destroyed: a machine as loaded as a busy neighbour makes it.
class BusyLoop {
 public:
  explicit BusyLoop(int threads) {
    for (int i = 0; i < threads; ++i)
      spinners_.emplace_back([this] {
        volatile unsigned long sink = 0;
        while (!stop_.load(std::memory_order_relaxed)) sink = sink + 1;
      });
  }
  ~BusyLoop() {
    stop_ = true;
    for (auto& t : spinners_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> spinners_;
};

Plan plan_of(const Problem& problem, double time_limit_s, unsigned seed, int threads = 1) {
  SolveOptions o;
  o.time_limit_s = time_limit_s;
  o.seed = seed;
  o.threads = threads;
  return solve(problem, o);
}

std::string plan_text(const Problem& problem, double time_limit_s, unsigned seed, int threads = 1) {
  const Plan plan = plan_of(problem, time_limit_s, seed, threads);
  EXPECT_EQ(plan.solver.clock, "work");
  EXPECT_FALSE(plan.solver.wall_capped);
  return plan_to_json(problem, plan).dump(2);
}

struct Instance {
  std::string name;
  Problem problem;
};

std::vector<Instance> instances() {
  std::vector<Instance> out;
  out.push_back(
      {"txt 12 jobs on 1x8", synthetic::family("txt", parse_cluster_spec("1x8:40GiB"), 12, 1)});
  out.push_back(
      {"mixed 20 jobs on 2x8", synthetic::family("mixed", parse_cluster_spec("2x8:40GiB"), 20, 2)});
  saturn::solver::testing::RandomSpec spec;
  spec.jobs = 14;
  spec.cluster = "4+8";
  spec.multi_node = true;
  out.push_back({"random 14 jobs on 4+8", saturn::solver::testing::random_instance(5, spec)});
  return out;
}

}  // namespace

TEST(ReproduciblePlans, SameInstanceSamePlanOnAnyLoad) {
  for (const Instance& in : instances()) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(in.name + ", " + std::to_string(threads) + " thread(s)");
      const std::string first = plan_text(in.problem, 1.0, 3, threads);
      EXPECT_EQ(plan_text(in.problem, 1.0, 3, threads), first);
      {
        const BusyLoop busy(2);
        EXPECT_EQ(plan_text(in.problem, 1.0, 3, threads), first);
      }
    }
  }
}

// Thread 0 of a portfolio is the one-thread search: two threads never plan worse.
TEST(ReproduciblePlans, TwoThreadsPlanNoWorse) {
  for (const Instance& in : instances()) {
    SCOPED_TRACE(in.name);
    const Plan one = plan_of(in.problem, 1.0, 3, 1), two = plan_of(in.problem, 1.0, 3, 2);
    EXPECT_LE(two.makespan_s, one.makespan_s);
    EXPECT_GE(two.lower_bound_s, one.lower_bound_s);
  }
}

// Another seed is another search: the plans may differ, but each is reproducible too.
TEST(ReproduciblePlans, TheSeedIsPartOfTheInput) {
  const Instance in = instances()[1];
  EXPECT_EQ(plan_text(in.problem, 0.5, 7), plan_text(in.problem, 0.5, 7));
}
