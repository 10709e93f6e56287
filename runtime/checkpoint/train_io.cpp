#include "runtime/checkpoint/train_io.hpp"

#include <fmt/format.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "runtime/checkpoint/mpi_env.hpp"
#include "runtime/checkpoint/slices.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/files.hpp"
#include "runtime/core/log.hpp"
#include "runtime/workload/config_json.hpp"

namespace saturn::ckpt {

namespace fs = std::filesystem;

StateView single_device_view(const ParameterLayout& layout, float* params, float* m, float* v) {
  StateView view;
  view.params = whole_tensor_slices(layout, params);
  if (m) view.m = whole_tensor_slices(layout, m);
  if (v) view.v = whole_tensor_slices(layout, v);
  return view;
}

CheckpointMeta make_meta(const JobCheckpointing& job, const TrainPoint& point) {
  CheckpointMeta m;
  m.job_id = job.job_id;
  m.step = point.step;
  m.tokens_seen = point.step * job.train.batch_size * job.train.seq_len;
  m.model = job.model;
  m.train = job.train;
  m.strategy = job.strategy;
  m.devices = job.devices;
  m.data_position = data::format_position(point.position);
  m.compute_threads = job.compute_threads;
  m.base_model = job.base_model;
  m.base_checksum = job.base_checksum;
  m.rng_state =
      point.rng_state.empty() ? nlohmann::json{{"seed", job.train.seed}}.dump() : point.rng_state;
  return m;
}

bool checkpoint_due(const TrainConfig& train, std::int64_t step) {
  return train.checkpoint_every > 0 && step > 0 && step % train.checkpoint_every == 0;
}

namespace {

SliceSource source_of(const StateView& v) {
  return [&v](StatePart p) {
    return p == StatePart::kParams ? v.params : p == StatePart::kAdamM ? v.m : v.v;
  };
}

// Whether `job` may continue from a checkpoint with these root attributes: InputError when
// the file is not this job's to continue (refused: continuing would be silently wrong), another
// error when the attributes contradict each other (the file is not valid).
void check_resumable(const JobCheckpointing& job, const CheckpointMeta& m) {
  if (m.job_id != job.job_id)
    throw InputError(
        fmt::format("it belongs to job '{}', not to job '{}' (copied from another "
                    "job's directory?); move it away to resume this job",
                    m.job_id, job.job_id));
  if (m.step > job.train.steps)
    throw InputError(fmt::format(
        "it is at step {}, past job {}'s {} steps (were the workload's steps lowered?); give "
        "the job at least {} steps, or move its checkpoints away to train it from scratch",
        m.step, job.job_id, job.train.steps, m.step));
  if (m.train.batch_size != job.train.batch_size || m.train.seq_len != job.train.seq_len)
    throw InputError(fmt::format(
        "it was written with batch_size {} and seq_len {}, job {} now has {} and {}: a job "
        "continues with the batch size and sequence length it started with (its data position "
        "and token count are counted in them)",
        m.train.batch_size, m.train.seq_len, job.job_id, job.train.batch_size, job.train.seq_len));
  if (m.base_checksum != job.base_checksum)
    throw InputError(fmt::format(
        "its adapters were trained on the base model {} (weights checksum {}), job {} now starts "
        "from {} (checksum {}): adapters continue only on the base they were trained on (valid: "
        "the job's `from:` as it was, or move the checkpoints away to train from scratch)",
        m.base_model.empty() ? "(none: a full fine-tune)" : m.base_model,
        m.base_checksum.empty() ? "-" : m.base_checksum, job.job_id,
        job.base_model.empty() ? "(none: a full fine-tune)" : job.base_model,
        job.base_checksum.empty() ? "-" : job.base_checksum));
  if (const std::string why = check_consistency(m, job.sequences_per_epoch); !why.empty())
    throw std::runtime_error("inconsistent root attributes: " + why);
}

// Runs a save and agrees on its outcome over the job's ranks: a checkpoint that cannot be
// written (a full disk, an I/O error) fails the job on every rank alike, as comm::AgreedFailure,
// which `saturn run` reports as that job's failure (any other exception there stops the run).
fs::path agreed_save(comm::Communicator& comm, const std::function<fs::path()>& save) {
  fs::path file;
  comm::agree_on(comm, [&] { file = save(); });
  return file;
}

// Checkpoint files are written and read with MPI-IO over the job's ranks.
MPI_Comm mpi_handle(const comm::Communicator& comm) {
  const auto* mpi = dynamic_cast<const comm::MpiCommunicator*>(&comm);
  if (mpi == nullptr)
    throw Error(fmt::format(
        "checkpoints are written with MPI-IO over the job's ranks; its communicator ({}) is not "
        "an MPI one",
        comm.describe()));
  return mpi->handle();
}

}  // namespace

void check_checkpointable(const comm::Communicator& comm) {
  mpi_handle(comm);
}

fs::path save_training_checkpoint(comm::Communicator& comm, const JobCheckpointing& job,
                                  const TrainPoint& point, const StateView& state) {
  return save_training_checkpoint(comm, job, point, source_of(state));
}

fs::path save_training_checkpoint(comm::Communicator& comm, const JobCheckpointing& job,
                                  const TrainPoint& point, const SliceSource& source) {
  ensure_mpi();
  SaveOptions opt;
  opt.keep_last = job.keep_last;
  const fs::path file = agreed_save(comm, [&] {
    return save_step_checkpoint(mpi_handle(comm), job.job_dir, make_meta(job, point), source, opt);
  });
  if (comm.rank() == 0) log::info("job {}: checkpoint {}", job.job_id, file.string());
  return file;
}

fs::path save_final(comm::Communicator& comm, const JobCheckpointing& job, const TrainPoint& point,
                    const StateView& state) {
  return save_final(comm, job, point, source_of(state));
}

fs::path save_final(comm::Communicator& comm, const JobCheckpointing& job, const TrainPoint& point,
                    const SliceSource& source) {
  ensure_mpi();
  return agreed_save(comm, [&] {
    return save_final_checkpoint(mpi_handle(comm), job.job_dir, make_meta(job, point), source);
  });
}

std::optional<TrainPoint> resume_training(comm::Communicator& comm, const JobCheckpointing& job,
                                          const StateView& into) {
  return resume_training(comm, job, source_of(into), [](StatePart, const StateSlices&) {});
}

std::optional<TrainPoint> resume_training(comm::Communicator& comm, const JobCheckpointing& job,
                                          const SliceSource& source, const SliceSink& sink) {
  ensure_mpi();
  const int rank = comm.rank();
  ReadOptions opt;
  opt.expect_model = job.model;
  opt.check_meta = [&job](const CheckpointMeta& m) { check_resumable(job, m); };
  const auto loaded = load_newest_valid(mpi_handle(comm), job.job_dir, source, sink, opt);
  if (!loaded) {
    if (rank == 0)
      log::info("job {}: no checkpoint to resume from in {}; starting from step 0", job.job_id,
                checkpoints_dir(job.job_dir).string());
    return std::nullopt;
  }
  const CheckpointMeta& m = loaded->meta;
  if (rank == 0) {
    if (!m.meta_verified)
      log::warn(
          "checkpoint {} has no {} (written before it existed): its step, data position "
          "and configuration are not checksummed",
          loaded->file.string(), kMetaChecksumAttr);
    const auto saved = to_json(m.train), now = to_json(job.train);
    for (const auto& [key, value] : now.items())
      if (saved.contains(key) && saved[key] != value)
        log::warn("job {}: train_config.{} is {} now, {} in {}", job.job_id, key, value.dump(),
                  saved[key].dump(), loaded->file.filename().string());
    log::info("job {}: resuming from {} (step {}, data position {})", job.job_id,
              loaded->file.string(), m.step, m.data_position);
  }
  TrainPoint p;
  p.step = m.step;
  p.position = data::parse_position(m.data_position);
  p.rng_state = m.rng_state;
  p.compute_threads = m.compute_threads;
  return p;
}

void truncate_metrics(const fs::path& file, std::int64_t step) {
  std::error_code ec;
  if (!fs::exists(file, ec)) return;
  std::istringstream in(read_input_file(file));
  std::ostringstream kept;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    if (j["step"].get<std::int64_t>() <= step) kept << line << '\n';
  }
  std::ofstream out(file, std::ios::trunc);
  out << kept.str();
  if (!out) throw IoError(fmt::format("cannot rewrite {}", file.string()));
}

}  // namespace saturn::ckpt
