#include "solver/clock.hpp"

#include <time.h>

#include "solver/problem.hpp"

namespace saturn::solver {

namespace {

thread_local ClockBasis current_basis = ClockBasis::wall;

}  // namespace

std::string to_string(ClockBasis basis) {
  return basis == ClockBasis::wall ? "wall" : "cpu";
}

ClockBasis parse_clock_basis(const std::string& text) {
  if (text == "wall") return ClockBasis::wall;
  if (text == "cpu") return ClockBasis::thread_cpu;
  throw SolverError("clock basis '" + text + "' is neither 'wall' nor 'cpu'");
}

SolverClock::time_point SolverClock::now() noexcept {
  if (current_basis == ClockBasis::wall)
    return time_point(
        std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch()));
  timespec ts{};
  // ScopedClockBasis checked that this clock reads on this thread.
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

ClockBasis SolverClock::basis() noexcept {
  return current_basis;
}

ScopedClockBasis::ScopedClockBasis(ClockBasis basis) : previous_(current_basis) {
  timespec ts{};
  if (basis == ClockBasis::thread_cpu && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    throw SolverError(
        "clock basis 'cpu': this thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) "
        "cannot be read");
  current_basis = basis;
}

ScopedClockBasis::~ScopedClockBasis() {
  current_basis = previous_;
}

}  // namespace saturn::solver
