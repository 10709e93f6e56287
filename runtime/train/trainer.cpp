#include "runtime/train/trainer.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/checkpoint/train_io.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/parallel/repro.hpp"

namespace saturn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  const auto total = static_cast<long long>(s + 0.5);
  if (total >= 3600)
    return fmt::format("{}:{:02}:{:02}", total / 3600, total / 60 % 60, total % 60);
  return fmt::format("{}:{:02}", total / 60, total % 60);
}

std::string format_rate(double tokens_per_s) {
  if (tokens_per_s >= 1e6) return fmt::format("{:.2f}M", tokens_per_s / 1e6);
  if (tokens_per_s >= 1e3) return fmt::format("{:.1f}k", tokens_per_s / 1e3);
  return fmt::format("{:.0f}", tokens_per_s);
}

// Everything a single-device run holds: built (and so memory-checked) before any file is
// written.
struct Session {
  MemoryPool device;
  GptModel model;
  AdamW optimizer;
  data::TokenLoader train_loader;
  data::TokenLoader val_loader;
  std::int64_t micro;
  parallel::GradAccumulator acc;  // reproducible mode only
  std::vector<std::int32_t> inputs, targets;

  Session(const TrainJob& job, const TrainOptions& options)
      : device("cpu:0", options.device_capacity),
        model(job.model, device),
        optimizer(job.train.optimizer, model.layout(), 0, model.num_params(), device),
        train_loader(data::TokenArray::open(job.train_data,
                                            static_cast<std::uint32_t>(job.model.vocab_size)),
                     job.train.seq_len, job.train.seed),
        val_loader(data::TokenLoader::validation(
            data::TokenArray::open(job.val_data, static_cast<std::uint32_t>(job.model.vocab_size)),
            job.train.seq_len)),
        micro(resolve_micro_batch(job.train)) {
    model.init_weights(job.train.seed);
    if (job.train.reproducible) acc = parallel::GradAccumulator(device, model.num_params());
    model.reserve(static_cast<int>(micro), job.train.seq_len);
    const std::size_t n = static_cast<std::size_t>(micro) * job.train.seq_len;
    inputs.resize(n);
    targets.resize(n);
  }

  // Mean loss over `batches` micro-batches of validation data, from its start.
  // Mean loss over the first `rows` validation rows, in passes of at most `micro` rows.
  double evaluate(std::int64_t rows) {
    val_loader.seek({0, 0});
    double sum = 0;
    const int T = val_loader.seq_len();
    for (std::int64_t r = 0; r < rows; r += micro) {
      const std::int64_t n = std::min(micro, rows - r);
      val_loader.next_batch(n, inputs.data(), targets.data());
      sum += static_cast<double>(
                 model.forward(inputs.data(), targets.data(), static_cast<int>(n), T)) *
             static_cast<double>(n);
    }
    return rows > 0 ? sum / static_cast<double>(rows) : 0.0;
  }
};

}  // namespace

std::int64_t resolve_micro_batch(const TrainConfig& train) {
  if (train.reproducible) {
    const std::int64_t c = canonical_micro_batch(train);
    if (train.batch_size % c != 0)
      throw InputError(
          fmt::format("micro_batch_size {} must divide batch_size {}", c, train.batch_size));
    return c;
  }
  if (train.micro_batch_size > 0) {
    if (train.batch_size % train.micro_batch_size != 0)
      throw InputError(fmt::format("micro_batch_size {} must divide batch_size {}",
                                   train.micro_batch_size, train.batch_size));
    return train.micro_batch_size;
  }
  for (std::int64_t m = std::min<std::int64_t>(8, train.batch_size); m >= 1; --m)
    if (train.batch_size % m == 0) return m;
  return 1;
}

void check_trainable(const TrainJob& job, const TrainOptions& options) {
  Session s(job, options);
}

