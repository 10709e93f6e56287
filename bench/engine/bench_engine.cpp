// Engine throughput: training tokens/s of one model shape on the CPU backend (forward,
// backward, AdamW; median over timed steps after warm-up), and the GEMM rate our linear op
// reaches beside plain OpenBLAS sgemm on the same shapes. Prints one JSON object per line;
// bench/engine/run.py runs it beside PyTorch and prints the table.
#include <cblas.h>
#include <fmt/format.h>
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/optim/adamw.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <typename F>
double time_median(int reps, F&& f) {
  std::vector<double> t;
  f();  // warm-up
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    f();
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return median(t);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace saturn;
  CLI::App app{"Saturn engine benchmark (one model shape)"};
  std::string arch = "gpt2";
  int layers = 4, d_model = 256, heads = 4, seq = 128, batch = 8, steps = 5;
  app.add_option("--arch", arch);
  app.add_option("--layers", layers);
  app.add_option("--d-model", d_model);
  app.add_option("--heads", heads);
  app.add_option("--seq", seq);
  app.add_option("--batch", batch, "sequences per step (one micro-batch)");
  app.add_option("--steps", steps, "timed steps");
  CLI11_PARSE(app, argc, argv);

  ModelConfig mc;
  mc.arch = parse_arch(arch);
  mc.n_layer = layers;
  mc.n_head = heads;
  mc.d_model = d_model;
  mc.vocab_size = 256;
  mc.max_seq_len = seq;
  MemoryPool pool("cpu:0");
  GptModel model(mc, pool);
  model.init_weights(1);
  OptimizerConfig oc;
  AdamW opt(oc, model.layout(), 0, model.num_params(), pool);
  Rng rng(2);
  const std::size_t n = static_cast<std::size_t>(batch) * seq;
  std::vector<std::int32_t> tokens(n), targets(n);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng.below(256));
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(256));
  int step = 0;
  const double dt = time_median(steps, [&] {
    model.zero_grads();
    model.forward(tokens.data(), targets.data(), batch, seq);
    model.backward(1.0f / static_cast<float>(n));
    opt.step(model.params(), model.grads(), 1e-4, 1.0f, ++step);
  });
  nlohmann::json out = {{"kind", "train"},          {"arch", arch},
                        {"layers", layers},         {"d_model", d_model},
                        {"heads", heads},           {"seq", seq},
                        {"batch", batch},           {"params", model.num_params()},
                        {"threads", omp_get_max_threads()}, {"step_s", dt},
                        {"tokens_per_s", static_cast<double>(n) / dt},
                        {"peak_bytes", pool.peak()},
                        {"blas_core", openblas_get_corename()}};
  fmt::print("{}\n", out.dump());

  // GEMM shapes of this model's linears (forward): N x C -> OC.
  const int N = static_cast<int>(n), C = d_model, F = mc.ffn_dim();
  const std::vector<std::array<int, 3>> shapes = {{N, C, 3 * C}, {N, C, F}, {N, F, C}, {N, C, 256}};
  for (const auto& s : shapes) {
    const int M = s[0], K = s[1], O = s[2];
    std::vector<float> a(static_cast<std::size_t>(M) * K, 0.5f), w(static_cast<std::size_t>(K) * O, 0.25f),
        bias(static_cast<std::size_t>(O), 0.1f), c(static_cast<std::size_t>(M) * O);
    const double flops = 2.0 * M * K * O;
    const double ours = time_median(10, [&] {
      cpu::linear_forward(c.data(), a.data(), w.data(), bias.data(), M, K, O,
                          cpu::WeightLayout::kInOut);
    });
    const double raw = time_median(10, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, O, K, 1.0f, a.data(), K,
                  w.data(), O, 0.0f, c.data(), O);
    });
    fmt::print("{}\n", nlohmann::json{{"kind", "gemm"},
                                      {"shape", fmt::format("{}x{}x{}", M, K, O)},
                                      {"ours_gflops", flops / ours / 1e9},
                                      {"sgemm_gflops", flops / raw / 1e9}}
                           .dump());
  }
  return 0;
}
