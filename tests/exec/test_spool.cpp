// RUN_DIR/spool (saturn cancel, saturn submit) and RUN_DIR/submitted, without a run: requests
// round-trip, are taken in the order they were made, and a refused submission ends in
// spool/rejected with its reason.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/exec/spool.hpp"
#include "runtime/workload/run_workload.hpp"
#include "tests/data/test_util.hpp"

namespace saturn::exec {
namespace {

namespace fs = std::filesystem;
using saturn::testing::TempDir;

TEST(Spool, SubmitAndCancelRequestsInOrder) {
  TempDir dir;
  const Submission more{dir / "more.yaml", "jobs:\n  - {name: x, model: small}\n"};
  write_submit_request(dir.path(), more, {"x"});
  write_cancel_request(dir.path(), {"a", "b"});
  // Waiting (not taken yet): what a later `saturn submit` is checked against.
  const auto waiting = waiting_submissions(dir.path());
  ASSERT_EQ(waiting.size(), 1u);
  EXPECT_EQ(waiting[0].source, more.source);
  EXPECT_EQ(waiting[0].yaml, more.yaml);
  auto taken = take_spool_requests(dir.path());
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].kind, "submit");
  EXPECT_EQ(taken[0].jobs, std::vector<std::string>{"x"});
  EXPECT_EQ(taken[0].submission.yaml, more.yaml);
  // A submit stays in the spool until recorded or refused (a crash in between loses nothing).
  EXPECT_EQ(taken[0].file.parent_path().filename(), "spool");
  EXPECT_EQ(taken[1].kind, "cancel");
  EXPECT_EQ(taken[1].jobs, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(taken[1].file.parent_path().filename(), "done");
  EXPECT_EQ(waiting_submissions(dir.path()).size(), 1u);
  const auto again = take_spool_requests(dir.path());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, "submit");
  SpoolRequest recorded = again[0];
  finish_taken_request(recorded);
  EXPECT_EQ(recorded.file.parent_path().filename(), "done");
  EXPECT_TRUE(fs::exists(recorded.file));
  EXPECT_TRUE(waiting_submissions(dir.path()).empty());
  EXPECT_TRUE(take_spool_requests(dir.path()).empty());
  write_submit_request(dir.path(), more, {"x"});
  taken = take_spool_requests(dir.path());
  ASSERT_EQ(taken.size(), 1u);

  reject_taken_request(taken[0], "job id 'x' is already in the batch");
  EXPECT_EQ(taken[0].file.parent_path().filename(), "rejected");
  EXPECT_TRUE(fs::exists(taken[0].file));
  std::ifstream reason(taken[0].file.string() + ".reason");
  std::stringstream text;
  text << reason.rdbuf();
  EXPECT_EQ(text.str(), "job id 'x' is already in the batch\n");
}

TEST(Spool, UnreadableRequestIsRejected) {
  TempDir dir;
  fs::create_directories(spool_dir(dir.path()));
  std::ofstream(spool_dir(dir.path()) / "1-1-submit.json") << R"({"kind": "submit", "jobs": []})";
  std::ofstream(spool_dir(dir.path()) / "2-1-submit.json.tmp.7") << "half";
  const auto taken = take_spool_requests(dir.path());
  ASSERT_EQ(taken.size(), 1u);  // the temporary is still being written
  EXPECT_FALSE(taken[0].error.empty());
  EXPECT_EQ(taken[0].file.parent_path().filename(), "rejected");
}

TEST(Submitted, AcceptedInOrder) {
  TempDir dir;
  EXPECT_TRUE(accepted_submissions(dir.path()).empty());
  record_accepted_submission(dir.path(), "2-1-submit.json", {"/b.yaml", "jobs: [b]"}, {"b"});
  record_accepted_submission(dir.path(), "1-1-submit.json", {"/a.yaml", "jobs: [a]"}, {"a"});
  const auto subs = accepted_submissions(dir.path());
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].source, "/a.yaml");
  EXPECT_EQ(subs[1].yaml, "jobs: [b]");
  std::ofstream(submitted_dir(dir.path()) / "3-1-submit.json") << "{}";
  EXPECT_THROW(accepted_submissions(dir.path()), InputError);
}

// Kept in the order rank 0 accepted them, whatever the requests' own (clock-based) names say,
// and a request once kept is known by its name.
TEST(Submitted, NamedInTheOrderAccepted) {
  TempDir dir;
  // The second request accepted was written on a host whose clock lags: its name sorts first.
  record_accepted_submission(dir.path(), accepted_name(1, "1700000002-7-submit.json"),
                             {"/first.yaml", "jobs: [a]"}, {"a"});
  record_accepted_submission(dir.path(), accepted_name(2, "1700000001-9-submit.json"),
                             {"/second.yaml", "jobs: [b]"}, {"b"});
  const auto subs = accepted_submissions(dir.path());
  ASSERT_EQ(subs.size(), 2u);
  EXPECT_EQ(subs[0].source, "/first.yaml");
  EXPECT_EQ(subs[1].source, "/second.yaml");
  EXPECT_TRUE(submission_recorded(dir.path(), "1700000001-9-submit.json"));
  EXPECT_TRUE(submission_recorded(dir.path(), "1700000002-7-submit.json"));
  EXPECT_FALSE(submission_recorded(dir.path(), "1700000003-1-submit.json"));
  EXPECT_FALSE(submission_recorded(dir.path(), "9-submit.json"));
}

}  // namespace
}  // namespace saturn::exec
