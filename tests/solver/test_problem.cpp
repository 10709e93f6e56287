// Problem types, cluster specs, bad instances and the JSON contracts.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "instances.hpp"
#include "solver/options.hpp"
#include "solver/plan_io.hpp"
#include "solver/problem.hpp"
#include "solver/solve.hpp"
#include "solver/validate.hpp"

using namespace saturn::solver;
using nlohmann::json;
using saturn::solver::testing::cfg;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const SolverError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST(ClusterSpec, Homogeneous) {
  const Cluster c = parse_cluster_spec("2x8:80GiB");
  ASSERT_EQ(c.nodes.size(), 2u);
  EXPECT_EQ(c.total_devices(), 16);
  EXPECT_DOUBLE_EQ(c.nodes[1].memory_gib, 80.0);
  EXPECT_EQ(c.nodes[1].name, "n1");
  EXPECT_EQ(format_cluster(c), "2x8:80GiB");
  EXPECT_EQ(parse_cluster_spec("16x8").total_devices(), 128);
  EXPECT_DOUBLE_EQ(parse_cluster_spec("1x8:512MiB").nodes[0].memory_gib, 0.5);
  EXPECT_DOUBLE_EQ(parse_cluster_spec("1x8:40").nodes[0].memory_gib, 40.0);
}

TEST(ClusterSpec, Heterogeneous) {
  const Cluster c = parse_cluster_spec("2+2+4+8");
  ASSERT_EQ(c.nodes.size(), 4u);
  EXPECT_EQ(c.total_devices(), 16);
  EXPECT_EQ(c.first_device(3), 8);
  EXPECT_EQ(c.node_of_device(7), 2);
  EXPECT_EQ(c.node_of_device(16), -1);
  EXPECT_EQ(format_cluster(c), "2+2+4+8");
  EXPECT_EQ(parse_cluster_spec("8+4:40GiB").nodes[1].devices, 4);
}

TEST(ClusterSpec, BadSpecsAreClearErrors) {
  for (const char* bad :
       {"", "x8", "2x", "2x0", "0x8", "8+", "8++4", "2x8:", "2x8:lots", "abc", "-2x8"}) {
    const std::string e = error_of([&] { parse_cluster_spec(bad); });
    EXPECT_TRUE(contains(e, "cluster spec")) << "spec '" << bad << "' gave: " << e;
  }
}

TEST(CheckProblem, EmptyClusterIsAnError) {
  Problem p;
  p.jobs.push_back(Job{"a", {cfg("ddp", 1, 1, 10.0)}, 0});
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "cluster is empty"));
  EXPECT_TRUE(contains(error_of([&] { solve(p); }), "cluster is empty"));
}

TEST(CheckProblem, JobWithoutFeasibleConfigurationNamesTheJobAndWhy) {
  Problem p;
  p.cluster = parse_cluster_spec("2x4:40GiB");
  p.jobs.push_back(Job{"fine", {cfg("ddp", 2, 1, 10.0)}, 0});
  Job big{"gptj", {}, 0};
  big.configs.push_back(cfg("fsdp", 8, 1, 10.0));  // no node has 8
  Config mem = cfg("ddp", 2, 1, 10.0);
  mem.memory_gib = 60;  // too much memory
  big.configs.push_back(mem);
  big.configs.push_back(cfg("fsdp", 12, 3, 10.0));  // 3 nodes, there are 2
  p.jobs.push_back(big);
  const std::string e = error_of([&] { solve(p); });
  EXPECT_TRUE(contains(e, "job 'gptj' has no configuration that fits the cluster 2x4:40GiB")) << e;
  EXPECT_TRUE(contains(e, "the largest node has 4")) << e;
  EXPECT_TRUE(contains(e, "60 GiB")) << e;
  EXPECT_TRUE(contains(e, "3 whole nodes")) << e;
}

