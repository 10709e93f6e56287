// One strategy at the degree mpirun gives it: a few warm-up steps, then timed steps. Rank 0
// prints one JSON line: median step time, tokens/s, the fraction of the step spent in
// communication (exposed: blocking calls and waits, including waits for slower peers, so a
// pipeline's bubble counts; the busiest rank), bytes handed to communication per step beside the
// estimate, peak device memory per
// rank beside the strategy's estimate, and for pipelines the measured bubble (1 - busy/schedule
// time, averaged over stages) beside (p-1)/(m+p-1). bench/strategies/run.py drives it.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/parallel/hybrid.hpp"
#include "runtime/parallel/pipeline.hpp"
#include "runtime/parallel/strategy.hpp"

namespace {

using namespace saturn;

int run(int argc, char** argv) {
  CLI::App app{"Benchmark one parallel strategy (run under mpirun; see run.py)"};
  std::string strategy = "ddp", arch = "gpt2";
  int layers = 8, d_model = 256, heads = 8, seq = 64, warmup = 2, steps = 5;
  std::int64_t batch = 16;
  std::vector<std::string> knobs;
  app.add_option("--strategy", strategy);
  app.add_option("--arch", arch);
  app.add_option("--layers", layers);
  app.add_option("--d-model", d_model);
  app.add_option("--heads", heads);
  app.add_option("--seq", seq);
  app.add_option("--batch", batch);
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps);
  app.add_option("--knob", knobs);
  int lora_rank = 0;
  app.add_option("--lora-rank", lora_rank,
                 "Train LoRA adapters of this rank on every linear (0: a full fine-tune)");
  bool list = false;
  app.add_flag("--list", list,
               "Print the registry's offered strategies (name, smallest degree, knob variants) as "
               "JSON lines and exit");
  CLI11_PARSE(app, argc, argv);
  if (list) {
    for (const auto& info : parallel::strategy_registry())
      if (info.offered)
        std::printf("%s\n", nlohmann::json{{"strategy", info.name},
                                           {"min_degree", info.min_degree},
                                           {"knob_variants", info.knob_variants}}
                                .dump()
                                .c_str());
    return 0;
  }

  auto world = comm::MpiCommunicator::world();
  // The strategy gets its own communicator, so the benchmark's barriers and reductions are not
  // counted as the strategy's communication.
  auto job = world->split(0, world->rank());
  parallel::StrategySpec spec;
  spec.model.arch = parse_arch(arch);
  spec.model.n_layer = layers;
  spec.model.n_head = heads;
  spec.model.d_model = d_model;
  spec.model.max_seq_len = seq;
  if (lora_rank > 0) {
    spec.model.lora.rank = lora_rank;
    spec.model.lora.targets = all_lora_targets(spec.model.arch);
  }
  spec.train.batch_size = batch;
  spec.train.seq_len = seq;
  spec.train.steps = warmup + steps;
  spec.degree = world->size();
  spec.knobs = parallel::parse_knobs(knobs);
  // Outlive the strategy, which returns buffers to them and splits the communicators.
  cpu::CpuDevice device("cpu", 0);
  MemoryPool host("host");
  const auto comms = comm::make_comm_pair(*job, device);
  auto s = parallel::make_strategy(strategy, spec);
  const parallel::Estimate e = s->estimate();
  nlohmann::json out = {{"strategy", strategy}, {"degree", spec.degree}, {"knobs", knobs}};
  if (!e.feasible) {
    out["infeasible"] = e.reason;
    if (world->rank() == 0) std::printf("%s\n", out.dump().c_str());
    return 0;
  }
  s->setup(*comms, device, host);
  std::vector<std::uint32_t> tokens(200000);
  Rng rng(1);
  for (auto& t : tokens) t = static_cast<std::uint32_t>(rng.below(256));
  data::TokenLoader loader(data::TokenArray::from_tokens(std::move(tokens)), seq, 1);
  for (int i = 0; i < warmup; ++i) s->train_step(loader.next_batch(batch), i);
  s->reset_stats();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    const data::Batch b = loader.next_batch(batch);
    world->barrier();  // every rank starts the step together
    const auto t0 = std::chrono::steady_clock::now();
    s->train_step(b, warmup + i);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    world->allreduce(&dt, 1, comm::ReduceOp::kMax);  // a step ends when its slowest rank does
    times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double step = times[times.size() / 2];
  const parallel::StrategyStats st = s->stats();
  double comm_fraction = st.step_s > 0 ? st.comm.seconds / st.step_s : 0.0;
  world->allreduce(&comm_fraction, 1, comm::ReduceOp::kMax);
  std::int64_t peak = static_cast<std::int64_t>(device.memory().peak());
  std::int64_t host_peak = static_cast<std::int64_t>(host.peak());
  world->allreduce(&peak, 1, comm::ReduceOp::kMax);
  world->allreduce(&host_peak, 1, comm::ReduceOp::kMax);
  out["step_s"] = step;
  out["tokens_per_s"] = static_cast<double>(batch * seq) / step;
  out["comm_fraction"] = comm_fraction;
  out["peak_bytes"] = peak;
  out["estimate_bytes"] = e.device_bytes;
  out["host_peak_bytes"] = host_peak;
  out["layout"] = e.layout;
  // Bytes handed to communication per step (CommStats' count), busiest rank, beside the estimate.
  double comm_bytes = static_cast<double>(st.comm.bytes) / std::max<std::int64_t>(1, st.steps);
  world->allreduce(&comm_bytes, 1, comm::ReduceOp::kMax);
  out["comm_bytes_per_step"] = comm_bytes;
  out["comm_bytes_estimate"] = e.comm_bytes;
  if (auto* pp = dynamic_cast<parallel::PipelineStrategy*>(s.get())) {
    double bubble = st.schedule_s > 0 ? 1.0 - st.busy_s / st.schedule_s : 0.0;
    world->allreduce(&bubble, 1, comm::ReduceOp::kAvg);
    const double p = pp->stages(), m = pp->micro_batches();
    out["bubble"] = bubble;
    out["bubble_theory"] = (p - 1) / (m + p - 1);
  }
  if (world->rank() == 0) std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  saturn::install_cuda_provider();
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_strategies: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
