// Plans as text: a summary line, a table of jobs, and a Gantt chart with one row per device.
#pragma once

#include <string>

#include "solver/problem.hpp"

namespace saturn::solver {

// "1:23:45" (h:mm:ss), or "12.3s" under a minute.
std::string format_duration(double seconds);

// The symbol a job has in the chart: A-Z, a-z, 0-9 by job index, repeating after 62 jobs.
char job_symbol(size_t job);

// Makespan, lower bound, gap, status, solver and solve time.
std::string plan_summary(const Problem& problem, const Plan& plan);

// One line per job in start order: symbol, id, strategy, devices, nodes, ranks, start, end.
std::string plan_table(const Problem& problem, const Plan& plan);

// Nodes of more devices than this are drawn as this many rows of consecutive devices.
inline constexpr int kGanttRowsPerNode = 32;

// One row per device ("n0:3 |AAAABBB...|"), `width` columns spanning [0, makespan]; a column
// shows the job on that device at the column's middle, '.' when idle, '-' on a device held
// but unused by a job spanning whole nodes. A time axis runs underneath. A node of more than
// kGanttRowsPerNode devices gets that many rows, each a range of its devices ("n0:0-31249");
// a cell there shows the job holding any of them ('*' when several do). Linear in the plan's
// size: the chart is drawn from jobs' device lists, never device by device.
std::string gantt_chart(const Problem& problem, const Plan& plan, int width = 72);

}  // namespace saturn::solver
