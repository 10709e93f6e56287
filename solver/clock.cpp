#include "solver/clock.hpp"

#include <time.h>

#include <algorithm>

#include "solver/problem.hpp"

namespace saturn::solver {

namespace {

// The calling thread's clock: its basis, and under the work basis the units counted, the wall
// cap (0: none) and whether it was reached.
struct ThreadClock {
  ClockBasis basis = ClockBasis::wall;
  std::int64_t work = 0;
  std::int64_t reads = 0;  // clock reads, for looking at the wall cap every 64th
  bool capped = false;
  std::int64_t cap_ns = 0;
  std::chrono::steady_clock::time_point wall_start;
};
thread_local ThreadClock current;

// Past the wall cap, the work clock jumps this far ahead: beyond any deadline of a solve.
constexpr std::int64_t kCappedNs = std::int64_t{1000000} * 1000000000;  // 10^6 s

std::chrono::nanoseconds wall_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              t0);
}

}  // namespace

std::string to_string(ClockBasis basis) {
  switch (basis) {
    case ClockBasis::wall:
      return "wall";
    case ClockBasis::thread_cpu:
      return "cpu";
    case ClockBasis::work:
      return "work";
  }
  return "wall";
}

ClockBasis parse_clock_basis(const std::string& text) {
  if (text == "wall") return ClockBasis::wall;
  if (text == "cpu") return ClockBasis::thread_cpu;
  if (text == "work") return ClockBasis::work;
  throw SolverError("clock basis '" + text + "' is not one of 'work', 'wall', 'cpu'");
}

SolverClock::time_point SolverClock::now() noexcept {
  ThreadClock& c = current;
  if (c.basis == ClockBasis::work) {
    // A read is a unit of work too, so a loop that only watches the clock still ends. The wall
    // cap is looked at every 64 reads (a steady_clock read costs more than the rest).
    ++c.work;
    if (!c.capped && c.cap_ns > 0 && (++c.reads & 63) == 0 &&
        wall_since(c.wall_start).count() > c.cap_ns)
      c.capped = true;
    return time_point(duration(c.work * kWorkUnitNs + (c.capped ? kCappedNs : 0)));
  }
  if (c.basis == ClockBasis::wall)
    return time_point(
        std::chrono::duration_cast<duration>(std::chrono::steady_clock::now().time_since_epoch()));
  timespec ts{};
  // ScopedClockBasis checked that this clock reads on this thread.
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return time_point(std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec));
}

ClockBasis SolverClock::basis() noexcept {
  return current.basis;
}

void SolverClock::tick(std::int64_t units) noexcept {
  current.work += units;
}

std::int64_t SolverClock::work() noexcept {
  return current.work;
}

bool SolverClock::capped() noexcept {
  return current.capped;
}

double SolverClock::backend_limit_s(double limit_s) noexcept {
  const ThreadClock& c = current;
  if (c.basis != ClockBasis::work) return limit_s;
  if (c.cap_ns == 0) return 1e7;
  if (c.capped) return 0;
  return std::max(0.0, static_cast<double>(c.cap_ns - wall_since(c.wall_start).count()) * 1e-9);
}

void SolverClock::backend_timed_out() noexcept {
  if (current.basis == ClockBasis::work) current.capped = true;
}

ScopedClockBasis::ScopedClockBasis(ClockBasis basis, double wall_cap_s)
    : basis_(current.basis),
      work_(current.work),
      capped_(current.capped),
      cap_ns_(current.cap_ns),
      wall_start_(current.wall_start) {
  timespec ts{};
  if (basis == ClockBasis::thread_cpu && clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
    throw SolverError(
        "clock basis 'cpu': this thread's CPU clock (CLOCK_THREAD_CPUTIME_ID) "
        "cannot be read");
  current.basis = basis;
  current.work = 0;
  current.reads = 0;
  current.capped = false;
  current.cap_ns = wall_cap_s > 0 ? static_cast<std::int64_t>(wall_cap_s * 1e9) : 0;
  current.wall_start = std::chrono::steady_clock::now();
}

ScopedClockBasis::~ScopedClockBasis() {
  current.basis = basis_;
  current.work = work_;
  current.capped = capped_;
  current.cap_ns = cap_ns_;
  current.wall_start = wall_start_;
}

}  // namespace saturn::solver
