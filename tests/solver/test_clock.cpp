// The solver's clock basis: wall time by default, the solving thread's CPU time on request
// (SolveOptions::clock, bench_solver --clock cpu).
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

TEST(SolverClock, ParsesTheBasisAndNamesABadOne) {
  EXPECT_EQ(parse_clock_basis("wall"), ClockBasis::wall);
  EXPECT_EQ(parse_clock_basis("cpu"), ClockBasis::thread_cpu);
  EXPECT_EQ(to_string(ClockBasis::thread_cpu), "cpu");
  try {
    parse_clock_basis("gpu");
    FAIL() << "no error for clock basis 'gpu'";
  } catch (const SolverError& e) {
    EXPECT_NE(std::string(e.what()).find("'gpu'"), std::string::npos) << e.what();
  }
}
