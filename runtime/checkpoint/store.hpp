// A job's checkpoints in the run directory (DESIGN.md "Run directory"):
//   jobs/<job-id>/checkpoints/step-00000500.h5 …   written atomically (checkpoint.hpp)
//   jobs/<job-id>/checkpoints/latest                text: the newest file's name, moved last
//   jobs/<job-id>/final.h5                          the final state, same format
// Saving keeps the newest `keep_last` step files. Loading takes the newest checkpoint that
// verifies: a corrupt or truncated one is reported (file and dataset) and the previous is used.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"

namespace saturn::ckpt {

// "step-00000500.h5" (8 digits, more when the step needs them).
std::string step_file_name(std::int64_t step);
// The step of a "step-NNNNNNNN.h5" name; nullopt for any other name (".tmp" files included).
std::optional<std::int64_t> parse_step_file_name(const std::string& name);

std::filesystem::path checkpoints_dir(const std::filesystem::path& job_dir);
std::filesystem::path final_path(const std::filesystem::path& job_dir);

struct SaveOptions {
  int keep_last = 3;  // step checkpoints kept after a save (>= 1; the newest is always kept)
  WriteOptions write;
};

// Writes checkpoints/step-<meta.step>.h5, then `latest` (tmp + rename), then deletes step files
// beyond the newest keep_last and stale *.tmp files. Collective; returns the file written.
std::filesystem::path save_step_checkpoint(MPI_Comm comm, const std::filesystem::path& job_dir,
                                           const CheckpointMeta& meta, const StateView& state,
                                           const SaveOptions& options = {});
std::filesystem::path save_step_checkpoint(MPI_Comm comm, const std::filesystem::path& job_dir,
                                           const CheckpointMeta& meta, const SliceSource& source,
                                           const SaveOptions& options = {});

// Writes final.h5 (atomically; `latest` is not touched). Collective.
std::filesystem::path save_final_checkpoint(MPI_Comm comm, const std::filesystem::path& job_dir,
                                            const CheckpointMeta& meta, const StateView& state,
                                            const WriteOptions& options = {});
std::filesystem::path save_final_checkpoint(MPI_Comm comm, const std::filesystem::path& job_dir,
                                            const CheckpointMeta& meta, const SliceSource& source,
                                            const WriteOptions& options = {});

// The file name `latest` holds (nullopt when absent or empty). Local, no MPI.
std::optional<std::string> read_latest(const std::filesystem::path& job_dir);

// Step checkpoints of the job, newest first (by step; `latest` does not reorder them, since a
// file only ever gets its final name after every rank's vote). Local, no MPI.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& job_dir);

struct LoadedCheckpoint {
  std::filesystem::path file;
  CheckpointMeta meta;
  std::vector<std::string> rejected;  // newer files that failed, with the reason (warned too)
};

// Loads the newest step checkpoint that reads and verifies into `into`; for each newer one that
// fails, logs a warning naming the file and dataset and tries the previous. nullopt when the
// job has no checkpoint. When it has some but none is valid, throws IoError listing why (the
// holder's state is partly overwritten then, and starting over silently would hide the loss).
// InputError (thrown, not skipped) when a file is valid but holds another model than
// options.expect_model. Collective: rank 0 lists the directory and broadcasts it.
std::optional<LoadedCheckpoint> load_newest_valid(MPI_Comm comm,
                                                  const std::filesystem::path& job_dir,
                                                  const StateView& into,
                                                  const ReadOptions& options = {});
std::optional<LoadedCheckpoint> load_newest_valid(MPI_Comm comm,
                                                  const std::filesystem::path& job_dir,
                                                  const SliceSource& source, const SliceSink& sink,
                                                  const ReadOptions& options = {});

// The newest step checkpoint whose every dataset verifies (reads whole files, keeps nothing).
std::optional<std::filesystem::path> find_newest_valid(MPI_Comm comm,
                                                       const std::filesystem::path& job_dir);

}  // namespace saturn::ckpt
