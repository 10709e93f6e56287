// Hostlist expansion and compression. The expected outputs were recorded from Slurm 22.05's
// `scontrol show hostnames` / `scontrol show hostlist` (local-slurm.sh cluster); the
// HostlistScontrol test compares with a live scontrol when one works (the ctest
// launch_local_slurm_run test runs it with a cluster up).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "launch/hostlist.hpp"
#include "runtime/core/error.hpp"
#include "slurm/sbatch.hpp"

namespace saturn::launch {
namespace {

using Hosts = std::vector<std::string>;

std::string error_of(std::string_view list) {
  try {
    expand_hostlist(list);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError for \"" << list << "\"";
  return {};
}

TEST(Hostlist, ExpandsTheIssueCases) {
  EXPECT_EQ(expand_hostlist("gpu[1,3-5],login1"),
            (Hosts{"gpu1", "gpu3", "gpu4", "gpu5", "login1"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]-n[01-02]"),
            (Hosts{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}));
  EXPECT_EQ(expand_hostlist("node[01-04]"), (Hosts{"node01", "node02", "node03", "node04"}));
  EXPECT_EQ(expand_hostlist("n[8-11]"), (Hosts{"n8", "n9", "n10", "n11"}));
}

TEST(Hostlist, ExpandsLikeScontrol) {
  // Each pair: input, `scontrol show hostnames` output (Slurm 22.05.8).
  const std::vector<std::pair<std::string, Hosts>> cases = {
      {"a,,b", {"a", "b"}},
      {"n[1-2],,n5", {"n1", "n2", "n5"}},
      {" a b", {"a", "b"}},
      {"[1-3]", {"1", "2", "3"}},
      {"n[1,1]", {"n1", "n1"}},
      {"n[01-3]", {"n01", "n02", "n03"}},
      {"n[1-010]", {"n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10"}},
      {"n[001-3]", {"n001", "n002", "n003"}},
      {"a[1-2]b[1-2]", {"a1b1", "a1b2", "a2b1", "a2b2"}},
      {"vm", {"vm"}},
      {"node[01-02]", {"node01", "node02"}},
      {"", {}},
  };
  for (const auto& [list, hosts] : cases) EXPECT_EQ(expand_hostlist(list), hosts) << list;
}

TEST(Hostlist, RejectsMalformedListsClearly) {
  // scontrol rejects these too ("Invalid hostlist").
  EXPECT_NE(error_of("a[009-011]b").find("after the last bracket group"), std::string::npos);
  EXPECT_NE(error_of("x[1-2]y[3-4]z").find("after the last bracket group"), std::string::npos);
  EXPECT_NE(error_of("n[1-2]-").find("after the last bracket group"), std::string::npos);
  EXPECT_NE(error_of("n[3-1]").find("runs downwards"), std::string::npos);
  EXPECT_NE(error_of("n[]").find("empty brackets"), std::string::npos);
  EXPECT_NE(error_of("n[a-b]").find("inside brackets"), std::string::npos);
  EXPECT_NE(error_of("n[[1]]").find("nested"), std::string::npos);
  EXPECT_NE(error_of("n[-2]").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("n[1--2]").find("not a number"), std::string::npos);
  EXPECT_NE(error_of("n[1,]").find("stray comma"), std::string::npos);
  // scontrol accepts these with odd results ("n]", "n1-3]", "n01 n02", "n1"); we refuse.
  EXPECT_NE(error_of("n[1-3").find("without a matching ']'"), std::string::npos);
  EXPECT_NE(error_of("n1-3]").find("without a matching '['"), std::string::npos);
  EXPECT_NE(error_of("n[ 1-2]").find("inside brackets"), std::string::npos);
  EXPECT_NE(error_of("n[1-]").find("not a number"), std::string::npos);
  // The message quotes the whole list.
  EXPECT_NE(error_of("gpu[1-2],n[3-1]").find("hostlist \"gpu[1-2],n[3-1]\""), std::string::npos);
  EXPECT_NE(error_of("n[0-99999999]").find("more than"), std::string::npos);
  EXPECT_NE(error_of("n[1234567890123456789]").find("digits"), std::string::npos);
}

TEST(Hostlist, CompressesLikeScontrol) {
  // Each pair: hosts, `scontrol show hostlist` output (Slurm 22.05.8): order is kept.
  const std::vector<std::pair<Hosts, std::string>> cases = {
      {{"gpu1", "gpu3", "gpu4", "gpu5", "login1"}, "gpu[1,3-5],login1"},
      {{"n3", "n1", "n2"}, "n[3,1-2]"},
      {{"n1", "m1", "n2"}, "n1,m1,n2"},
      {{"n8", "n9", "n10", "n11"}, "n[8-11]"},
      {{"n09", "n10"}, "n[09-10]"},
      {{"n9", "n010"}, "n[9,010]"},
      {{"n99", "n100"}, "n[99-100]"},
      {{"node01", "node02", "node03", "node04"}, "node[01-04]"},
      {{"rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"}, "rack1-n[01-02],rack2-n[01-02]"},
      {{"a", "b"}, "a,b"},
      {{"n1", "n1"}, "n[1,1]"},
      {{"n1", "n2", "n2", "n3"}, "n[1-2,2-3]"},
      {{"login"}, "login"},
      {{"x", "n1"}, "x,n1"},
      {{"1", "2", "3"}, "[1-3]"},
      {{"n001", "n002", "n2"}, "n[001-002,2]"},
      {{"n0", "n1"}, "n[0-1]"},
      {{"n00", "n01"}, "n[00-01]"},
      {{"a1b", "a2b"}, "a1b,a2b"},
      {{"n1", "n3", "n5"}, "n[1,3,5]"},
      {{"n2", "n1"}, "n[2,1]"},
      {{"gpu1", "login1", "gpu2"}, "gpu1,login1,gpu2"},
      {{"n01", "n1"}, "n[01,1]"},
      {{"n7", "n08", "n09"}, "n[7,08-09]"},
      {{}, ""},
  };
  for (const auto& [hosts, list] : cases) {
    EXPECT_EQ(compress_hostlist(hosts), list);
    EXPECT_EQ(expand_hostlist(list), hosts) << list;
  }
  EXPECT_THROW(compress_hostlist({"a[1]"}), InputError);
  EXPECT_THROW(compress_hostlist({""}), InputError);
  EXPECT_THROW(compress_hostlist({"a b"}), InputError);
}

TEST(Hostlist, CompressionRoundTripsRandomLists) {
  std::mt19937 rng(7);
  const std::array<std::string, 4> prefixes = {"n", "gpu", "rack1-n", ""};
  for (int trial = 0; trial < 500; ++trial) {
    Hosts hosts;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const std::string& prefix = prefixes[rng() % prefixes.size()];
      const int width = static_cast<int>(rng() % 4);  // 0: unpadded
      const unsigned value = rng() % 120;
      std::string digits = std::to_string(value);
      if (static_cast<int>(digits.size()) < width)
        digits.insert(0, static_cast<std::size_t>(width) - digits.size(), '0');
      hosts.push_back(prefix.empty() && rng() % 5 == 0 ? std::string("login") : prefix + digits);
    }
    const std::string list = compress_hostlist(hosts);
    EXPECT_EQ(expand_hostlist(list), hosts) << list;
  }
}

// Runs a command; its stdout, or nullopt when it fails.
std::optional<std::string> run(const std::string& command) {
  FILE* p = ::popen((command + " 2>/dev/null").c_str(), "r");
  if (p == nullptr) return std::nullopt;
  std::string out;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) out += buf.data();
  if (::pclose(p) != 0) return std::nullopt;
  return out;
}

// Against a live scontrol: skipped unless `scontrol show hostnames` works here (it needs a
// slurm.conf, e.g. SLURM_CONF from slurm/local-slurm.sh).
TEST(HostlistScontrol, MatchesLiveScontrol) {
  const std::optional<std::string> probe = run("scontrol show hostnames 'n[1-2]'");
  if (!probe || *probe != "n1\nn2\n")
    GTEST_SKIP() << "scontrol show hostnames does not work here (no slurm.conf; start "
                    "slurm/local-slurm.sh and set SLURM_CONF)";
  const std::vector<std::string> lists = {
      "gpu[1,3-5],login1", "rack[1-2]-n[01-02]", "node[01-04]",  "n[8-11]", "a,,b",
      "n[1-010]",          "n[001-3]",           "a[1-2]b[1-2]", "n[1,1]",  "[1-3]",
      "n[3,1-2]",          "n[9,010]",           "n[99-100],x",  "a b"};
  for (const std::string& list : lists) {
    const std::optional<std::string> out =
        run("scontrol show hostnames " + slurm::shell_quote(list));
    ASSERT_TRUE(out) << list;
    std::istringstream lines(*out);
    Hosts expected;
    for (std::string h; std::getline(lines, h);) expected.push_back(h);
    EXPECT_EQ(expand_hostlist(list), expected) << list;

    std::string joined;
    for (const auto& h : expected) joined += (joined.empty() ? "" : ",") + h;
    const std::optional<std::string> compressed =
        run("scontrol show hostlist " + slurm::shell_quote(joined));
    ASSERT_TRUE(compressed) << joined;
    EXPECT_EQ(compress_hostlist(expected) + "\n", *compressed) << joined;
  }
  // scontrol reports these on stderr ("Invalid hostlist") but exits 0 with nothing on stdout.
  for (const std::string bad : {"a[009-011]b", "n[3-1]", "n[a-b]", "n[]", "n[1,]"}) {
    EXPECT_EQ(run("scontrol show hostnames " + slurm::shell_quote(bad)).value_or(""), "") << bad;
    EXPECT_THROW(expand_hostlist(bad), InputError) << bad;
  }
}

}  // namespace
}  // namespace saturn::launch
