// Requests to a batch while it runs (`saturn cancel`): one JSON file each in RUN_DIR/spool,
// written atomically (a temporary name, then a rename), so rank 0's coordinator never reads
// half of one. The coordinator takes them in name order (their names start with the time they
// were made) and moves each to spool/done, or spool/rejected when it cannot be read. A request
// made while no run is going waits there for `saturn run --resume`.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace saturn::exec {

struct SpoolRequest {
  std::filesystem::path file;  // where it is now (spool/done or spool/rejected)
  std::string kind;            // "cancel"
  std::vector<std::string> jobs;
  std::string error;  // not empty: the request could not be read (it was rejected)
};

std::filesystem::path spool_dir(const std::filesystem::path& run_dir);

// Writes a cancel request for these job ids; returns its path. Throws IoError.
std::filesystem::path write_cancel_request(const std::filesystem::path& run_dir,
                                           const std::vector<std::string>& job_ids);

// The requests waiting in RUN_DIR/spool, oldest first; each is moved out of the way.
std::vector<SpoolRequest> take_spool_requests(const std::filesystem::path& run_dir);

}  // namespace saturn::exec
