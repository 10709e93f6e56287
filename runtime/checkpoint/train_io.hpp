// What a trainer calls to checkpoint and resume a job: the metadata it saves beside the tensors
// (step, tokens, data position, RNG state), when a checkpoint is due, and where training
// continues after --resume. Strategy-agnostic: the trainer passes its StateView (what this rank
// holds); single_device_view builds it for one device holding everything.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/store.hpp"
#include "runtime/comm/communicator.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::ckpt {

// The job being trained, as checkpoints describe it.
struct JobCheckpointing {
  std::string job_id;
  ModelConfig model;
  TrainConfig train;
  std::string strategy = "single";
  int devices = 1;
  std::filesystem::path job_dir;  // jobs/<job-id>
  int keep_last = 3;
  int compute_threads = 0;  // threads per rank of this segment, recorded in its checkpoints
  // Sequences per epoch of the training data (0: unknown): resuming checks the checkpoint's
  // data position against it exactly.
  std::uint64_t sequences_per_epoch = 0;
  // A LoRA job's base (CheckpointMeta::base_model, base_checksum): recorded in its checkpoints,
  // and a resume refuses a checkpoint trained on another base.
  std::string base_model{};
  std::string base_checksum{};
};

// Where training stands after `step` optimizer steps.
struct TrainPoint {
  std::int64_t step = 0;
  data::LoaderPosition position;  // the training loader's, after the step
  std::string rng_state;          // "" : {"seed": train.seed} (no other stream is drawn from)
  int compute_threads = 0;        // resume: threads per rank of the run that wrote it (0: unknown)
};

// Whole tensors of one device's flat buffers (parameters, AdamW m and v over the whole layout).
StateView single_device_view(const ParameterLayout& layout, float* params, float* m, float* v);

CheckpointMeta make_meta(const JobCheckpointing& job, const TrainPoint& point);

// checkpoint_every > 0 and step a multiple of it.
bool checkpoint_due(const TrainConfig& train, std::int64_t step);

// Error unless checkpoints can be written over `comm` (MPI-IO needs an MPI communicator): what
// a trainer checks before it trains.
void check_checkpointable(const comm::Communicator& comm);

// jobs/<id>/checkpoints/step-<step>.h5, `latest`, retention. Collective over comm; a failure
// (e.g. a full disk) is agreed by the ranks and thrown on all as comm::AgreedFailure. A parallel
// trainer passes a SliceSource, e.g.
//   [&](ckpt::StatePart p) { return strategy.export_state(parallel::StateKind(int(p))); }
std::filesystem::path save_training_checkpoint(comm::Communicator& comm,
                                               const JobCheckpointing& job, const TrainPoint& point,
                                               const StateView& state);
std::filesystem::path save_training_checkpoint(comm::Communicator& comm,
                                               const JobCheckpointing& job, const TrainPoint& point,
                                               const SliceSource& source);
// jobs/<id>/final.h5. Collective over comm; failures as save_training_checkpoint's.
std::filesystem::path save_final(comm::Communicator& comm, const JobCheckpointing& job,
                                 const TrainPoint& point, const StateView& state);
std::filesystem::path save_final(comm::Communicator& comm, const JobCheckpointing& job,
                                 const TrainPoint& point, const SliceSource& source);

// Loads the newest valid checkpoint of the job into `into` (falling back past corrupt ones,
// with warnings) and returns where to continue; nullopt when the job has no checkpoint
// (training starts from scratch). A checkpoint whose step, tokens_seen and data position do
// not agree (check_consistency) is not valid. IoError when it has some but none is valid;
// InputError, refusing to resume, when the newest valid one is not this job's: another job's,
// another model, another batch_size or seq_len, or a step past the job's steps. Collective
// over comm. A parallel trainer passes a source (export_state) and a sink (import_state).
std::optional<TrainPoint> resume_training(comm::Communicator& comm, const JobCheckpointing& job,
                                          const StateView& into);
std::optional<TrainPoint> resume_training(comm::Communicator& comm, const JobCheckpointing& job,
                                          const SliceSource& source, const SliceSink& sink);

// Keeps the records of metrics.jsonl up to `step` (a resumed run appends after them).
void truncate_metrics(const std::filesystem::path& file, std::int64_t step);

}  // namespace saturn::ckpt
