#include "runtime/train/parallel_trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/checkpoint/checksum.hpp"
#include "runtime/checkpoint/tools.hpp"
#include "runtime/comm/agree.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/clock.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/hf/hf_model.hpp"
#include "runtime/parallel/assemble.hpp"
#include "runtime/rundir/run_dir.hpp"

namespace saturn {

TrainOptions::Export export_option(const std::string& workload_export) {
  if (workload_export == "hf") return TrainOptions::Export::kHf;
  if (workload_export == "peft") return TrainOptions::Export::kPeft;
  if (!workload_export.empty())
    throw InputError(fmt::format("export: '{}' (valid: hf, peft)", workload_export));
  return TrainOptions::Export::kNone;
}

Trainer::Trainer(TrainJob job, TrainOptions options, ParallelOptions parallel,
                 comm::Communicator& comm)
    : job_(std::move(job)),
      options_(std::move(options)),
      par_(std::move(parallel)),
      comm_(comm),
      rank_(comm.rank()),
      spec_{job_.model, job_.train, par_.degree, par_.knobs, options_.resources.device} {
  if (spec_.knobs.device_capacity == 0)
    spec_.knobs.device_capacity = options_.resources.device_bytes;
  if (spec_.knobs.host_capacity == 0) spec_.knobs.host_capacity = options_.resources.host_bytes;
  total_steps_ =
      options_.max_steps >= 0 ? std::min(options_.max_steps, job_.train.steps) : job_.train.steps;
}

Trainer::~Trainer() = default;

TrainResult Trainer::run() {
  const auto t_run = Clock::now();
  setup();
  const std::int64_t first_step = resume();
  // Reproducible: GEMM bits independent of the thread count (ranks and runs may differ in it).
  const cpu::FixedGemmGrid grid(job_.train.reproducible);
  open_metrics(first_step);
  announce();
  t_start_ = t_last_print_ = Clock::now();
  done_ = first_step;
  if (!job_.init_from.empty() && first_step == 0) evaluate_imported();
  result_.times.setup_s = seconds_since(t_run);
  for (std::int64_t step = first_step; step < total_steps_; ++step) {
    const std::optional<StepRecord> r = train_step(step);
    if (!r) break;  // a non-finite loss or norm stopped the job
    // A step's bookkeeping (its metrics line, the ranks' agreement on stopping) is part of
    // what each step costs: counted with the steps, as the cost model prices them.
    auto t_book = Clock::now();
    record(*r, first_step);
    double book_s = seconds_since(t_book);
    const bool saved = ckpt::checkpoint_due(job_.train, r->step) && checkpoint(r->step);
    if (result_.stopped) break;  // the state was poisoned: stopped without a checkpoint
    t_book = Clock::now();
    const bool stop = stop_requested(*r);
    result_.times.steps_s += book_s + seconds_since(t_book);
    // A stop after the last step changes nothing: the job is done and ends as finished, with
    // final.h5 (a resume would otherwise find nothing left to run and no final weights).
    if (stop && r->step < job_.train.steps) {
      if (!saved) checkpoint(r->step);  // a poisoned state stops the job without one
      result_.stopped = true;
      break;
    }
  }
  finish();
  return std::move(result_);
}

// Local checks, identical on every rank except for the device and the data files each rank
// opens; then the communicators and the strategy's collective set-up, each agreed.
void Trainer::setup() {
  comm::agree_on(comm_, [&] {
    if (par_.degree != comm_.size())
      throw InputError(
          fmt::format("--degree {} but {} ranks were started: the degree must equal "
                      "the number of ranks (mpirun -np {})",
                      par_.degree, comm_.size(), par_.degree));
    strategy_ = parallel::make_strategy(par_.strategy, spec_);
    estimate_ = strategy_->estimate();
    if (!estimate_.feasible)
      throw InputError(fmt::format("job {}: strategy {} at degree {} is infeasible: {}", job_.id,
                                   par_.strategy, par_.degree, estimate_.reason));
    const auto vocab = static_cast<std::uint32_t>(job_.model.vocab_size);
    train_loader_.emplace(data::TokenArray::open(job_.train_data, vocab), job_.train.seq_len,
                          job_.train.seed);
    val_loader_.emplace(data::TokenLoader::validation(data::TokenArray::open(job_.val_data, vocab),
                                                      job_.train.seq_len));
    attach_instruction_data();
    // The rank's own device: what the launch binding chose, else (a GPU) its node-local rank;
    // a CPU "device" index only names the pool.
    const Resources& res = options_.resources;
    int index = res.device_index;
    if (index < 0)
      index = res.device == DeviceKind::kCpu ? rank_ : std::max(0, comm::launcher_local_rank());
    device_ = make_device(res.device, index, spec_.knobs.device_capacity);
    host_ = std::make_unique<MemoryPool>(fmt::format("host:{}", rank_), spec_.knobs.host_capacity,
                                         device_->host_allocator());
  });
  if (!options_.job_dir.empty()) ckpt::check_checkpointable(comm_);  // before any rank trains
  // The data communicator (a duplicate of `comm`, staged when device memory is not host
  // memory): collective, so created once every rank has its device.
  comms_ = comm::make_comm_pair(comm_, *device_);
  comm::agree_on(comm_, [&] { strategy_->setup(*comms_, *device_, *host_); });
  checkpoints_ = {job_.id,
                  job_.model,
                  job_.train,
                  par_.strategy,
                  par_.degree,
                  options_.job_dir,
                  options_.keep_checkpoints};
  checkpoints_.compute_threads = cpu::compute_threads();
  checkpoints_.sequences_per_epoch = train_loader_->num_sequences();
  source_ = [this](ckpt::StatePart part) {
    return strategy_->export_state(static_cast<parallel::StateKind>(static_cast<int>(part)));
  };
  sink_ = [this](ckpt::StatePart part, const StateSlices& slices) {
    strategy_->import_state(static_cast<parallel::StateKind>(static_cast<int>(part)), slices);
  };
}

// The newest valid checkpoint (any strategy and degree wrote it: the layout is canonical), or,
// at the job's start, the Hugging Face weights it starts from. Returns the first step to run.
std::int64_t Trainer::resume() {
  std::int64_t first_step = 0;
  // A LoRA job's checkpoints hold its adapters, not its base: the base is settled first.
  if (job_.model.lora.enabled()) settle_base();
  if (options_.resume && !options_.job_dir.empty())
    comm::agree_on(comm_, [&] {
      if (const auto p = ckpt::resume_training(comm_, checkpoints_, source_, sink_)) {
        first_step = p->step;
        train_loader_->seek(p->position);
      }
    });
  if (!job_.init_from.empty() && first_step == 0 && !job_.model.lora.enabled()) load_pretrained();
  return first_step;
}

void Trainer::settle_base() {
  if (!job_.init_from.empty()) load_pretrained();
  checkpoints_.base_model = job_.init_from.empty()
                                ? fmt::format("random (seed {})", job_.train.seed)
                                : std::filesystem::absolute(job_.init_from).string();
  checkpoints_.base_checksum = base_fingerprint();
}

// ckpt::base_fingerprint_term over the frozen slices each element's writer holds, summed over
// the ranks: the same for any strategy and degree, and changed by any changed weight.
std::string Trainer::base_fingerprint() {
  std::uint64_t local = 0;
  comm::agree_on(comm_, [&] {
    for (const TensorSlice& s : strategy_->export_state(parallel::StateKind::kFrozen)) {
      if (s.writer) local += ckpt::base_fingerprint_term(s.name, s.shape, s.start, s.count, s.data);
    }
  });
  // One slot per rank (an exact sum: the others are zero), then a wrapping sum here.
  std::vector<std::int64_t> slots(static_cast<std::size_t>(comm_.size()), 0);
  slots[static_cast<std::size_t>(rank_)] = static_cast<std::int64_t>(local);
  comm_.allreduce(slots.data(), slots.size(), comm::ReduceOp::kSum);
  std::uint64_t total = 0;
  for (const std::int64_t v : slots) total += static_cast<std::uint64_t>(v);
  return ckpt::format_checksum(total);
}

// Each rank reads the slices of the canonical tensors it holds (as a checkpoint restore does),
// straight from the safetensors files.
void Trainer::load_pretrained() {
  comm::agree_on(comm_, [&] {
    const hf::HfWeights weights(job_.init_from, job_.model);
    // A LoRA job's base is its frozen tensors; its adapters keep their initialisation.
    const auto kind =
        job_.model.lora.enabled() ? parallel::StateKind::kFrozen : parallel::StateKind::kParams;
    const StateSlices slices = strategy_->export_state(kind);
    weights.fill(slices);
    strategy_->import_state(kind, slices);
  });
  if (!options_.quiet && rank_ == 0)
    log::info("job {}: weights from {}", job_.id, job_.init_from.string());
}

// Rank 0 prepares the output: metrics.jsonl, cut back to the step a resume starts from.
void Trainer::open_metrics(std::int64_t first_step) {
  comm::agree_on(comm_, [&] {
    if (rank_ != 0) return;
    if (par_.prepare) par_.prepare();
    if (options_.job_dir.empty()) return;
    std::filesystem::create_directories(options_.job_dir);
    const auto path = RunDir::metrics_file(options_.job_dir);
    if (first_step > 0) ckpt::truncate_metrics(path, first_step);
    metrics_.open(path, std::ios::out | (first_step > 0 ? std::ios::app : std::ios::trunc));
    if (!metrics_) throw IoError(fmt::format("cannot write {}", path.string()));
  });
}

void Trainer::announce() const {
  if (options_.quiet || rank_ != 0) return;
  const ModelConfig& m = job_.model;
  // A LoRA job: what it trains beside the frozen base.
  const std::string lora =
      m.lora.enabled()
          ? fmt::format("; LoRA {}: {:.3f}M trained, the base frozen", describe_lora(m.lora),
                        static_cast<double>(m.adapter_parameters()) / 1e6)
          : std::string();
  log::info(
      "job {}: {} {}x{} d_model {} ({:.2f}M parameters{}), {} on {} ({}), batch {} in "
      "micro-batches of {} x {} tokens, {} steps; estimated peak {} per rank",
      job_.id, arch_name(m.arch), m.n_layer, m.n_head, m.d_model,
      static_cast<double>(m.num_parameters()) / 1e6, lora, par_.strategy,
      par_.degree == 1 ? device_->describe() : fmt::format("{} ranks", par_.degree),
      estimate_.layout, job_.train.batch_size, estimate_.micro_batch, job_.train.seq_len,
      total_steps_, format_bytes(estimate_.device_bytes));
}

// Instruction data: a validation loss needs a trained target in the windows evaluated (the
// first eval_batches x rows of val); with none it would read 0, as if the model were perfect.
// Instruction data: the loss masks and the record boundaries beside the token files, on both
// loaders.
void Trainer::attach_instruction_data() {
  // Instruction data: the loss is taken on the answers' tokens only (docs/engine.md).
  const bool masked = data::load_loss_mask_beside(*train_loader_, job_.train_data);
  if (data::load_loss_mask_beside(*val_loader_, job_.val_data) != masked)
    throw InputError(fmt::format(
        "job {}: {} has a loss mask beside it ({}) and {} has none: prepare both splits "
        "with `saturn data prepare --format jsonl`",
        job_.id, (masked ? job_.train_data : job_.val_data).string(),
        data::loss_mask_path(masked ? job_.train_data : job_.val_data).string(),
        (masked ? job_.val_data : job_.train_data).string()));
  // Packing without cross-attention: each record attends to itself only, its positions
  // restarting at 0 (the loader's batches carry them).
  const bool packed = !job_.train.packing.cross_attention;
  if (packed)
    for (auto [loader, file] :
         {std::pair{&*train_loader_, &job_.train_data}, std::pair{&*val_loader_, &job_.val_data}})
      if (!data::load_record_starts_beside(*loader, *file))
        throw InputError(fmt::format(
            "job {}: packing: {{cross_attention: false}} needs the record boundaries {} beside "
            "{}: prepare the data with `saturn data prepare --format jsonl`",
            job_.id, data::record_starts_path(*file).string(), file->string()));
  // Both leave targets untrained: some must remain where validation looks.
  if (masked || packed) require_trained_validation_targets();
}

void Trainer::require_trained_validation_targets() {
  val_loader_->seek({0, 0});
  const data::Batch b = val_loader_->next_batch(eval_rows(job_.train));
  val_loader_->seek({0, 0});
  if (std::any_of(b.targets.begin(), b.targets.end(), [](std::int32_t t) { return t >= 0; }))
    return;
  throw InputError(fmt::format(
      "job {}: the {} validation windows of {} tokens evaluated hold no trained token (its loss "
      "mask {} is 0 there), so no validation loss can be measured (valid: a larger "
      "eval_batches, or a val split whose first records have answers)",
      job_.id, b.batch_size, b.seq_len, data::loss_mask_path(job_.val_data).string()));
}

// A job that starts from imported weights is evaluated before its first step: the val loss of
// the model as imported (metrics line {"step": 0, "val_loss": ...}), what the fine-tuning that
// follows is measured against.
void Trainer::evaluate_imported() {
  val_loader_->seek({0, 0});
  const double val0 = strategy_->evaluate(val_loader_->next_batch(eval_rows(job_.train)));
  if (metrics_) {
    metrics_ << nlohmann::json{{"step", 0}, {"val_loss", val0}}.dump() << '\n';
    metrics_.flush();
  }
  if (!options_.quiet && rank_ == 0)
    log::info("job {}: val loss of the imported weights {:.4f}", job_.id, val0);
}

std::optional<StepRecord> Trainer::train_step(std::int64_t step) {
  const TrainConfig& tc = job_.train;
  const auto t0 = Clock::now();
  const parallel::StepResult sr =
      strategy_->train_step(train_loader_->next_batch(tc.batch_size), step);
  // The loss and the global gradient norm are reduced over the ranks, so every rank sees the
  // same values: an agreed outcome. A non-finite norm poisons the update (the clip scale times
  // an infinite gradient) even while the loss still looks finite.
  if (!std::isfinite(sr.loss) || !std::isfinite(sr.grad_norm)) {
    const char* what = std::isfinite(sr.loss) ? "grad_norm" : "loss";
    const double value = std::isfinite(sr.loss) ? sr.grad_norm : sr.loss;
    if (!par_.nonfinite_stops)
      throw comm::AgreedFailure(
          fmt::format("job {}: {} became {} at step {} (lower the learning rate?)", job_.id,
                      std::isfinite(sr.loss) ? "gradient norm" : "loss", value, step + 1),
          kExitFailure, 0);
    result_.stopped = true;
    result_.nonfinite_step = step + 1;
    result_.nonfinite_metric = what;
    result_.nonfinite_value = value;
    return std::nullopt;
  }
  const double dt = seconds_since(t0);
  train_time_ += dt;
  StepRecord r;
  r.step = step + 1;
  r.loss = sr.loss;
  r.lr = sr.lr;
  r.grad_norm = sr.grad_norm;
  r.tokens_per_s = static_cast<double>(tc.batch_size * tc.seq_len) / dt;
  r.step_s = dt;
  result_.times.steps_s += dt;
  ++result_.times.steps;
  if ((tc.eval_every > 0 && r.step % tc.eval_every == 0) || r.step == total_steps_) {
    const auto t_eval = Clock::now();
    r.has_val = true;
    val_loader_->seek({0, 0});
    r.val_loss = strategy_->evaluate(val_loader_->next_batch(eval_rows(tc)));
    r.eval_s = seconds_since(t_eval);
    result_.times.evals_s += r.eval_s;
    ++result_.times.evals;
  }
  r.times = result_.times;
  r.time_s = seconds_since(t_start_);
  return r;
}

// The step in the result, metrics.jsonl and, now and then, the log.
void Trainer::record(const StepRecord& r, std::int64_t first_step) {
  result_.steps.push_back(r);
  done_ = r.step;
  if (metrics_) {
    nlohmann::json line = {{"step", r.step},
                           {"loss", r.loss},
                           {"lr", r.lr},
                           {"grad_norm", r.grad_norm},
                           {"tokens_per_s", r.tokens_per_s},
                           {"time_s", r.time_s},
                           {"step_s", r.step_s}};
    if (r.has_val) {
      line["val_loss"] = r.val_loss;
      line["eval_s"] = r.eval_s;
    }
    metrics_ << line.dump() << '\n';
    metrics_.flush();
  }
  if (options_.quiet || rank_ != 0) return;
  if (!r.has_val && seconds_since(t_last_print_) < options_.progress_interval_s && r.step != 1)
    return;
  const std::int64_t tokens = job_.train.batch_size * job_.train.seq_len;
  const std::int64_t ran = r.step - first_step;  // this process's steps
  const double rate = static_cast<double>(ran * tokens) / train_time_;
  const double eta =
      static_cast<double>(total_steps_ - r.step) * train_time_ / static_cast<double>(ran);
  const std::string val = r.has_val ? fmt::format(" | val {:.4f}", r.val_loss) : "";
  log::info("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | {} tok/s | ETA {}", r.step,
            std::to_string(total_steps_).size(), total_steps_, r.loss, val, r.lr, format_rate(rate),
            format_clock(eta));
  t_last_print_ = Clock::now();
}

ckpt::TrainPoint Trainer::point(std::int64_t step) const {
  return {step, train_loader_->position(), "", 0};
}

bool Trainer::checkpoint(std::int64_t step) {
  if (options_.job_dir.empty() || poisoned(step)) return false;
  const auto t0 = Clock::now();
  ckpt::save_training_checkpoint(comm_, checkpoints_, point(step), source_);
  result_.times.checkpoints_s += seconds_since(t0);
  ++result_.times.checkpoints;
  return true;
}

bool Trainer::stop_requested(const StepRecord& r) {
  if (!par_.step_requests) return false;
  const StepDecision d = agree_step(comm_, par_.step_requests(r));
  if (d.fault)
    throw comm::AgreedFailure(fmt::format("injected failure at step {} (SATURN_FAIL_JOB)", r.step),
                              kExitFailure, comm_.size() - 1);
  result_.decision = d;
  return d.stop;
}

// final.h5 marks a finished job (saturn run --resume skips it): not after --max-steps, and
// never of a poisoned state. Then the Hugging Face export, the peaks, the final parameters.
void Trainer::finish() {
  result_.steps_done = done_;
  if (!result_.stopped && done_ == job_.train.steps && !options_.job_dir.empty() &&
      !poisoned(done_)) {
    // The adapters are only valid on the base they were trained with: a base that moved during
    // training (a strategy updating what it must not) is a bug, never a result.
    if (job_.model.lora.enabled() && base_fingerprint() != checkpoints_.base_checksum)
      throw Error(
          fmt::format("job {}: the frozen base changed during training (weights checksum "
                      "{} at the start): not saving adapters trained on another model",
                      job_.id, checkpoints_.base_checksum));
    const auto t_final = Clock::now();
    const auto final_file = ckpt::save_final(comm_, checkpoints_, point(done_), source_);
    if (options_.export_format != TrainOptions::Export::kNone)
      comm::agree_on(comm_, [&] {
        if (rank_ != 0) return;
        const bool adapters = job_.model.lora.enabled();
        if (adapters && options_.export_format == TrainOptions::Export::kPeft) {
          const std::filesystem::path dir = RunDir::peft_export_dir(options_.job_dir);
          const ckpt::PeftExportResult r = ckpt::export_peft(final_file, dir);
          if (!options_.quiet)
            log::info("job {}: final adapters for PEFT in {} ({} tensors)", job_.id, dir.string(),
                      r.tensors);
          return;
        }
        ckpt::HfExportOptions hf_options;
        hf_options.merge = adapters;
        // The special tokens and tokenizer handed back; the directory may be gone by now
        // (a resumed run elsewhere), which costs them but not the weights.
        std::error_code ec;
        if (!job_.init_from.empty() && std::filesystem::is_directory(job_.init_from, ec))
          hf_options.origin = job_.init_from;
        else if (!job_.init_from.empty())
          log::warn(
              "job {}: {} is gone: the Hugging Face export has no tokenizer files and null "
              "special-token ids",
              job_.id, job_.init_from.string());
        const ckpt::HfExportResult r =
            ckpt::export_hf(final_file, RunDir::hf_export_dir(options_.job_dir), hf_options);
        if (!options_.quiet)
          log::info("job {}: final weights as a Hugging Face model in {} ({} tensors)", job_.id,
                    RunDir::hf_export_dir(options_.job_dir).string(), r.tensors);
      });
    result_.times.checkpoints_s += seconds_since(t_final);
    ++result_.times.checkpoints;
  }
  std::int64_t peak = static_cast<std::int64_t>(device_->memory().peak());
  comm_.allreduce(&peak, 1, comm::ReduceOp::kMax);
  result_.peak_device_bytes = static_cast<std::size_t>(peak);
  result_.estimated_device_bytes = estimate_.device_bytes;
  if (par_.gather_final_params)
    result_.final_params = parallel::assemble_canonical(
        comm_, job_.model, strategy_->export_state(parallel::StateKind::kParams));
  if (!options_.quiet && rank_ == 0) {
    const parallel::StrategyStats st = strategy_->stats();
    log::info(
        "job {}: done in {}, peak device memory {} per rank (estimate {}), {:.0f}% of step time "
        "communicating (rank 0)",
        job_.id, format_clock(seconds_since(t_start_)), format_bytes(result_.peak_device_bytes),
        format_bytes(estimate_.device_bytes),
        st.step_s > 0 ? 100.0 * st.comm.seconds / st.step_s : 0.0);
  }
}

// Before any checkpoint: a step's update may leave a weight or an AdamW moment non-finite on
// some rank while its loss and norm look finite (an update that overflows). Such a state is
// never saved: with nonfinite_stops the job stops diverged at `step`, its newest checkpoint the
// last good one; without, it fails. Collective over the job's ranks.
bool Trainer::poisoned(std::int64_t step) {
  // [0]: a weight, [1]: an AdamW moment is non-finite; [2]: the scan itself failed here
  // (e.g. a device copy): agreed in the same reduction, so no rank waits in it alone.
  std::int32_t bad[3] = {0, 0, 0};
  float first_bad[2] = {0, 0};  // the first non-finite value of each kind on this rank
  std::string scan_error;
  try {
    // Every rank exports every kind (the same calls on all of them), whatever it finds.
    for (const auto kind :
         {parallel::StateKind::kParams, parallel::StateKind::kAdamM, parallel::StateKind::kAdamV})
      for (const TensorSlice& slice : strategy_->export_state(kind)) {
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
  comm_.allreduce(bad, 3, comm::ReduceOp::kMax);
  if (bad[2] != 0)
    throw comm::AgreedFailure(
        fmt::format("job {}: checking the state before the checkpoint at step {} failed{}{}",
                    job_.id, step, scan_error.empty() ? " on another rank" : ": ", scan_error),
        kExitFailure, 0);
  if (bad[0] == 0 && bad[1] == 0) return false;
  if (!par_.nonfinite_stops)
    throw comm::AgreedFailure(
        fmt::format("job {}: the {} became non-finite at step {} (its update overflowed; lower "
                    "the learning rate?); not checkpointed",
                    job_.id, bad[0] != 0 ? "weights" : "AdamW moments", step),
        kExitFailure, 0);
  result_.stopped = true;
  result_.nonfinite_step = step;
  result_.nonfinite_metric = bad[0] != 0 ? "weights" : "optimizer_state";
  // This rank's first bad value of that kind (another rank may hold it: then NaN).
  result_.nonfinite_value = bad[0] != 0 ? first_bad[0] : first_bad[1];
  if (std::isfinite(result_.nonfinite_value)) result_.nonfinite_value = NAN;
  return true;
}

TrainResult train_with_strategy(const TrainJob& job, const TrainOptions& options,
                                const ParallelOptions& parallel, comm::Communicator& comm) {
  return Trainer(job, options, parallel, comm).run();
}

TrainResult train_single_device(const TrainJob& job, const TrainOptions& options) {
  ParallelOptions par;
  par.strategy = parallel::one_device_strategy();
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
