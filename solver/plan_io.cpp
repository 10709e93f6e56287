#include "solver/plan_io.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

namespace saturn::solver {

using nlohmann::json;

namespace {

// `field` is a path like jobs[2].configs[0].time_s; "" is the document itself.
[[noreturn]] void fail(const std::string& where, const std::string& field,
                       const std::string& what) {
  throw SolverError(fmt::format("{}: {}: {}", where, field.empty() ? "(top)" : field, what));
}

std::string join(const std::string& field, const std::string& key) {
  return field.empty() ? key : field + "." + key;
}

// A device or node count: an integer from 1 to kMaxDevices.
int count_of(const json& j, const std::string& where, const std::string& field, const char* what);

void only_keys(const json& j, const std::set<std::string>& allowed, const std::string& where,
               const std::string& field) {
  if (!j.is_object())
    fail(where, field, fmt::format("expected an object, found {}", j.type_name()));
  for (const auto& [key, value] : j.items()) {
    if (!allowed.count(key)) {
      std::string valid;
      for (const std::string& a : allowed) valid += (valid.empty() ? "" : ", ") + a;
      fail(where, join(field, key), fmt::format("unknown key (valid here: {})", valid));
    }
  }
}

const json& need(const json& j, const char* key, const std::string& where,
                 const std::string& field) {
  if (!j.contains(key)) fail(where, join(field, key), "missing");
  return j.at(key);
}

double number(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_number()) fail(where, field, fmt::format("expected a number, found {}", j.type_name()));
  const double v = j.get<double>();
  if (!std::isfinite(v)) fail(where, field, "not a finite number");
  return v;
}

long long integer(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_number_integer())
    fail(where, field, fmt::format("expected an integer, found {}", j.dump()));
  return j.get<long long>();
}

std::string text(const json& j, const std::string& where, const std::string& field) {
  if (!j.is_string()) fail(where, field, fmt::format("expected a string, found {}", j.type_name()));
  return j.get<std::string>();
}

int count_of(const json& j, const std::string& where, const std::string& field, const char* what) {
  const long long v = integer(j, where, field);
  if (v < 1) fail(where, field, fmt::format("{} is not a {} count >= 1", v, what));
  if (v > kMaxDevices)
    fail(where, field, fmt::format("{} is above the limit of {} {}s", v, kMaxDevices, what));
  return static_cast<int>(v);
}

// A run time in seconds: positive and at most kMaxTimeS (a sum of larger ones can overflow).
double duration_of_field(double v, const std::string& where, const std::string& field) {
  if (!(v > 0)) fail(where, field, "must be > 0");
  if (v > kMaxTimeS)
    fail(where, field, fmt::format("{:g} s is above the limit of {:g} s", v, kMaxTimeS));
  return v;
}

}  // namespace

