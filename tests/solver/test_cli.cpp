// `saturn plan` end to end, when the saturn executable has been built next to this test
// (skipped otherwise: the executable belongs to the runtime's build).
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <sys/wait.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace {

struct Result {
  int rc = -1;
  std::string out;
};

Result execute(const std::string& cmd) {
  Result r;
  FILE* pipe = popen(fmt::format("{} 2>&1", cmd).c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  while (fgets(buf.data(), static_cast<int>(buf.size()), pipe)) r.out += buf.data();
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string saturn_binary() {
  const char* dir = std::getenv("SATURN_BINARY_DIR");
  if (!dir) return "";
  const std::filesystem::path p = std::filesystem::path(dir) / "saturn";
  return std::filesystem::exists(p) ? p.string() : "";
}

class PlanCli : public ::testing::Test {
 protected:
  void SetUp() override {
    saturn_ = saturn_binary();
    if (saturn_.empty()) GTEST_SKIP() << "saturn executable not built";
    dir_ = std::filesystem::temp_directory_path() / fmt::format("saturn-plan-cli-{}", getpid());
    std::filesystem::create_directories(dir_);
    std::ofstream(dir_ / "inst.json")
        << R"({"cluster": {"nodes": [{"name": "a", "devices": 8, "memory_gib": 80},
        {"name": "b", "devices": 4, "memory_gib": 80}]},
      "jobs": [{"id": "gpt2", "steps": 1000, "configs": [
                 {"strategy": "fsdp", "devices": 4, "time_s": 5400.0, "memory_gib": 31.5},
                 {"strategy": "pipeline", "devices": 2, "time_s": 9900.0}]},
               {"id": "gptj", "configs": [{"strategy": "fsdp", "devices": 8, "time_s": 7200.0}]},
               {"id": "vit", "configs": [{"strategy": "ddp", "devices": 1, "time_s": 3600.0},
                                         {"strategy": "ddp", "devices": 2, "time_s": 2000.0}]}]})";
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string saturn_;
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(PlanCli, TextTableAndGantt) {
  const Result r = execute(
      fmt::format("{} plan --instance {} --time-limit 2", saturn_, (dir_ / "inst.json").string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("makespan"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower bound"), std::string::npos);
  EXPECT_NE(r.out.find("gap"), std::string::npos);
  EXPECT_NE(r.out.find("a:7 |"), std::string::npos) << r.out;  // a Gantt row per device
  EXPECT_NE(r.out.find("gptj"), std::string::npos);
}

TEST_F(PlanCli, JsonToStdoutAndFile) {
  const std::string out = (dir_ / "plan.json").string();
  const Result r = execute(fmt::format("{} plan --instance {} --json --time-limit 2", saturn_,
                                       (dir_ / "inst.json").string()));
  ASSERT_EQ(r.rc, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["version"], 1);
  EXPECT_EQ(j["jobs"].size(), 3u);
  EXPECT_EQ(j["jobs"][0]["steps"], 1000);
  const Result w = execute(fmt::format("{} plan --instance {} -o {} --cluster 2x8 --time-limit 2",
                                       saturn_, (dir_ / "inst.json").string(), out));
  ASSERT_EQ(w.rc, 0) << w.out;
  std::ifstream in(out);
  const auto f = nlohmann::json::parse(in);
  EXPECT_EQ(f["jobs"][0]["nodes"][0].get<std::string>().substr(0, 1), "n");  // the --cluster nodes
}

TEST_F(PlanCli, BadInputIsExitCodeTwoWithAClearMessage) {
  Result r = execute(
      fmt::format("{} plan --instance {} --cluster 2y8", saturn_, (dir_ / "inst.json").string()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("cluster spec '2y8'"), std::string::npos) << r.out;
  r = execute(
      fmt::format("{} plan --instance {} --cluster 1x4", saturn_, (dir_ / "inst.json").string()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("job 'gptj' has no configuration that fits"), std::string::npos) << r.out;
  r = execute(fmt::format("{} plan {} --cluster 2x8", saturn_, (dir_ / "no-such.yaml").string()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("no-such.yaml"), std::string::npos) << r.out;
  r = execute(fmt::format("{} plan --instance {}", saturn_, (dir_ / "missing.json").string()));
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
}