TEST(CheckProblem, MalformedValues) {
  Problem p;
  p.cluster = parse_cluster_spec("1x4");
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "no jobs"));
  p.jobs.push_back(Job{"a", {cfg("ddp", 1, 1, -5.0)}, 0});
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "time_s > 0"));
  p.jobs[0].configs[0].time_s = 5;
  p.jobs.push_back(Job{"a", {cfg("ddp", 1, 1, 5.0)}, 0});
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "appears twice"));
  p.jobs[1].id.assign(1, 'b');
  p.jobs[1].configs.clear();
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "no candidate configurations"));
}

TEST(Options, ParetoFilterKeepsOnlyUndominated) {
  Problem p;
  p.cluster = parse_cluster_spec("2x4");
  Job j{"a", {}, 0};
  j.configs.push_back(cfg("ddp", 1, 1, 100.0));
  j.configs.push_back(cfg("ddp", 2, 1, 60.0));
  j.configs.push_back(cfg("pipeline", 2, 1, 70.0));  // dominated by ddp x2
  j.configs.push_back(cfg("fsdp", 4, 1, 60.0));  // dominated by ddp x2 (same time, more devices)
  j.configs.push_back(cfg("tensor", 4, 1, 30.0));
  j.configs.push_back(cfg("fsdp", 8, 2, 40.0));  // whole nodes, slower than tensor x4
  j.configs.push_back(cfg("fsdp", 8, 2, 20.0));  // whole nodes, fastest: kept
  p.jobs.push_back(j);
  const Prepared pr = prepare(p);
  std::vector<int> kept;
  for (const Option& o : pr.options[0]) kept.push_back(o.config);
  std::sort(kept.begin(), kept.end());
  EXPECT_EQ(kept, (std::vector<int>{0, 1, 4, 6}));
}

TEST(Options, IdenticalJobsShareAClass) {
  Problem p;
  p.cluster = parse_cluster_spec("1x4");
  for (int i = 0; i < 3; ++i)
    p.jobs.push_back(
        Job{fmt::format("lr{}", i), {cfg("ddp", 1, 1, 10.0), cfg("ddp", 2, 1, 6.0)}, 0});
  p.jobs.push_back(Job{"other", {cfg("ddp", 1, 1, 11.0)}, 0});
  const Prepared pr = prepare(p);
  EXPECT_EQ(pr.num_classes, 2);
  EXPECT_EQ(pr.job_class[0], pr.job_class[2]);
  EXPECT_NE(pr.job_class[0], pr.job_class[3]);
}

TEST(InstanceJson, ReadsTheContractExample) {
  const json j =
      json::parse(R"({"cluster": {"nodes": [{"name": "n0", "devices": 8, "memory_gib": 80},
                       {"name": "n1", "devices": 4, "memory_gib": 80}]},
 "jobs": [{"id": "gpt2-lr1e-4", "configs": [
            {"strategy": "fsdp", "devices": 4, "nodes": 1, "time_s": 5400.0, "memory_gib": 31.5},
            {"strategy": "pipeline", "devices": 2, "nodes": 1, "time_s": 9900.0},
            {"strategy": "fsdp", "devices": 16, "nodes": 2, "time_s": 1500.0}]}]})");
  const Problem p = instance_from_json(j, "example.json");
  ASSERT_EQ(p.cluster.nodes.size(), 2u);
  EXPECT_EQ(p.cluster.nodes[1].devices, 4);
  ASSERT_EQ(p.jobs.size(), 1u);
  EXPECT_EQ(p.jobs[0].configs[2].nodes, 2);
  EXPECT_DOUBLE_EQ(p.jobs[0].configs[0].memory_gib, 31.5);
  // 16 devices over 2 nodes needs 8 per node: only n0 has 8, so that configuration is out,
  // but the job still has others.
  const Plan plan = solve(p);
  EXPECT_TRUE(validate_plan(p, plan).empty());
  const Problem back = instance_from_json(json::parse(instance_to_json(p).dump()), "round-trip");
  EXPECT_EQ(back.jobs[0].configs.size(), 3u);
  EXPECT_EQ(back.cluster.nodes[0].name, "n0");
}

