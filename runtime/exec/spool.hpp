// Requests to a batch while it runs (`saturn cancel`, `saturn submit`): one JSON file each in
// RUN_DIR/spool, written atomically (a temporary name, then a rename), so rank 0's coordinator
// never reads half of one. The coordinator takes them in name order (their names start with the
// time they were made) and moves each to spool/done, or spool/rejected when it cannot be read. A
// request made while no run is going waits there for `saturn run --resume`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "runtime/workload/workload.hpp"

namespace saturn::exec {

struct SpoolRequest {
  std::filesystem::path run_dir;  // whose spool it came from
  std::filesystem::path file;     // where it is now (spool/done or spool/rejected)
  std::string kind;               // "cancel" or "submit"
  std::vector<std::string> jobs;  // cancel: the ids to cancel; submit: the ids it adds
  Submission submission;          // submit: the jobs' YAML and the file it came from
  std::string error;              // not empty: the request could not be read (it was rejected)
};

std::filesystem::path spool_dir(const std::filesystem::path& run_dir);

// Writes a cancel request for these job ids; returns its path. Throws IoError.
std::filesystem::path write_cancel_request(const std::filesystem::path& run_dir,
                                           const std::vector<std::string>& job_ids);

// Writes a submit request: `submission` (validated against the batch) adding jobs `ids`;
// returns its path. Throws IoError.
std::filesystem::path write_submit_request(const std::filesystem::path& run_dir,
                                           const Submission& submission,
                                           const std::vector<std::string>& ids);

// Submit requests written but not yet taken by a run, oldest first (what a new submission is
// checked against besides the accepted ones).
std::vector<Submission> waiting_submissions(const std::filesystem::path& run_dir);

// A submit request the coordinator took and recorded in RUN_DIR/submitted: moved to spool/done.
void finish_taken_request(SpoolRequest& request);

// A request the coordinator took but refuses (a submission whose ids a request accepted
// meanwhile took): moved to spool/rejected, with the reason beside it (NAME.reason).
void reject_taken_request(SpoolRequest& request, const std::string& reason);

// The requests waiting in RUN_DIR/spool, oldest first. Each is moved out of the way (to
// spool/done, or spool/rejected when unreadable), except a readable submit request: it stays
// in the spool until the coordinator has recorded it (finish_taken_request) or refused it
// (reject_taken_request), so that a crash between taking and recording loses nothing.
std::vector<SpoolRequest> take_spool_requests(const std::filesystem::path& run_dir);

}  // namespace saturn::exec
