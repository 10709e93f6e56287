// One checkpoint file (DESIGN.md "Checkpoint"): parameters and AdamW moments as float32 datasets
// of canonical shape under /model/<name>, /optimizer/m/<name>, /optimizer/v/<name>, each with a
// `checksum` attribute (checksum.hpp), and the job's training state as root attributes.
//
// Writing and reading are collective over any communicator (a job's sub-communicator, or
// MPI_COMM_SELF for one process). Each rank passes the slices it holds (TensorSlice boxes); they
// are written and read as hyperslabs of the canonical datasets with collective MPI-IO, so no
// rank ever holds more than its own slices. Replicated data (DDP replicas, biases every
// tensor-parallel rank holds) is passed by every holder: slices marked writer = false are not
// written, and of identical boxes still marked as writers, the lowest rank's is written. Every
// failure is agreed by all ranks first and then thrown on every rank as the same CheckpointError,
// so a failing rank never leaves the others hanging.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/error.hpp"
#include "runtime/model/config.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::ckpt {

inline constexpr const char* kFormat = "saturn-checkpoint";
inline constexpr int kVersion = 1;
// Root attribute: a checksum over every other root attribute (docs/checkpoints.md). HDF5
// checksums its object headers but not the heap that holds variable-length strings.
inline constexpr const char* kMetaChecksumAttr = "meta_checksum";

// A checkpoint that cannot be written, read or verified. file() and dataset() ("" when the
// failure is not about one dataset, e.g. a truncated file) are also in what().
class CheckpointError : public IoError {
 public:
  CheckpointError(std::filesystem::path file, std::string dataset, const std::string& message);
  const std::filesystem::path& file() const { return file_; }
  const std::string& dataset() const { return dataset_; }

 private:
  std::filesystem::path file_;
  std::string dataset_;
};

// Root attributes. Rank 0's values are written (all ranks must describe the same state).
struct CheckpointMeta {
  std::string job_id;
  std::int64_t step = 0;         // optimizer steps completed
  std::int64_t tokens_seen = 0;  // training tokens consumed
  // Learning-rate schedule position when it differs from step; -1: same as step (no attribute).
  std::int64_t schedule_step = -1;
  ModelConfig model;  // attribute model_config (JSON)
  TrainConfig train;  // attribute train_config (JSON)
  std::string strategy = "single";
  int devices = 1;
  std::string data_position = "0:0";  // data::format_position
  std::string rng_state;              // opaque to checkpoints (the trainer's RNG streams)
  int compute_threads = 0;            // threads per rank that wrote it (0: not recorded)
  std::string created_utc;            // ISO 8601; set by write_checkpoint
  // A LoRA job's frozen base, which its checkpoints do not hold: where it came from (the
  // Hugging Face directory, or "seed N" for a random one) and base_checksum_text() of its
  // weights. Empty without LoRA.
  std::string base_model;
  std::string base_checksum;
  // Read: the file's meta_checksum matched (false: a file written before it existed).
  bool meta_verified = false;

  std::int64_t schedule_position() const { return schedule_step >= 0 ? schedule_step : step; }
};

// Whether the fields a resume uses agree with each other: tokens_seen = step x batch_size x
// seq_len (the file's train_config), and the data position is where step x batch_size training
// sequences lead: exactly, given the data's sequences per epoch (> 0), else as far as the
// position alone tells (EPOCH:INDEX must fit some epoch length above INDEX). "" when they agree,
// else what does not.
std::string check_consistency(const CheckpointMeta& meta, std::uint64_t sequences_per_epoch = 0);

// What one rank holds (to write) or wants (to read). m and v may be empty on every rank (weights
// only); otherwise they must cover the same tensors as params.
struct StateView {
  StateSlices params;
  StateSlices m;
  StateSlices v;
};

// The same, one part at a time, for holders whose slices stay valid only until the next export
// (parallel::Strategy::export_state): the checkpoint asks for each part once, in this order,
// and is done with one part's slices before it asks for the next.
enum class StatePart { kParams = 0, kAdamM = 1, kAdamV = 2 };
using SliceSource = std::function<StateSlices(StatePart)>;
// Called (on every rank) once a part's slices are filled and verified, e.g. import_state.
using SliceSink = std::function<void(StatePart, const StateSlices&)>;

struct WriteOptions {
  // fsync the file (rank 0, after the collective close and an MPI_File_sync of all ranks'
  // data) and its directory after the rename. Off only for benchmarks of the HDF5 path itself.
  bool durable = true;
  // The HDF5 transfers are collective (H5FD_MPIO_COLLECTIVE) either way. false (default): under
  // them each rank does its own MPI-IO on its contiguous runs (H5FD_MPIO_INDIVIDUAL_IO), which
  // measured 1.5-2x faster here, since a rank's slices are large. true: two-phase collective
  // buffering, where aggregator ranks do the I/O for all (ROMIO/OMPIO "cb"), which can suit
  // many small slices on a parallel file system.
  bool two_phase_io = false;
};