TEST(InstanceJson, StrictErrorsNameFileAndField) {
  auto err = [](const char* text) {
    return error_of([&] { instance_from_json(json::parse(text), "bad.json"); });
  };
  EXPECT_TRUE(contains(
      err(R"({"cluster": {"nodes": []}, "jobs": [{"id": "a", "configs": [{"strategy": "ddp", "devices": 1, "time_s": 5}]}]})"),
      "cluster is empty"));
  EXPECT_TRUE(contains(
      err(R"({"cluster": {"nodes": [{"devices": 4}]}, "jobs": [{"id": "a", "configs": [{"strategy": "ddp", "devices": 1, "tim_s": 5}]}]})"),
      "bad.json: jobs[0].configs[0].tim_s: unknown key"));
  EXPECT_TRUE(contains(
      err(R"({"cluster": {"nodes": [{"devices": 4}]}, "jobs": [{"id": "a", "configs": [{"strategy": "ddp", "devices": 1}]}]})"),
      "jobs[0].configs[0].time_s: missing"));
  EXPECT_TRUE(contains(err(R"({"cluster": {"nodes": [{"devices": "four"}]}, "jobs": []})"),
                       "cluster.nodes[0].devices: expected an integer"));
  EXPECT_TRUE(contains(
      err(R"({"cluster": {"nodes": [{"devices": 4}]}, "jobs": [{"id": "big", "configs": [{"strategy": "ddp", "devices": 8, "time_s": 5}]}]})"),
      "job 'big' has no configuration that fits"));
  EXPECT_TRUE(contains(error_of([] { read_instance("/nonexistent/inst.json"); }), "cannot open"));
}

// Absurd values are input errors naming the field (issue 21), not overflows further on: a run
// time of 1e308 s made the makespan infinite and the solve end in "invalid plan: the plan
// places 0 jobs"; a device count above the limit read "not a device count >= 1"; a top-level
// array named an empty field.
TEST(InstanceJson, AbsurdValuesNameTheField) {
  auto err = [](const std::string& text) {
    return error_of([&] { instance_from_json(json::parse(text), "bad.json"); });
  };
  auto one = [](const std::string& node, const std::string& config) {
    return fmt::format(R"({{"cluster": {{"nodes": [{}]}}, "jobs": [{{"id": "a", {}}}]}})", node,
                       config);
  };
  std::string e = err(one(R"({"devices": 8})",
                          R"("configs": [{"strategy": "ddp", "devices": 8, "time_s": 1e308}])"));
  EXPECT_TRUE(contains(e, "bad.json: jobs[0].configs[0].time_s: 1e+308 s is above the limit")) << e;
  e = err(one(
      R"({"devices": 8})",
      R"("steps": 1000000000, "configs": [{"strategy": "ddp", "devices": 8, "step_time_s": 1e300}])"));
  EXPECT_TRUE(contains(e, "jobs[0].configs[0].step_time_s (times the job's steps): ")) << e;
  EXPECT_TRUE(contains(e, "above the limit")) << e;
  e = err(one(R"({"devices": 2000000})",
              R"("configs": [{"strategy": "ddp", "devices": 8, "time_s": 5}])"));
  EXPECT_TRUE(contains(e, "cluster.nodes[0].devices: 2000000 is above the limit of 1048576")) << e;
  e = err(one(R"({"devices": 8})",
              R"("configs": [{"strategy": "ddp", "devices": 3000000, "time_s": 5}])"));
  EXPECT_TRUE(contains(e, "jobs[0].configs[0].devices: 3000000 is above the limit")) << e;
  e = err(one(R"({"devices": 8})",
              R"("configs": [{"strategy": "ddp", "devices": 8, "nodes": 0, "time_s": 5}])"));
  EXPECT_TRUE(contains(e, "jobs[0].configs[0].nodes: 0 is not a node count >= 1")) << e;
  e = err(one(R"({"devices": 600000}, {"devices": 600000})",
              R"("configs": [{"strategy": "ddp", "devices": 8, "time_s": 5}])"));
  EXPECT_TRUE(contains(e, "cluster.nodes: 1200000 devices in all, above the limit")) << e;
  e = err(R"([{"cluster": {"nodes": [{"devices": 8}]}}])");
  EXPECT_TRUE(contains(e, "bad.json: (top): expected an object, found array")) << e;
  e = err(R"({"jobs": []})");
  EXPECT_TRUE(contains(e, "bad.json: cluster: missing")) << e;
  // The library's own check, for problems built in code (plan_jobs) and --cluster specs.
  Problem p;
  p.cluster = parse_cluster_spec("1x8");
  p.jobs.push_back(Job{"a", {cfg("ddp", 8, 1, 1e308)}, 0});
  EXPECT_TRUE(contains(error_of([&] { check_problem(p); }), "time_s 1e+308 is above the limit"));
  EXPECT_TRUE(contains(error_of([] { parse_cluster_spec("100000x999999"); }),
                       "99999900000 devices in all, above the limit"));
  EXPECT_TRUE(
      contains(error_of([] { parse_cluster_spec("999999+999999"); }), "more than 1048576 devices"));
}

