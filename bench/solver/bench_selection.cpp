// Model selection inside the batch vs outside it (issue 20, acceptance 4), in simulation on the
// synthetic paper-shaped families (solver/synthetic.hpp). For each instance and selection rule:
//   outside   a tuner on top: every rung a separate batch planned by solve(), the next rung
//             only when the whole previous one has finished (devices idle until then);
//   inside    Saturn: decisions as soon as determined, losers stop at once, re-planning at
//             every such event; the remaining work planned as expected work (selection.hpp);
//   full      inside, but re-plans plan every job's full remaining steps.
// Time to finish the selection: the last surviving job completes its full steps. Prints a
// markdown table; never passes or fails on time.
//
//   bench_selection [--method sh|asha|both] [--eta 2] [--rungs 3] [--seeds N] [--limit 0.3]
//                   [--only txt,img,mixed50] [--speculate] [--verbose]
// --speculate: inside, jobs whose decision is pending train on instead of pausing.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "solver/selection_sim.hpp"
#include "solver/synthetic.hpp"

using namespace saturn::solver;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Case {
  std::string key, family;
  int jobs;
  const char* cluster;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<SelectionMethod> methods = {SelectionMethod::successive_halving,
                                          SelectionMethod::asha};
  double eta = 2.0, limit = 0.3;
  int rungs = 3, seeds = 3;
  std::vector<std::string> only;
  bool verbose = false, speculate = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_selection: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--method") {
      const std::string m = next();
      if (m == "sh")
        methods = {SelectionMethod::successive_halving};
      else if (m == "asha")
        methods = {SelectionMethod::asha};
      else if (m != "both") {
        std::fprintf(stderr, "bench_selection: --method is sh, asha or both, not '%s'\n",
                     m.c_str());
        return 2;
      }
    } else if (a == "--eta")
      eta = std::atof(next().c_str());
    else if (a == "--rungs")
      rungs = std::atoi(next().c_str());
    else if (a == "--seeds")
      seeds = std::atoi(next().c_str());
    else if (a == "--limit")
      limit = std::atof(next().c_str());
    else if (a == "--speculate")
      speculate = true;
    else if (a == "--verbose")
      verbose = true;
    else if (a == "--only")
      only = split(next());
    else {
      std::fprintf(
          stderr,
          "usage: bench_selection [--method sh|asha|both] [--eta 2] [--rungs 3] "
          "[--seeds N] [--limit 0.3] [--only txt,img,mixed50] [--speculate] [--verbose]\n");
      return 2;
    }
  }
  const Case cases[] = {{"txt", "txt", 12, "1x8"},
                        {"txt", "txt", 12, "2x8"},
                        {"img", "img", 12, "2x8"},
                        {"img", "img", 12, "1x8"},
                        {"mixed50", "mixed", 50, "4x8"}};
  std::printf(
      "Selection inside vs outside the batch (simulated; run times = estimates; restart cost "
      "120 s; re-plan/plan time limit %.2f s, no MILP; pending decisions: %s; eta %.3g, %d rungs, "
      "min_steps = "
      "floor(shortest job's steps / eta^rungs); metric seeds 1..%d).\n"
      "Times in hours. inside: re-plans see expected work (selection.hpp); inside-full: full "
      "steps; inside-next: the steps to each job's next rung. x_out = outside / inside; "
      "x_out_next = outside / inside-next; x_full = inside-full / inside. same = outside and "
      "inside stop the same jobs. re-plans, restarts: inside's. idle%%: device time not held by a "
      "job, outside and inside. bound: successive halving only, a lower bound on the time of any "
      "policy that stops the jobs outside stops (area, each job's fastest run, the last "
      "decision; selection_sim.hpp); x_max = outside / bound, the most that selection inside "
      "the batch could gain.\n\n",
      limit, speculate ? "train on (--speculate)" : "pause", eta, rungs, seeds);
  std::printf(
      "| method | family | cluster | jobs | seed | outside h | inside h | inside-full h | "
      "inside-next h | x_out | x_out_next | x_full | same | re-plans | restarts | idle%% out | "
      "idle%% in | bound h | x_max |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  try {
    for (SelectionMethod method : methods) {
      std::vector<double> x_out, x_full, x_next, x_max;
      for (const Case& c : cases) {
        if (!only.empty() && std::find(only.begin(), only.end(), c.key) == only.end()) continue;
        const Problem p = synthetic::family(
            c.family, parse_cluster_spec(std::string(c.cluster) + ":40GiB"), c.jobs, 1);
        const double devices = p.cluster.total_devices();
        long long shortest = p.jobs.front().steps;
        for (const Job& j : p.jobs) shortest = std::min(shortest, j.steps);
        SelectionSimOptions o;
        o.rule.method = method;
        o.rule.reduction_factor = eta;
        o.rule.max_rungs = rungs;
        o.rule.min_steps = std::max(
            1LL, static_cast<long long>(static_cast<double>(shortest) / std::pow(eta, rungs)));
        o.replan.solve.time_limit_s = limit;
        o.replan.solve.use_milp = false;
        o.replan.threshold = 0.02;
        o.speculate = speculate;
        for (int seed = 1; seed <= seeds; ++seed) {
          o.metric_seed = static_cast<unsigned>(seed);
          o.policy = SelectionSimOptions::Policy::outside;
          const SelectionSimResult out = simulate_selection(p, o);
          o.policy = SelectionSimOptions::Policy::inside;
          o.planning = SelectionSimOptions::Planning::expected_work;
          const SelectionSimResult in = simulate_selection(p, o);
          o.planning = SelectionSimOptions::Planning::full_steps;
          const SelectionSimResult full = simulate_selection(p, o);
          o.planning = SelectionSimOptions::Planning::next_rung;
          const SelectionSimResult next = simulate_selection(p, o);
          const double xo = out.selection_time_s / in.selection_time_s;
          const double xf = full.selection_time_s / in.selection_time_s;
          const double xn = out.selection_time_s / next.selection_time_s;
          x_out.push_back(xo);
          x_full.push_back(xf);
          x_next.push_back(xn);
          // What no inside policy can beat, for the jobs successive halving stops outside.
          const double bound = method == SelectionMethod::successive_halving
                                   ? selection_time_lower_bound(p, o.rule, out.stopped_rung)
                                   : 0.0;
          if (bound > 0) x_max.push_back(out.selection_time_s / bound);
          const std::string bound_cells =
              bound > 0 ? fmt::format("{:.2f} | {:.2f}", bound / 3600, out.selection_time_s / bound)
                        : std::string("- | -");
          std::printf(
              "| %s | %s | %s | %zu | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | "
              "%d | %d | %.0f | %.0f | %s |\n",
              to_string(method), c.key.c_str(), c.cluster, p.jobs.size(), seed,
              out.selection_time_s / 3600, in.selection_time_s / 3600, full.selection_time_s / 3600,
              next.selection_time_s / 3600, xo, xn, xf,
              out.stopped_rung == in.stopped_rung ? "yes" : "no", in.plans, in.restarts,
              100 * (1 - out.busy_device_s / (devices * out.selection_time_s)),
              100 * (1 - in.busy_device_s / (devices * in.selection_time_s)), bound_cells.c_str());
          if (verbose)
            for (const auto* r : {&out, &in, &full, &next}) {
              std::printf("   decisions:");
              for (const SelectionDecision& d : r->decisions)
                std::printf(" %d@%d:%s%.2fh", d.job, d.rung, d.promoted ? "+" : "-",
                            d.time_s / 3600);
              std::printf("\n");
            }
          std::fflush(stdout);
        }
      }
      std::printf(
          "| **%s median** | | | | | | | | | **%.2f** | **%.2f** | **%.2f** | | | | | | | %s |\n",
          to_string(method), median(x_out), median(x_next), median(x_full),
          x_max.empty() ? "-" : fmt::format("**{:.2f}**", median(x_max)).c_str());
    }
  } catch (const SolverError& e) {
    std::fprintf(stderr, "bench_selection: %s\n", e.what());
    return 2;
  }
  return 0;
}
