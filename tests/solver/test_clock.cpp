// The solver's clock basis: wall time by default outside a solve, the solving thread's CPU time
// or its counted work on request (SolveOptions::clock: work by default, bench_solver --clock).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "solver/clock.hpp"
#include "solver/problem.hpp"

using namespace saturn::solver;

namespace {

// Seconds the solver clock advances while this thread sleeps for `sleep`.
double advance_while_sleeping(std::chrono::milliseconds sleep) {
  const auto t0 = SolverClock::now();
  std::this_thread::sleep_for(sleep);
  return seconds_since(t0);
}

}  // namespace

TEST(SolverClock, WallByDefaultCountsSleep) {
  EXPECT_EQ(SolverClock::basis(), ClockBasis::wall);
  EXPECT_GE(advance_while_sleeping(std::chrono::milliseconds(200)), 0.19);
}

TEST(SolverClock, ThreadCpuBasisIgnoresSleepAndCountsWork) {
  {
    const ScopedClockBasis cpu(ClockBasis::thread_cpu);
    EXPECT_EQ(SolverClock::basis(), ClockBasis::thread_cpu);
    // A sleeping thread uses (almost) no CPU: a wall limit would count these 300 ms.
    EXPECT_LT(advance_while_sleeping(std::chrono::milliseconds(300)), 0.05);
    // Busy work advances it.
    const auto t0 = SolverClock::now();
    volatile double sink = 0;
    while (seconds_since(t0) < 0.05) sink = sink + 1.0;
    EXPECT_GE(seconds_since(t0), 0.05);
  }
  // The basis ends with its scope.
  EXPECT_EQ(SolverClock::basis(), ClockBasis::wall);
}

// The work basis counts units of work (ticks, and one per read), never seconds: sleeping moves
// it by the one read, ticks by kWorkUnitNs each; the wall cap makes every deadline pass.
TEST(SolverClock, WorkBasisCountsWorkNotTime) {
  {
    const ScopedClockBasis work(ClockBasis::work);
    EXPECT_EQ(SolverClock::basis(), ClockBasis::work);
    EXPECT_EQ(SolverClock::work(), 0);
    const auto t0 = SolverClock::now();  // one unit
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_EQ((SolverClock::now() - t0).count(), kWorkUnitNs);  // the second read only
    SolverClock::tick(1000);
    EXPECT_EQ((SolverClock::now() - t0).count(), 1002 * kWorkUnitNs);
    EXPECT_EQ(SolverClock::work(), 1003);
    EXPECT_FALSE(SolverClock::capped());
    EXPECT_EQ(SolverClock::backend_limit_s(5.0), 1e7);  // no cap: the backend runs to its end
    {
      // A nested basis starts its own count and gives the outer one back.
      const ScopedClockBasis inner(ClockBasis::work, 0.05);
      EXPECT_EQ(SolverClock::work(), 0);
      EXPECT_LE(SolverClock::backend_limit_s(5.0), 0.05);
      const auto deadline = SolverClock::now() + std::chrono::seconds(1000);
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
      for (int i = 0; i < 64; ++i) SolverClock::now();  // the cap is looked at every 64 reads
      EXPECT_TRUE(SolverClock::capped());
      EXPECT_GT(SolverClock::now(), deadline);
      EXPECT_EQ(SolverClock::backend_limit_s(5.0), 0.0);
    }
    EXPECT_EQ(SolverClock::work(), 1003);
    EXPECT_FALSE(SolverClock::capped());
  }
  EXPECT_EQ(SolverClock::basis(), ClockBasis::wall);
}

TEST(SolverClock, ParsesTheBasisAndNamesABadOne) {
  EXPECT_EQ(parse_clock_basis("wall"), ClockBasis::wall);
  EXPECT_EQ(parse_clock_basis("cpu"), ClockBasis::thread_cpu);
  EXPECT_EQ(parse_clock_basis("work"), ClockBasis::work);
  EXPECT_EQ(to_string(ClockBasis::thread_cpu), "cpu");
  EXPECT_EQ(to_string(ClockBasis::work), "work");
  try {
    parse_clock_basis("gpu");
    FAIL() << "no error for clock basis 'gpu'";
  } catch (const SolverError& e) {
    EXPECT_NE(std::string(e.what()).find("'gpu'"), std::string::npos) << e.what();
  }
}