// Writes `path` atomically: path.tmp is created and filled collectively, closed, every rank
// votes (MPI_Allreduce MIN), then rank 0 fsyncs, renames it to `path` and fsyncs the directory.
// Throws on every rank (CheckpointError naming file and dataset; Error for slices that do not
// tile the model) and leaves `path` untouched when anything failed.
// Validates before touching the file: names and shapes must be those of meta.model's layout,
// and the ranks' boxes (after merging identical ones) must cover each tensor exactly once.
void write_checkpoint(MPI_Comm comm, const std::filesystem::path& path, const CheckpointMeta& meta,
                      const StateView& state, const WriteOptions& options = {});
void write_checkpoint(MPI_Comm comm, const std::filesystem::path& path, const CheckpointMeta& meta,
                      const SliceSource& source, const WriteOptions& options = {});

enum class Verify {
  kNone,  // no checksums
  kRead,  // datasets the ranks' requests cover exactly (after merging identical boxes) are
          // verified from the data read; others are not
  kAll,   // as kRead, plus every other dataset of the file is read in equal flat parts by the
          // ranks and verified (nothing is verified twice)
};

struct ReadOptions {
  Verify verify = Verify::kAll;
  bool two_phase_io = false;  // as WriteOptions::two_phase_io
  // When set, the checkpoint's model must have exactly this layout (names and shapes), else
  // InputError (the file is valid, it is just not this job's model).
  std::optional<ModelConfig> expect_model;
  // When set, called on every rank with the root attributes before any tensor is read. It
  // throws InputError for a file that is not this job's to load (refused), anything else for a
  // file that is not valid (a CheckpointError: load_newest_valid tries the previous one).
  std::function<void(const CheckpointMeta&)> check_meta;
};

// Reads the root attributes only (collective). Throws CheckpointError.
CheckpointMeta read_meta(MPI_Comm comm, const std::filesystem::path& path);

// Reads the slices each rank asks for (their shape fields must match the file) and verifies the
// file: format, version, every dataset's name and shape against the checkpoint's model
// config, and checksums per `options.verify`. Returns the metadata. Collective.
CheckpointMeta read_checkpoint(MPI_Comm comm, const std::filesystem::path& path,
                               const StateView& into, const ReadOptions& options = {});
// Part by part: source(part) gives the slices to fill, sink(part, slices) receives them filled
// and verified. A part nobody asks for (empty on every rank) is not read (only verified, with
// Verify::kAll) and sink is not called for it. If a later part fails, earlier parts have
// already been delivered: the holder's state is then mixed (load_newest_valid goes on to load
// an older checkpoint over all of it).
CheckpointMeta read_checkpoint(MPI_Comm comm, const std::filesystem::path& path,
                               const SliceSource& source, const SliceSink& sink,
                               const ReadOptions& options = {});

// One dataset as `saturn ckpt inspect` shows it.
struct DatasetInfo {
  std::string path;  // "/model/<name>", "/optimizer/m/<name>", ...
  std::vector<std::int64_t> shape;
  std::uint64_t stored_checksum = 0;
  std::uint64_t computed_checksum = 0;  // when verified
  bool verified = false;
  bool ok = false;  // verified and equal
};

struct CheckpointInfo {
  CheckpointMeta meta;
  std::vector<DatasetInfo> datasets;
  bool all_ok() const;
};

// Metadata and every dataset, each checksum recomputed from the whole dataset read in equal
// flat parts by the ranks, when `verify` (collective). A checksum mismatch is reported in the
// result, not thrown; a file that cannot be read throws CheckpointError.
CheckpointInfo scan_checkpoint(MPI_Comm comm, const std::filesystem::path& path, bool verify);

// Streams the weights (/model) on one process (MPI_COMM_SELF), whole tensor by whole tensor in
// layout order, each verified against its checksum before `f` sees it (CheckpointError naming
// the dataset otherwise). For tools that convert checkpoints; returns the metadata.
using TensorVisitor =
    std::function<void(const std::string& name, const std::vector<std::int64_t>& shape,
                       const float* data, std::size_t elements)>;
CheckpointMeta visit_model_tensors(const std::filesystem::path& path, const TensorVisitor& f);

// Test hook, for fault-injection tests only: with SATURN_CKPT_TEST_KILL="RANK:N[:SUBSTRING]" in
// the environment, rank RANK of a writing communicator kills itself (SIGKILL) after writing N
// datasets of a checkpoint whose path contains SUBSTRING (any, when absent): a crash in the
// middle of a write.
inline constexpr const char* kTestKillEnv = "SATURN_CKPT_TEST_KILL";
// Test hook: with SATURN_CKPT_TEST_NO_RESERVE set, no disk space is reserved before a write, as
// on a file system that cannot preallocate: a full disk then fails inside HDF5's writes.
inline constexpr const char* kTestNoReserveEnv = "SATURN_CKPT_TEST_NO_RESERVE";

}  // namespace saturn::ckpt