Problem instance_from_json(const json& j, const std::string& where) {
  only_keys(j, {"cluster", "jobs"}, where, "");
  Problem p;
  const json& cluster = need(j, "cluster", where, "");
  only_keys(cluster, {"nodes"}, where, "cluster");
  const json& nodes = need(cluster, "nodes", where, "cluster");
  if (!nodes.is_array()) fail(where, "cluster.nodes", "expected an array");
  for (size_t i = 0; i < nodes.size(); ++i) {
    const std::string f = fmt::format("cluster.nodes[{}]", i);
    only_keys(nodes[i], {"name", "devices", "memory_gib"}, where, f);
    Node n;
    n.name = nodes[i].contains("name") ? text(nodes[i]["name"], where, f + ".name")
                                       : fmt::format("n{}", i);
    n.devices = count_of(need(nodes[i], "devices", where, f), where, f + ".devices", "device");
    if (nodes[i].contains("memory_gib")) {
      n.memory_gib = number(nodes[i]["memory_gib"], where, f + ".memory_gib");
      if (n.memory_gib < 0) fail(where, f + ".memory_gib", "must be >= 0");
    }
    p.cluster.nodes.push_back(std::move(n));
  }
  long long total = 0;
  for (const Node& n : p.cluster.nodes) total += n.devices;
  if (total > kMaxDevices)
    fail(where, "cluster.nodes",
         fmt::format("{} devices in all, above the limit of {}", total, kMaxDevices));
  const json& jobs = need(j, "jobs", where, "");
  if (!jobs.is_array()) fail(where, "jobs", "expected an array");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string f = fmt::format("jobs[{}]", i);
    only_keys(jobs[i], {"id", "configs", "steps"}, where, f);
    Job job;
    job.id = text(need(jobs[i], "id", where, f), where, f + ".id");
    if (jobs[i].contains("steps")) {
      job.steps = integer(jobs[i]["steps"], where, f + ".steps");
      if (job.steps < 0) fail(where, f + ".steps", "must be >= 0");
    }
    const json& configs = need(jobs[i], "configs", where, f);
    if (!configs.is_array()) fail(where, f + ".configs", "expected an array");
    for (size_t c = 0; c < configs.size(); ++c) {
      const std::string g = fmt::format("{}.configs[{}]", f, c);
      only_keys(configs[c],
                {"strategy", "devices", "nodes", "time_s", "step_time_s", "memory_gib", "source"},
                where, g);
      Config config;
      config.strategy = text(need(configs[c], "strategy", where, g), where, g + ".strategy");
      config.devices =
          count_of(need(configs[c], "devices", where, g), where, g + ".devices", "device");
      if (configs[c].contains("nodes"))
        config.nodes = count_of(configs[c]["nodes"], where, g + ".nodes", "node");
      if (configs[c].contains("time_s")) {
        config.time_s = duration_of_field(number(configs[c]["time_s"], where, g + ".time_s"), where,
                                          g + ".time_s");
      } else if (configs[c].contains("step_time_s")) {
        if (job.steps <= 0) fail(where, g + ".step_time_s", "needs the job's \"steps\"");
        const double step = number(configs[c]["step_time_s"], where, g + ".step_time_s");
        if (!(step > 0)) fail(where, g + ".step_time_s", "must be > 0");
        config.time_s = duration_of_field(step * static_cast<double>(job.steps), where,
                                          g + ".step_time_s (times the job's steps)");
      } else {
        fail(where, g + ".time_s", "missing");
      }
      if (configs[c].contains("memory_gib")) {
        config.memory_gib = number(configs[c]["memory_gib"], where, g + ".memory_gib");
        if (config.memory_gib < 0) fail(where, g + ".memory_gib", "must be >= 0");
      }
      if (configs[c].contains("source"))
        config.source = text(configs[c]["source"], where, g + ".source");
      job.configs.push_back(std::move(config));
    }
    p.jobs.push_back(std::move(job));
  }
  try {
    check_problem(p);
  } catch (const SolverError& e) {
    throw SolverError(fmt::format("{}: {}", where, e.what()));
  }
  return p;
}

Problem read_instance(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw SolverError(fmt::format("{}: cannot open the instance file", path));
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw SolverError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
  return instance_from_json(j, path);
}

nlohmann::ordered_json instance_to_json(const Problem& p) {
  using ojson = nlohmann::ordered_json;
  ojson nodes = ojson::array();
  for (const Node& n : p.cluster.nodes) {
    ojson o = {{"name", n.name}, {"devices", n.devices}};
    if (n.memory_gib > 0) o["memory_gib"] = n.memory_gib;
    nodes.push_back(std::move(o));
  }
  ojson jobs = ojson::array();
  for (const Job& job : p.jobs) {
    ojson configs = ojson::array();
    for (const Config& c : job.configs) {
      ojson o = {{"strategy", c.strategy},
                 {"devices", c.devices},
                 {"nodes", c.nodes},
                 {"time_s", c.time_s}};
      if (c.memory_gib > 0) o["memory_gib"] = c.memory_gib;
      if (!c.source.empty()) o["source"] = c.source;
      configs.push_back(std::move(o));
    }
    ojson o = {{"id", job.id}, {"configs", std::move(configs)}};
    if (job.steps > 0) o["steps"] = job.steps;
    jobs.push_back(std::move(o));
  }
  return ojson{{"cluster", {{"nodes", std::move(nodes)}}}, {"jobs", std::move(jobs)}};
}

