// The clock every time limit of a solve counts on. Three bases:
//  - wall: the wall clock (what a user waits for);
//  - cpu: the solving thread's CPU time (CLOCK_THREAD_CPUTIME_ID), so that a "10 s" solve gets
//    10 s of a core however loaded the machine is (bench_solver --clock cpu);
//  - work (the default of `saturn plan` and `saturn run`): the solver's own work, counted in
//    units (SolverClock::tick at each job placed in a schedule, search node, simplex iteration,
//    and one per clock read) and converted to seconds at kWorkUnitNs. Every decision the search
//    takes on time then depends on its work alone, so the same instance, options and seed give the
//    same plan, byte for byte, on any machine load. The wall clock still caps the solve
//    (ScopedClockBasis's wall_cap_s): past the cap every deadline has passed, and
//    SolverClock::capped() says the cap, not the work budget, ended the search.
// The MILP backends' own time limits (GLPK's tm_lim, CBC's seconds) stay on the wall clock as a
// safety net (under work, beyond the cap); their deadline check in the callback follows this
// clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace saturn::solver {

enum class ClockBasis { wall, thread_cpu, work };

// Nanoseconds one unit of work counts for. The work's kinds are weighted by what they cost on
// the 2-core VM the project is developed on (docs/solver.md, "Reproducible plans", has the
// measurement): a clock read 1 unit, a job placed in a schedule 2, a node of an exact node
// schedule 4, a node of the node-packing search 8, a simplex iteration 20, a call of GLPK's
// simplex (its set-up and factorisation, about 250 µs on the small LPs of the bounds) 5000, a
// branch-and-bound callback 1000.
inline constexpr std::int64_t kWorkUnitNs = 50;
inline constexpr std::int64_t kPlacementUnits = 2;
inline constexpr std::int64_t kNodeScheduleUnits = 4;
inline constexpr std::int64_t kPackingNodeUnits = 8;

std::string to_string(ClockBasis basis);
// "wall", "cpu" or "work"; throws SolverError otherwise.
ClockBasis parse_clock_basis(const std::string& text);

// A chrono clock whose basis is set per thread (ScopedClockBasis); wall by default. Time points
// of one basis must not be compared with those of another: set the basis once per solve.
struct SolverClock {
  using duration = std::chrono::nanoseconds;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<SolverClock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
  static ClockBasis basis() noexcept;
  // Counts `units` of work on the calling thread (the work basis's time; a no-op cost elsewhere).
  static void tick(std::int64_t units) noexcept;
  // Work units counted on this thread since its ScopedClockBasis began.
  static std::int64_t work() noexcept;
  // Whether the wall cap ended this thread's work-basis solve (its deadlines then all passed).
  static bool capped() noexcept;
  // The wall-clock limit to give a backend that does not read this clock (GLPK's simplex and
  // branch and bound, CBC) when its own limit is `limit_s` on this clock: limit_s itself, but
  // under the work basis the wall cap's seconds left (the work budget binds through the
  // backend's callback, or the backend finishes), or 1e7 without a cap.
  static double backend_limit_s(double limit_s) noexcept;
  // A backend stopped by the wall limit backend_limit_s gave it: under the work basis, the cap
  // ended the solve.
  static void backend_timed_out() noexcept;
  // The work one simplex iteration counts for (GLPK's iteration counts).
  static constexpr std::int64_t kSimplexIterationUnits = 20;
  static constexpr std::int64_t kSimplexCallUnits = 5000;
  static constexpr std::int64_t kBranchCallbackUnits = 1000;
};

// Sets the calling thread's SolverClock basis until it goes out of scope (solve() holds one for
// the duration of a solve), with the work count at zero. wall_cap_s > 0 (work basis): the wall
// seconds after which every deadline has passed.
class ScopedClockBasis {
 public:
  explicit ScopedClockBasis(ClockBasis basis, double wall_cap_s = 0);
  ~ScopedClockBasis();
  ScopedClockBasis(const ScopedClockBasis&) = delete;
  ScopedClockBasis& operator=(const ScopedClockBasis&) = delete;

 private:
  ClockBasis basis_;
  std::int64_t work_;
  bool capped_;
  std::int64_t cap_ns_;
  std::chrono::steady_clock::time_point wall_start_;
};

// Seconds on SolverClock since t0.
inline double seconds_since(SolverClock::time_point t0) {
  return std::chrono::duration<double>(SolverClock::now() - t0).count();
}

}  // namespace saturn::solver