TEST(InstanceJson, StepsAndStepTimes) {
  const json j = json::parse(R"({"cluster": {"nodes": [{"devices": 2}]},
    "jobs": [{"id": "a", "steps": 1000, "configs": [{"strategy": "ddp", "devices": 2, "step_time_s": 0.5, "source": "trial"}]}]})");
  const Problem p = instance_from_json(j, "s.json");
  EXPECT_DOUBLE_EQ(p.jobs[0].configs[0].time_s, 500.0);
  const Plan plan = solve(p);
  const auto out = plan_to_json(p, plan);
  EXPECT_EQ(out["jobs"][0]["steps"], 1000);
  EXPECT_DOUBLE_EQ(out["jobs"][0]["step_time_s"].get<double>(), 0.5);
  EXPECT_EQ(out["jobs"][0]["source"], "trial");
}

TEST(PlanJson, RoundTripsAndValidates) {
  Problem p;
  p.cluster = parse_cluster_spec("8+4");
  for (int i = 0; i < 5; ++i) {
    Job j{fmt::format("j{}", i), {}, 100};
    j.configs.push_back(cfg("ddp", 1, 1, 1000.0 + 100 * i));
    j.configs.push_back(cfg("fsdp", 4, 1, 300.0 + 40 * i));
    j.configs.push_back(cfg("fsdp", 8, 1, 180.0 + 30 * i));
    p.jobs.push_back(j);
  }
  const Plan plan = solve(p);
  const auto ordered = plan_to_json(p, plan);
  EXPECT_EQ(ordered.begin().key(), "version");  // keys in the contract's order
  const json j = json::parse(ordered.dump());
  EXPECT_EQ(j["version"], 1);
  EXPECT_TRUE(j["solver"].contains("status"));
  EXPECT_TRUE(j["solver"].contains("gap"));
  EXPECT_TRUE(j["jobs"][0].contains("ranks"));
  const Plan back = plan_from_json(p, json::parse(j.dump()), "plan.json");
  EXPECT_TRUE(validate_plan(p, back).empty());
  EXPECT_NEAR(back.makespan_s, plan.makespan_s, 1e-9);
  for (size_t i = 0; i < p.jobs.size(); ++i) {
    EXPECT_EQ(back.jobs[i].config, plan.jobs[i].config);
    EXPECT_EQ(back.jobs[i].devices, plan.jobs[i].devices);
  }
  // Without the "config" index a plan still reads back by strategy, devices and duration.
  json stripped = j;
  for (auto& job : stripped["jobs"]) job.erase("config");
  EXPECT_TRUE(validate_plan(p, plan_from_json(p, stripped, "plan.json")).empty());
  json wrong = j;
  wrong["jobs"][0]["id"] = "nope";
  EXPECT_TRUE(
      contains(error_of([&] { plan_from_json(p, wrong, "plan.json"); }), "'nope' is not a job"));
}
