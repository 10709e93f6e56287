// Small random instances for the solver tests. Durations are whole multiples of `slot` seconds
// so that the MILP's slot model is exact and its optimum comparable with the brute force.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "solver/problem.hpp"

namespace saturn::solver::testing {

inline Config cfg(std::string strategy, int devices, int nodes, double time_s,
                  double memory_gib = 0) {
  Config c;
  c.strategy = std::move(strategy);
  c.devices = devices;
  c.nodes = nodes;
  c.time_s = time_s;
  c.memory_gib = memory_gib;
  return c;
}

struct RandomSpec {
  int jobs = 5;
  std::string cluster = "1x4";
  double slot = 100.0;
  bool memory = false;      // configurations need 20 or 60 GiB; node memory from the cluster
  bool multi_node = false;  // add a whole-node configuration spanning 2 nodes
  bool identical = false;   // jobs come in pairs of identical ones (sweeps)
};

inline Problem random_instance(unsigned seed, const RandomSpec& spec) {
  std::mt19937 rng(seed);
  Problem p;
  p.cluster = parse_cluster_spec(spec.cluster);
  int widest = 0;
  for (const Node& n : p.cluster.nodes) widest = std::max(widest, n.devices);
  const char* strategies[] = {"ddp", "fsdp", "pipeline", "tensor"};
  std::uniform_real_distribution<double> work(2.0, 12.0), serial(0.0, 0.35);
  for (int j = 0; j < spec.jobs; ++j) {
    Job job;
    job.id = fmt::format("job{}", j);
    if (spec.identical && j % 2 == 1) {
      job.configs = p.jobs.back().configs;
      p.jobs.push_back(job);
      continue;
    }
    const double w = work(rng), s = serial(rng);
    std::vector<int> sizes;
    for (int g = 1; g <= widest; ++g) sizes.push_back(g);
    std::shuffle(sizes.begin(), sizes.end(), rng);
    const size_t count = 2 + rng() % 3;
    sizes.resize(std::min(count, sizes.size()));
    for (int g : sizes) {
      Config c;
      c.strategy = strategies[rng() % 4];
      c.devices = g;
      c.time_s = spec.slot * std::max(1.0, std::ceil(w * (s + (1 - s) / g) + (g > 1 ? 0.5 : 0.0)));
      if (spec.memory) c.memory_gib = g <= 2 ? 60.0 : 20.0;
      job.configs.push_back(c);
    }
    if (spec.multi_node && p.cluster.nodes.size() >= 2) {
      Config c;
      c.strategy = "fsdp";
      c.nodes = 2;
      c.devices = 2 * p.cluster.nodes[0].devices;
      c.time_s = spec.slot * std::max(1.0, std::ceil(w * (s + (1 - s) / c.devices) + 1.0));
      job.configs.push_back(c);
    }
    p.jobs.push_back(std::move(job));
  }
  return p;
}

}  // namespace saturn::solver::testing
