// Engine throughput: training tokens/s of one model shape on the CPU backend (forward,
// backward, AdamW; median over timed steps after warm-up), and the GEMM rate our linear op
// reaches beside plain OpenBLAS sgemm on the same shapes. Prints one JSON object per line;
// bench/engine/run.py runs it beside PyTorch and prints the table.
//
// --device cuda: the same step on the CUDA backend (bf16, CudaGptModel + CudaAdamW with
// clipping), reporting tokens/s and MFU = (6·N + 12·L·C·T) FLOPs per token (weights, plus
// attention's score and value products, PaLM's convention) × tokens/s over the GPU's dense bf16
// peak; bench/engine/run_cuda.py runs it beside PyTorch eager and torch.compile.
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
#ifdef SATURN_HAVE_CUDA
#include "runtime/backend/cuda/allocator.hpp"
#include "runtime/backend/cuda/device_info.hpp"
#include "runtime/model/gpt_cuda.hpp"
#include "runtime/optim/adamw_cuda.hpp"
#endif

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

#ifdef SATURN_HAVE_CUDA
// Dense bf16 tensor-core peak by device name (datasheet, SXM parts), or 0 when unknown.
double bf16_peak_flops(const std::string& name) {
  if (name.find("H100") != std::string::npos || name.find("H200") != std::string::npos)
    return 989.4e12;
  if (name.find("A100") != std::string::npos) return 312e12;
  return 0.0;
}

int run_cuda(const saturn::ModelConfig& mc, const std::string& arch, int batch, int seq, int steps,
             double peak_tflops) {
  using namespace saturn;
  const auto q = cuda::query_devices();
  if (q.devices.empty()) {
    fmt::print(stderr, "bench_engine --device cuda: {}\n", q.error);
    return 2;
  }
  const std::string name = q.devices.front().name;
  const double peak = peak_tflops > 0 ? peak_tflops * 1e12 : bf16_peak_flops(name);
  cuda::CachingDeviceAllocator allocator(0);
  MemoryPool pool("cuda:0", 0, &allocator);
  double dt = 0;
  std::size_t params = 0;
  {
    cuda::Context ctx(0, pool);
    CudaGptModel model(mc, ctx);
    model.init_weights(1);
    OptimizerConfig oc;
    CudaAdamW opt(oc, model);
    Rng rng(2);
    const std::size_t n = static_cast<std::size_t>(batch) * seq;
    std::vector<std::int32_t> tokens(n), targets(n);
    for (auto& t : tokens)
      t = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(mc.vocab_size)));
    for (auto& t : targets)
      t = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(mc.vocab_size)));
    int step = 0;
    auto one_step = [&] {
      model.zero_grads();
      model.forward(tokens.data(), targets.data(), batch, seq);
      model.backward(1.0f / static_cast<float>(n));
      const double norm = opt.grad_norm();  // waits for the device
      opt.step(1e-4, clip_scale(norm, oc.grad_clip), ++step);
      ctx.synchronize("benchmark step");
    };
    one_step();  // first-use costs (cuBLASLt heuristics, module load) stay out of the timing
    dt = time_median(steps, one_step);
    params = model.num_params();
  }
  const double tokens_per_s = static_cast<double>(batch) * seq / dt;
  const double flops_per_token =
      6.0 * static_cast<double>(params) + 12.0 * mc.n_layer * static_cast<double>(mc.d_model) * seq;
  nlohmann::json out = {{"kind", "train"},
                        {"device", "cuda"},
                        {"gpu", name},
                        {"arch", arch},
                        {"layers", mc.n_layer},
                        {"d_model", mc.d_model},
                        {"heads", mc.n_head},
                        {"vocab", mc.vocab_size},
                        {"seq", seq},
                        {"batch", batch},
                        {"params", params},
                        {"step_s", dt},
                        {"tokens_per_s", tokens_per_s},
                        {"flops_per_token", flops_per_token},
                        {"peak_flops", peak},
                        {"mfu", peak > 0 ? flops_per_token * tokens_per_s / peak : 0.0},
                        {"peak_bytes", pool.peak()},
                        {"reserved_bytes", allocator.peak_reserved()}};
  fmt::print("{}\n", out.dump());
  return 0;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  using namespace saturn;
  CLI::App app{"Saturn engine benchmark (one model shape)"};
  std::string arch = "gpt2";
  int layers = 4, d_model = 256, heads = 4, seq = 128, batch = 8, steps = 5, vocab = 256;
  std::string device = "cpu";
  double peak_tflops = 0;
  app.add_option("--device", device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--vocab", vocab, "vocabulary size");
  app.add_option("--peak-tflops", peak_tflops,
                 "cuda: dense bf16 peak for MFU (default: by device name, H100/H200/A100)");
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
  mc.vocab_size = vocab;
  mc.max_seq_len = seq;
  if (device == "cuda") {
#ifdef SATURN_HAVE_CUDA
    return run_cuda(mc, arch, batch, seq, steps, peak_tflops);
#else
    fmt::print(stderr,
               "bench_engine --device cuda: this build has no CUDA backend (nvcc was not found "
               "when it was configured)\n");
    return 2;
#endif
  }
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
  nlohmann::json out = {{"kind", "train"},
                        {"arch", arch},
                        {"layers", layers},
                        {"d_model", d_model},
                        {"heads", heads},
                        {"seq", seq},
                        {"batch", batch},
                        {"params", model.num_params()},
                        {"threads", omp_get_max_threads()},
                        {"step_s", dt},
                        {"tokens_per_s", static_cast<double>(n) / dt},
                        {"peak_bytes", pool.peak()},
                        {"blas_core", openblas_get_corename()}};
  fmt::print("{}\n", out.dump());

  // GEMM shapes of this model's linears (forward): N x C -> OC.
  const int N = static_cast<int>(n), C = d_model, F = mc.ffn_dim();
  const std::vector<std::array<int, 3>> shapes = {{N, C, 3 * C}, {N, C, F}, {N, F, C}, {N, C, 256}};
  for (const auto& s : shapes) {
    const int M = s[0], K = s[1], O = s[2];
    std::vector<float> a(static_cast<std::size_t>(M) * K, 0.5f),
        w(static_cast<std::size_t>(K) * O, 0.25f), bias(static_cast<std::size_t>(O), 0.1f),
        c(static_cast<std::size_t>(M) * O);
    const double flops = 2.0 * M * K * O;
    const double ours = time_median(10, [&] {
      cpu::linear_forward(c.data(), a.data(), w.data(), bias.data(), M, K, O,
                          cpu::WeightLayout::kInOut);
    });
    const double raw = time_median(10, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, O, K, 1.0f, a.data(), K, w.data(),
                  O, 0.0f, c.data(), O);
    });
    fmt::print("{}\n", nlohmann::json{{"kind", "gemm"},
                                      {"shape", fmt::format("{}x{}x{}", M, K, O)},
                                      {"ours_gflops", flops / ours / 1e9},
                                      {"sgemm_gflops", flops / raw / 1e9}}
                           .dump());
  }
  return 0;
}