nlohmann::ordered_json plan_to_json(const Problem& problem, const Plan& plan) {
  using ojson = nlohmann::ordered_json;
  ojson jobs = ojson::array();
  for (size_t j = 0; j < plan.jobs.size(); ++j) {
    const ScheduledJob& sj = plan.jobs[j];
    const Job& job = problem.jobs[j];
    const Config& c = job.configs[static_cast<size_t>(sj.config)];
    ojson names = ojson::array();
    for (int n : sj.nodes) names.push_back(problem.cluster.nodes[static_cast<size_t>(n)].name);
    ojson o = {{"id", job.id},      {"strategy", c.strategy}, {"devices", c.devices},
               {"nodes", names},    {"ranks", sj.devices},    {"start_s", sj.start_s},
               {"end_s", sj.end_s}, {"config", sj.config}};
    if (job.steps > 0) {
      o["steps"] = job.steps;
      o["step_time_s"] = c.time_s / static_cast<double>(job.steps);
    }
    o["source"] = c.source.empty() ? "estimate" : c.source;
    jobs.push_back(std::move(o));
  }
  const SolverInfo& s = plan.solver;
  ojson solver = {{"backend", s.backend}, {"status", to_string(s.status)},
                  {"gap", s.gap},         {"solve_time_s", s.solve_time_s},
                  {"clock", s.clock},     {"wall_capped", s.wall_capped},
                  {"method", s.method}};
  if (!s.milp_status.empty()) {
    solver["milp_status"] = s.milp_status;
    solver["slot_s"] = s.slot_s;
    solver["exact_slots"] = s.exact_slots;
    solver["milp_bound_s"] = s.milp_bound_s;
  }
  return ojson{{"version", 1},
               {"created_s", plan.created_s},
               {"makespan_s", plan.makespan_s},
               {"lower_bound_s", plan.lower_bound_s},
               {"solver", std::move(solver)},
               {"jobs", std::move(jobs)}};
}

