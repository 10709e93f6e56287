// Wall clocks and their display, shared by the training loop, the profiler and the executor.
#pragma once

#include <chrono>
#include <string>

namespace saturn {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// "m:ss" or "h:mm:ss" (progress lines, ETAs); "?" for a negative or non-finite time.
std::string format_clock(double seconds);
// "950", "12.3k", "1.25M" (tokens per second).
std::string format_rate(double per_second);

}  // namespace saturn
