// Small helpers of the profiler: wall clocks, UTC timestamps, medians.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/clock.hpp"

namespace saturn::profile {

using saturn::Clock;
using saturn::seconds_since;

// "2025-05-10T12:34:56Z".
std::string utc_now();

// Median of the values (0 when empty); the mean of the middle two for an even count.
double median(std::vector<double> values);

// Median wall time of `repeats` calls of f (after one untimed call when warm is true).
template <typename F>
double time_median(int repeats, F&& f, bool warm = true) {
  if (warm) f();
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  return median(std::move(t));
}

}  // namespace saturn::profile