Plan plan_from_json(const Problem& problem, const json& j, const std::string& where) {
  Plan plan;
  if (!j.is_object()) fail(where, "", "expected an object");
  if (integer(need(j, "version", where, ""), where, "version") != 1)
    fail(where, "version", "unsupported plan version (this build reads version 1)");
  plan.created_s = j.contains("created_s") ? number(j["created_s"], where, "created_s") : 0.0;
  plan.makespan_s = number(need(j, "makespan_s", where, ""), where, "makespan_s");
  plan.lower_bound_s =
      j.contains("lower_bound_s") ? number(j["lower_bound_s"], where, "lower_bound_s") : 0.0;
  if (j.contains("solver") && j["solver"].is_object()) {
    const json& s = j["solver"];
    if (s.contains("backend")) plan.solver.backend = text(s["backend"], where, "solver.backend");
    if (s.contains("gap")) plan.solver.gap = number(s["gap"], where, "solver.gap");
    if (s.contains("solve_time_s"))
      plan.solver.solve_time_s = number(s["solve_time_s"], where, "solver.solve_time_s");
    if (s.contains("method")) plan.solver.method = text(s["method"], where, "solver.method");
    if (s.contains("clock")) plan.solver.clock = text(s["clock"], where, "solver.clock");
    if (s.contains("wall_capped")) {
      if (!s["wall_capped"].is_boolean())
        fail(where, "solver.wall_capped", "expected true or false");
      plan.solver.wall_capped = s["wall_capped"].get<bool>();
    }
    if (s.contains("status")) {
      const std::string st = text(s["status"], where, "solver.status");
      plan.solver.status = st == "optimal"    ? SolveStatus::optimal
                           : st == "feasible" ? SolveStatus::feasible
                                              : SolveStatus::heuristic;
    }
  }
  const json& jobs = need(j, "jobs", where, "");
  if (!jobs.is_array()) fail(where, "jobs", "expected an array");
  plan.jobs.assign(problem.jobs.size(), ScheduledJob{});
  std::vector<char> seen(problem.jobs.size(), 0);
  for (size_t i = 0; i < jobs.size(); ++i) {
    const std::string f = fmt::format("jobs[{}]", i);
    const std::string id = text(need(jobs[i], "id", where, f), where, f + ".id");
    size_t k = 0;
    while (k < problem.jobs.size() && problem.jobs[k].id != id) ++k;
    if (k == problem.jobs.size())
      fail(where, f + ".id", fmt::format("'{}' is not a job of the instance", id));
    if (seen[k]) fail(where, f + ".id", fmt::format("'{}' appears twice", id));
    seen[k] = 1;
    ScheduledJob& sj = plan.jobs[k];
    const Job& job = problem.jobs[k];
    if (jobs[i].contains("config")) {
      sj.config = static_cast<int>(integer(jobs[i]["config"], where, f + ".config"));
    } else {
      // Match by strategy, device count and duration.
      const std::string strategy =
          text(need(jobs[i], "strategy", where, f), where, f + ".strategy");
      const long long devices = integer(need(jobs[i], "devices", where, f), where, f + ".devices");
      const double dur = number(need(jobs[i], "end_s", where, f), where, f + ".end_s") -
                         number(need(jobs[i], "start_s", where, f), where, f + ".start_s");
      for (size_t c = 0; c < job.configs.size() && sj.config < 0; ++c)
        if (job.configs[c].strategy == strategy && job.configs[c].devices == devices &&
            std::fabs(job.configs[c].time_s - dur) <= 1e-6 * std::max(1.0, dur))
          sj.config = static_cast<int>(c);
      if (sj.config < 0) fail(where, f, "matches none of the job's configurations");
    }
    sj.start_s = number(need(jobs[i], "start_s", where, f), where, f + ".start_s");
    sj.end_s = number(need(jobs[i], "end_s", where, f), where, f + ".end_s");
    const json& names = need(jobs[i], "nodes", where, f);
    if (!names.is_array()) fail(where, f + ".nodes", "expected an array of node names");
    for (const json& name : names) {
      const std::string nm = text(name, where, f + ".nodes");
      size_t n = 0;
      while (n < problem.cluster.nodes.size() && problem.cluster.nodes[n].name != nm) ++n;
      if (n == problem.cluster.nodes.size())
        fail(where, f + ".nodes", fmt::format("no node named '{}'", nm));
      sj.nodes.push_back(static_cast<int>(n));
    }
    const json& ranks = need(jobs[i], "ranks", where, f);
    if (!ranks.is_array()) fail(where, f + ".ranks", "expected an array of device ids");
    for (const json& r : ranks)
      sj.devices.push_back(static_cast<int>(integer(r, where, f + ".ranks")));
  }
  for (size_t k = 0; k < seen.size(); ++k)
    if (!seen[k])
      fail(where, "jobs", fmt::format("job '{}' of the instance is missing", problem.jobs[k].id));
  return plan;
}

void write_text_file(const std::string& path, const std::string& content) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw SolverError(fmt::format("{}: cannot write", path));
    out << content;
    out.flush();
    if (!out) throw SolverError(fmt::format("{}: write failed", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw SolverError(fmt::format("{}: cannot rename the temporary file into place", path));
  }
}

}  // namespace saturn::solver