TrainResult train_single_device(const TrainJob& job, const TrainOptions& options) {
  Session s(job, options);  // throws before anything is written
  const TrainConfig& tc = job.train;
  const int T = tc.seq_len;
  const std::int64_t accum = tc.batch_size / s.micro;
  const std::int64_t total_steps =
      options.max_steps >= 0 ? std::min(options.max_steps, tc.steps) : tc.steps;
  const float dloss = 1.0f / static_cast<float>(tc.batch_size * T);

  // Checkpoints: the whole state of this one device, on MPI_COMM_SELF.
  ckpt::JobCheckpointing ck{
      job.id, job.model, tc, "single", 1, options.job_dir, options.keep_checkpoints};
  ck.compute_threads = cpu::compute_threads();
  ck.sequences_per_epoch = s.train_loader.num_sequences();
  const ckpt::StateView state = ckpt::single_device_view(s.model.layout(), s.model.params(),
                                                         s.optimizer.m(), s.optimizer.v());
  std::int64_t first_step = 0;
  if (options.resume && !options.job_dir.empty()) {
    if (const auto p = ckpt::resume_training(MPI_COMM_SELF, ck, state)) {
      first_step = p->step;
      s.train_loader.seek(p->position);
      ckpt::truncate_metrics(options.job_dir / "metrics.jsonl", first_step);
    }
  }
  // Reproducible: GEMM bits independent of the thread count, so any later run may resume it.
  const cpu::FixedGemmGrid grid(tc.reproducible);

  std::ofstream metrics;
  if (!options.job_dir.empty()) {
    std::filesystem::create_directories(options.job_dir);
    const auto path = options.job_dir / "metrics.jsonl";
    metrics.open(path, std::ios::out | (first_step > 0 ? std::ios::app : std::ios::trunc));
    if (!metrics) throw IoError(fmt::format("cannot write {}", path.string()));
  }
  if (!options.quiet) {
    log::info(
        "job {}: {} {}x{} d_model {} ({:.2f}M parameters), batch {} = {} x {} micro-batches "
        "of {} tokens, {} steps",
        job.id, arch_name(job.model.arch), job.model.n_layer, job.model.n_head, job.model.d_model,
        static_cast<double>(s.model.num_params()) / 1e6, tc.batch_size, accum, s.micro, T,
        total_steps);
  }

  TrainResult result;
  const auto t_start = Clock::now();
  auto t_last_print = t_start;
  double train_time = 0;  // excludes evaluation, for tokens/s
  for (std::int64_t step = first_step; step < total_steps; ++step) {
    const auto t0 = Clock::now();
    s.model.zero_grads();
    double loss = 0;
    for (std::int64_t m = 0; m < accum; ++m) {
      s.train_loader.next_batch(s.micro, s.inputs.data(), s.targets.data());
      loss += s.model.forward(s.inputs.data(), s.targets.data(), static_cast<int>(s.micro), T);
      if (tc.reproducible)
        parallel::reproducible_backward(s.model, dloss, s.acc);
      else
        s.model.backward(dloss);
    }
    loss /= static_cast<double>(accum);
    if (!std::isfinite(loss))
      throw Error(fmt::format("job {}: loss became {} at step {} (lower the learning rate?)",
                              job.id, loss, step + 1));
    double grad_norm = 0;
    if (tc.reproducible) {
      // The fp64 sum of the micro-batch terms, rounded once; its norm exactly (as every
      // strategy computes them, see parallel/repro.hpp).
      s.acc.round_and_reset(s.model.grads());
      parallel::ExactSquareSum sq;
      sq.add(s.model.grads(), s.model.num_params());
      grad_norm = std::sqrt(sq.value());
    } else {
      grad_norm = std::sqrt(cpu::sum_of_squares(s.model.grads(), s.model.num_params()));
    }
    if (!std::isfinite(grad_norm))
      throw Error(
          fmt::format("job {}: gradient norm became {} at step {} (lower the learning rate?)",
                      job.id, grad_norm, step + 1));
    const double lr = scheduled_lr(tc.optimizer, tc.schedule, step, tc.steps);
    s.optimizer.step(s.model.params(), s.model.grads(), lr,
                     clip_scale(grad_norm, tc.optimizer.grad_clip), step + 1);
    const double dt = seconds_since(t0);
    train_time += dt;

    StepRecord r;
    r.step = step + 1;
    r.loss = loss;
    r.lr = lr;
    r.grad_norm = grad_norm;
    r.tokens_per_s = static_cast<double>(tc.batch_size * T) / dt;
    const bool last = step + 1 == total_steps;
    if ((tc.eval_every > 0 && r.step % tc.eval_every == 0) || last) {
      r.has_val = true;
      r.val_loss = s.evaluate(eval_rows(tc));
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
    if (!options.job_dir.empty() && ckpt::checkpoint_due(tc, r.step))
      ckpt::save_training_checkpoint(MPI_COMM_SELF, ck, {r.step, s.train_loader.position(), ""},
                                     state);
    if (!options.quiet &&
        (r.has_val || seconds_since(t_last_print) >= options.progress_interval_s || r.step == 1)) {
      const std::int64_t done = r.step - first_step;  // this process's steps
      const double avg_rate = static_cast<double>(done * tc.batch_size * T) / train_time;
      const double eta =
          static_cast<double>(total_steps - r.step) * train_time / static_cast<double>(done);
      std::string val = r.has_val ? fmt::format(" | val {:.4f}", r.val_loss) : "";
      log::info("step {:>{}}/{} | loss {:.4f}{} | lr {:.2e} | {} tok/s | ETA {}", r.step,
                std::to_string(total_steps).size(), total_steps, r.loss, val, r.lr,
                format_rate(avg_rate), format_duration(eta));
      t_last_print = Clock::now();
    }
  }
  if (!options.job_dir.empty() && total_steps == tc.steps)
    ckpt::save_final(MPI_COMM_SELF, ck,
                     {std::max(first_step, total_steps), s.train_loader.position(), ""}, state);
  result.steps_done = std::max(first_step, total_steps);
  result.peak_device_bytes = s.device.peak();
  result.final_params.assign(s.model.params(), s.model.params() + s.model.num_params());
  if (!options.quiet)
    log::info("job {}: done in {}, peak device memory {}", job.id,
              format_duration(seconds_since(t_start)), format_bytes(result.peak_device_bytes));
  return result;
}

}  // namespace saturn
