// Lower bounds on the makespan of any plan (valid in continuous time, whatever the method).
//
//  - longest:  the longest unavoidable job, max_j min_c t_j(c).
//  - area:     the "dual approximation" bound: the least T such that the jobs, each in its
//              least-work configuration among those finishing within T, fit in devices x T
//              (Ludwig-Tiwari / Mounie-Rapine-Trystram). It dominates `longest`.
//  - packing:  the same test with device counts mapped through dual-feasible functions
//              (Fekete-Schepers u^(k)): a job using more than half a node's devices excludes
//              another such job from that node, which the plain area test ignores.
//  - per node group: the tests restricted to the nodes some jobs are confined to (jobs that
//              only fit the big nodes, or the nodes with enough memory).
// The result is the maximum. Computed exactly, not by bisection: the work function is a step
// function of T with breakpoints at the configurations' times.
#pragma once

#include <string>

#include "solver/options.hpp"

namespace saturn::solver {

struct Bounds {
  double longest = 0.0;
  double area = 0.0;     // plain dual-approximation bound on the whole cluster
  double packing = 0.0;  // best dual-feasible-function bound, whole cluster
  double groups = 0.0;   // best bound on a node group
  double best = 0.0;
  std::string which;  // name of the bound that is best
};

Bounds compute_bounds(const Prepared& prepared);

}  // namespace saturn::solver
