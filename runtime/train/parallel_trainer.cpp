#include "runtime/train/parallel_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/checkpoint/train_io.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/clock.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/parallel/assemble.hpp"

namespace saturn {

TrainResult train_with_strategy(const TrainJob& job, const TrainOptions& options,
                                const ParallelOptions& par, comm::Communicator& comm) {
  const TrainConfig& tc = job.train;
  const int rank = comm.rank();
  parallel::StrategySpec spec{job.model, job.train, par.degree, par.knobs, options.device};
  if (spec.knobs.device_capacity == 0) spec.knobs.device_capacity = options.device_capacity;
  if (spec.knobs.host_capacity == 0) spec.knobs.host_capacity = options.host_capacity;

  // Declared in this order so that the strategy goes first: it returns its buffers to the
  // device and the pool, and its communicators are split from `comms`.
  std::unique_ptr<Device> device;
  // Offload's host state, in the memory the device copies from (pinned on a GPU): made with
  // the device, which owns its allocator.
  std::unique_ptr<MemoryPool> host;
  std::unique_ptr<comm::CommPair> comms;
  std::unique_ptr<parallel::Strategy> strategy;
  std::optional<data::TokenLoader> train_loader, val_loader;
  parallel::Estimate estimate;
  // 1. Local checks, identical on every rank except for the device and the data files each
  // rank opens.
  comm::agree_on(comm, [&] {
    if (par.degree != comm.size())
      throw InputError(
          fmt::format("--degree {} but {} ranks were started: the degree must equal "
                      "the number of ranks (mpirun -np {})",
                      par.degree, comm.size(), par.degree));
    strategy = parallel::make_strategy(par.strategy, spec);
    estimate = strategy->estimate();
    if (!estimate.feasible)
      throw InputError(fmt::format("job {}: strategy {} at degree {} is infeasible: {}", job.id,
                                   par.strategy, par.degree, estimate.reason));
    train_loader.emplace(
        data::TokenArray::open(job.train_data, static_cast<std::uint32_t>(job.model.vocab_size)),
        tc.seq_len, tc.seed);
    val_loader.emplace(data::TokenLoader::validation(
        data::TokenArray::open(job.val_data, static_cast<std::uint32_t>(job.model.vocab_size)),
        tc.seq_len));
    // The rank's own device: what the launch binding chose, else (a GPU) its node-local rank;
    // a CPU "device" index only names the pool.
    int index = options.device_index;
    if (index < 0)
      index = options.device == DeviceKind::kCpu ? rank : std::max(0, comm::launcher_local_rank());
    device = make_device(options.device, index, spec.knobs.device_capacity);
    host = std::make_unique<MemoryPool>(fmt::format("host:{}", rank), spec.knobs.host_capacity,
                                        device->host_allocator());
  });
  // The data communicator (a duplicate of `comm`, staged when device memory is not host
  // memory): collective, so created once every rank has its device.
  comms = comm::make_comm_pair(comm, *device);

  // 2. Set-up: sub-communicators, then allocation and initial weights.
  comm::agree_on(comm, [&] { strategy->setup(*comms, *device, *host); });

  // 3. Checkpoints go through MPI-IO on the job's communicator; resume from the newest valid
  // one when asked (any strategy and degree wrote it: the layout is canonical).
  const auto* mpi = dynamic_cast<const comm::MpiCommunicator*>(&comm);
  if (mpi == nullptr && !options.job_dir.empty())
    throw Error("checkpoints need an MPI communicator for the job's ranks");
  ckpt::JobCheckpointing ck{
      job.id, job.model, tc, par.strategy, par.degree, options.job_dir, options.keep_checkpoints};
  ck.compute_threads = cpu::compute_threads();
  ck.sequences_per_epoch = train_loader->num_sequences();
  const ckpt::SliceSource source = [&](ckpt::StatePart part) {
    return strategy->export_state(static_cast<parallel::StateKind>(static_cast<int>(part)));
  };
  const ckpt::SliceSink sink = [&](ckpt::StatePart part, const StateSlices& slices) {
    strategy->import_state(static_cast<parallel::StateKind>(static_cast<int>(part)), slices);
  };
  std::int64_t first_step = 0;
  if (options.resume && !options.job_dir.empty()) {
    comm::agree_on(comm, [&] {
      if (const auto p = ckpt::resume_training(mpi->handle(), ck, source, sink)) {
        first_step = p->step;
        train_loader->seek(p->position);
      }
    });
  }
  // Pre-trained weights: each rank reads the slices of the canonical tensors it holds (as a
  // checkpoint restore does), straight from the safetensors files. Not after a resume, whose
  // checkpoint already holds the trained weights.
  if (!job.init_from.empty() && first_step == 0) {
    comm::agree_on(comm, [&] {
      const hf::HfWeights weights(job.init_from, job.model);
      const StateSlices slices = strategy->export_state(parallel::StateKind::kParams);
      weights.fill(slices);
      strategy->import_state(parallel::StateKind::kParams, slices);
    });
    if (!options.quiet && rank == 0)
      log::info("job {}: weights from {}", job.id, job.init_from.string());
  }
  // Reproducible: GEMM bits independent of the thread count (ranks and runs may differ in it).
  const cpu::FixedGemmGrid grid(tc.reproducible);

  // 4. Rank 0 prepares the output.
  std::ofstream metrics;
  comm::agree_on(comm, [&] {
    if (rank != 0) return;
    if (par.prepare) par.prepare();
    if (!options.job_dir.empty()) {
      std::filesystem::create_directories(options.job_dir);
      const auto path = options.job_dir / "metrics.jsonl";
      if (first_step > 0) ckpt::truncate_metrics(path, first_step);
      metrics.open(path, std::ios::out | (first_step > 0 ? std::ios::app : std::ios::trunc));
      if (!metrics) throw IoError(fmt::format("cannot write {}", path.string()));
    }
  });

  const std::int64_t total_steps =
      options.max_steps >= 0 ? std::min(options.max_steps, tc.steps) : tc.steps;
  const std::int64_t evaluated_rows = eval_rows(tc);
  const int T = tc.seq_len;
  if (!options.quiet && rank == 0)
    log::info(
        "job {}: {} {}x{} d_model {} ({:.2f}M parameters), {} on {} ({}), batch {} in "
        "micro-batches of {} x {} tokens, {} steps; estimated peak {} per rank",
        job.id, arch_name(job.model.arch), job.model.n_layer, job.model.n_head, job.model.d_model,
        static_cast<double>(job.model.num_parameters()) / 1e6, par.strategy,
        par.degree == 1 ? device->describe() : fmt::format("{} ranks", par.degree), estimate.layout,
        tc.batch_size, estimate.micro_batch, T, total_steps, format_bytes(estimate.device_bytes));

  TrainResult result;
  // Before any checkpoint: whether a step's update left a weight or an AdamW moment non-finite
  // on some rank (its loss and gradient norm can still be finite: an update that overflows).
  // Such a state is never saved: with nonfinite_stops the job stops diverged at `step`, its
  // newest checkpoint the last good one; without, it fails. Collective over the job's ranks.
  const auto poisoned = [&](std::int64_t step) {
    // [0]: a weight, [1]: an AdamW moment is non-finite; [2]: the scan itself failed here
    // (e.g. a device copy): agreed in the same reduction, so no rank waits in it alone.
    std::int32_t bad[3] = {0, 0, 0};
    float first_bad[2] = {0, 0};  // the first non-finite value of each kind on this rank
    std::string scan_error;
    try {
      // Every rank exports every kind (the same calls on all of them), whatever it finds.
      for (const auto kind :
           {parallel::StateKind::kParams, parallel::StateKind::kAdamM, parallel::StateKind::kAdamV})
        for (const TensorSlice& slice : strategy->export_state(kind)) {
          const int k = kind == parallel::StateKind::kParams ? 0 : 1;
          const std::int64_t n = slice.elements();
          for (std::int64_t i = 0; i < n && bad[k] == 0; ++i)
            if (!std::isfinite(slice.data[i])) {
              bad[k] = 1;
              first_bad[k] = slice.data[i];
            }
        }
    } catch (const std::exception& e) {
      bad[2] = 1;
      scan_error = e.what();
    }
    comm.allreduce(bad, 3, comm::ReduceOp::kMax);
    if (bad[2] != 0)
      throw comm::AgreedFailure(
          fmt::format("job {}: checking the state before the checkpoint at step {} failed{}{}",
                      job.id, step, scan_error.empty() ? " on another rank" : ": ", scan_error),
          kExitFailure, 0);
    if (bad[0] == 0 && bad[1] == 0) return false;
    const char* what = bad[0] != 0 ? "weights" : "optimizer_state";
    if (!par.nonfinite_stops)
      throw comm::AgreedFailure(
          fmt::format("job {}: the {} became non-finite at step {} (its update overflowed; lower "
                      "the learning rate?); not checkpointed",
                      job.id, bad[0] != 0 ? "weights" : "AdamW moments", step),
          kExitFailure, 0);
    result.stopped = true;
    result.nonfinite_step = step;
    result.nonfinite_metric = what;
    // This rank's first bad value of that kind (another rank may hold it: then NaN).
    result.nonfinite_value = bad[0] != 0 ? first_bad[0] : first_bad[1];
    if (std::isfinite(result.nonfinite_value)) result.nonfinite_value = NAN;
    return true;
  };
  const auto t_start = Clock::now();
  auto t_last_print = t_start;
  double train_time = 0;  // excludes evaluation, for tokens/s
  data::Batch batch;
  std::int64_t done = first_step;
  // A job that starts from imported weights is evaluated before its first step: the val loss
  // of the model as imported (metrics line {"step": 0, "val_loss": ...}), the point of
  // comparison for the fine-tuning that follows.
  if (!job.init_from.empty() && first_step == 0) {
    val_loader->seek({0, 0});
    const double val0 = strategy->evaluate(val_loader->next_batch(evaluated_rows));
    if (metrics) {
      metrics << nlohmann::json{{"step", 0}, {"val_loss", val0}}.dump() << '\n';
      metrics.flush();
    }
    if (!options.quiet && rank == 0)
      log::info("job {}: val loss of the imported weights {:.4f}", job.id, val0);
  }
  for (std::int64_t step = first_step; step < total_steps; ++step) {
    const auto t0 = Clock::now();
    batch = train_loader->next_batch(tc.batch_size);
    const parallel::StepResult sr = strategy->train_step(batch, step);
    // The loss and the global gradient norm are reduced over the ranks, so every rank sees the
    // same values: an agreed failure. A non-finite norm poisons the update (the clip scale times
    // an infinite gradient) even while the loss still looks finite.
    if ((!std::isfinite(sr.loss) || !std::isfinite(sr.grad_norm)) && par.nonfinite_stops) {
      result.stopped = true;
      result.nonfinite_step = step + 1;
      result.nonfinite_metric = std::isfinite(sr.loss) ? "grad_norm" : "loss";
      result.nonfinite_value = std::isfinite(sr.loss) ? sr.grad_norm : sr.loss;
      break;
    }
    if (!std::isfinite(sr.loss) || !std::isfinite(sr.grad_norm))
      throw comm::AgreedFailure(
          fmt::format("job {}: {} became {} at step {} (lower the learning rate?)", job.id,
                      std::isfinite(sr.loss) ? "gradient norm" : "loss",
                      std::isfinite(sr.loss) ? sr.grad_norm : sr.loss, step + 1),
          kExitFailure, 0);
    const double dt = seconds_since(t0);
    train_time += dt;
    StepRecord r;
    r.step = step + 1;
    r.loss = sr.loss;
    r.lr = sr.lr;
    r.grad_norm = sr.grad_norm;
    r.tokens_per_s = static_cast<double>(tc.batch_size * T) / dt;
    const bool last = step + 1 == total_steps;
    if ((tc.eval_every > 0 && r.step % tc.eval_every == 0) || last) {
      r.has_val = true;
      val_loader->seek({0, 0});
      r.val_loss = strategy->evaluate(val_loader->next_batch(evaluated_rows));
    }
    r.time_s = seconds_since(t_start);
    result.steps.push_back(r);
    if (metrics) {
      nlohmann::json line = {{"step", r.step},
                             {"loss", r.loss},
                             {"lr", r.lr},
                             {"grad_norm", r.grad_norm},
                             {"tokens_per_s", r.tokens_per_s},
                             {"time_s", r.time_s}};
      if (r.has_val) line["val_loss"] = r.val_loss;
      metrics << line.dump() << '\n';
      metrics.flush();
    }
    if (!options.quiet && rank == 0 &&
        (r.has_val || seconds_since(t_last_print) >= options.progress_interval_s || r.step == 1)) {
      const std::int64_t ran = r.step - first_step;  // this process's steps
      const double rate = static_cast<double>(ran * tc.batch_size * T) / train_time;
      const double eta =
          static_cast<double>(total_steps - r.step) * train_time / static_cast<double>(ran);
      const std::string val = r.has_val ? fmt::format(" | val {:.4f}", r.val_loss) : "";
      log::info("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | {} tok/s | ETA {}", r.step,
                std::to_string(total_steps).size(), total_steps, r.loss, val, r.lr,
                format_rate(rate), format_clock(eta));
      t_last_print = Clock::now();
    }
    done = r.step;
    bool saved = false;
    if (!options.job_dir.empty() && ckpt::checkpoint_due(tc, r.step)) {
      if (poisoned(r.step)) break;
      ckpt::save_training_checkpoint(mpi->handle(), ck, {r.step, train_loader->position(), ""},
                                     source);
      saved = true;
    }
    // Every rank calls after_step (it agrees on the stop over the job's ranks). A stop that
    // comes after the last step changes nothing: the job is done and ends as finished, with
    // final.h5 (a resume would otherwise find nothing left to run and no final weights).
    const bool stop_requested = par.after_step && par.after_step(r);
    if (stop_requested && r.step < tc.steps) {
      if (!options.job_dir.empty() && !saved) {
        if (poisoned(r.step)) break;
        ckpt::save_training_checkpoint(mpi->handle(), ck, {r.step, train_loader->position(), ""},
                                       source);
      }
      result.stopped = true;
      break;
    }
  }
  result.steps_done = done;
  // final.h5 marks a finished job (saturn run --resume skips it): not after --max-steps.
  if (!result.stopped && done == tc.steps && !options.job_dir.empty() && !poisoned(done)) {
    const auto final_file =
        ckpt::save_final(mpi->handle(), ck, {done, train_loader->position(), ""}, source);
    if (options.export_hf)
      comm::agree_on(comm, [&] {
        if (rank != 0) return;
        ckpt::HfExportOptions hf_options;
        // The special tokens and tokenizer handed back; the directory may be gone by now
        // (a resumed run elsewhere), which costs them but not the weights.
        std::error_code ec;
        if (!job.init_from.empty() && std::filesystem::is_directory(job.init_from, ec))
          hf_options.origin = job.init_from;
        else if (!job.init_from.empty())
          log::warn(
              "job {}: {} is gone: the Hugging Face export has no tokenizer files and null "
              "special-token ids",
              job.id, job.init_from.string());
        const ckpt::HfExportResult r =
            ckpt::export_hf(final_file, options.job_dir / "hf", hf_options);
        if (!options.quiet)
          log::info("job {}: final weights as a Hugging Face model in {} ({} tensors)", job.id,
                    (options.job_dir / "hf").string(), r.tensors);
      });
  }
  std::int64_t peak = static_cast<std::int64_t>(device->memory().peak());
  comm.allreduce(&peak, 1, comm::ReduceOp::kMax);
  result.peak_device_bytes = static_cast<std::size_t>(peak);
  result.estimated_device_bytes = estimate.device_bytes;
  if (par.gather_final_params)
    result.final_params = parallel::assemble_canonical(
        comm, job.model, strategy->export_state(parallel::StateKind::kParams));
  if (!options.quiet && rank == 0) {
    const parallel::StrategyStats st = strategy->stats();
    log::info(
        "job {}: done in {}, peak device memory {} per rank (estimate {}), {:.0f}% of step time "
        "communicating (rank 0)",
        job.id, format_clock(seconds_since(t_start)), format_bytes(result.peak_device_bytes),
        format_bytes(estimate.device_bytes),
        st.step_s > 0 ? 100.0 * st.comm.seconds / st.step_s : 0.0);
  }
  return result;
}

TrainResult train_single_device(const TrainJob& job, const TrainOptions& options) {
  ParallelOptions par;
  par.strategy = "single";
  par.degree = 1;
  par.gather_final_params = true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    auto self = comm::MpiCommunicator::borrow(MPI_COMM_SELF);
    return train_with_strategy(job, options, par, *self);
  }
  // Without MPI there are no checkpoints (parallel HDF5 needs it).
  comm::SelfCommunicator self;
  return train_with_strategy(job, options, par, self);
}

}  // namespace saturn
