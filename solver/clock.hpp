// The clock every time limit of a solve counts on. By default it is the wall clock (what a user
// waits for). For measurement on a shared machine it can count the solving thread's CPU time
// instead (CLOCK_THREAD_CPUTIME_ID), so that a "10 s" solve gets 10 s of a core however loaded
// the machine is and runs of the same seed are comparable (SolveOptions::clock, bench_solver
// --clock cpu). The solver is single-threaded, so its thread's CPU time is all it uses; the
// MILP backends' own time limits (GLPK's tm_lim, CBC's seconds) stay on the wall clock as a
// safety net, their deadline check in the callback follows this clock.
#pragma once

#include <chrono>
#include <string>

namespace saturn::solver {

enum class ClockBasis { wall, thread_cpu };

std::string to_string(ClockBasis basis);
// "wall" or "cpu"; throws SolverError otherwise.
ClockBasis parse_clock_basis(const std::string& text);

// A chrono clock whose basis is set per thread (ScopedClockBasis); wall by default. Time points
// of one basis must not be compared with those of the other: set the basis once per solve.
struct SolverClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<SolverClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
  static ClockBasis basis() noexcept;
};

// Sets the calling thread's SolverClock basis until it goes out of scope (solve() holds one for
// the duration of a solve).
class ScopedClockBasis {
 public:
  explicit ScopedClockBasis(ClockBasis basis);
  ~ScopedClockBasis();
  ScopedClockBasis(const ScopedClockBasis&) = delete;
  ScopedClockBasis& operator=(const ScopedClockBasis&) = delete;

 private:
  ClockBasis previous_;
};

// Seconds on SolverClock since t0.
inline double seconds_since(SolverClock::time_point t0) {
  return std::chrono::duration<double>(SolverClock::now() - t0).count();
}

}  // namespace saturn::solver
