// Engine throughput: training tokens/s of one model shape on the CPU backend (forward,
// backward, AdamW; median over timed steps after warm-up), and the GEMM rate our linear op
// reaches beside plain OpenBLAS sgemm on the same shapes. Prints one JSON object per line;
// bench/engine/run.py runs it beside PyTorch and prints the table. --fixed-grid: the same on the
// fixed GEMM tile grid of reproducible jobs, whose cost docs/strategies.md states.
//
// --device cuda: the same step on the CUDA backend (the same model program in bf16, AdamW with
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
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"
#ifdef SATURN_HAVE_CUDA
#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/device.hpp"
#include "runtime/backend/cuda/ops.hpp"
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

// Median time in seconds of `reps` runs of f() on the context's stream (CUDA events), after one
// warm-up run.
template <typename F>
double gpu_median(saturn::cuda::Context& ctx, int reps, F&& f) {
  using namespace saturn;
  cudaEvent_t a = nullptr, b = nullptr;
  SATURN_CUDA_CHECK(cudaEventCreate(&a));
  SATURN_CUDA_CHECK(cudaEventCreate(&b));
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    SATURN_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    f();
    SATURN_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    SATURN_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SATURN_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return median(t);
}

// Where a step's time goes: every GEMM and attention call of one GPT-2 training step, each timed
// alone at this model's shapes on random data (the per-layer ones once, counted L times), with the
// FLOPs it must do; "the rest" is the measured step less their sum (norms, elementwise kernels,
// the classifier's loss, the embedding, AdamW, the gradient norm, launch gaps). Prints one
// "op" line per call and one "breakdown" line.
void op_breakdown(saturn::cuda::Context& ctx, saturn::MemoryPool& pool,
                  const saturn::ModelConfig& mc, int B, int T, double step_s) {
  using namespace saturn;
  using cuda::bf16;
  using cuda::WeightLayout;
  const int C = mc.d_model, F = mc.ffn_dim(), H = mc.n_head, hd = mc.head_dim(), V = mc.vocab_size;
  const int N = B * T, L = mc.n_layer;
  const std::size_t n = static_cast<std::size_t>(N);
  auto buf = [&](std::size_t count, float value) {
    Buffer<bf16> b(pool, count, "benchmark");
    cuda::fill(ctx, b.data(), value, count);
    return b;
  };
  const std::size_t wide = static_cast<std::size_t>(std::max(3 * C, F));
  Buffer<bf16> qkv = buf(n * 3 * C, 0.01f), out = buf(n * C, 0.0f), dout = buf(n * C, 0.001f),
               dqkv = buf(n * 3 * C, 0.0f), x = buf(n * wide, 0.01f), y = buf(n * wide, 0.0f),
               pre = buf(n * F, 0.01f), dact = buf(n * F, 0.0f), bias = buf(wide, 0.01f),
               w = buf(static_cast<std::size_t>(C) * wide, 0.01f), logits = buf(n * V, 0.01f),
               head_w = buf(static_cast<std::size_t>(V) * C, 0.01f);
  Buffer<float> lse(pool, static_cast<std::size_t>(B) * H * T, "benchmark"),
      delta(pool, static_cast<std::size_t>(B) * H * T, "benchmark"),
      dw(pool, static_cast<std::size_t>(C) * std::max<std::size_t>(wide, V), "benchmark"),
      db(pool, wide, "benchmark"), losses(pool, n, "benchmark");
  Buffer<std::int32_t> targets(pool, n, "benchmark");
  SATURN_CUDA_CHECK(cudaMemsetAsync(targets.data(), 0, targets.bytes(), ctx.stream()));
  SATURN_CUDA_CHECK(cudaMemsetAsync(dw.data(), 0, dw.bytes(), ctx.stream()));
  SATURN_CUDA_CHECK(cudaMemsetAsync(db.data(), 0, db.bytes(), ctx.stream()));
  const int reps = 10;
  double attention_s = 0, gemm_s = 0;
  // count: how often the step runs it (L for a block's op, 1 for the classifier's).
  auto time_op = [&](const char* op, const char* group, int count, double flops, auto&& f) {
    const double seconds = gpu_median(ctx, reps, f);
    (std::string(group) == "attention" ? attention_s : gemm_s) += seconds * count;
    fmt::print("{}\n", nlohmann::json{{"kind", "op"},
                                      {"op", op},
                                      {"group", group},
                                      {"count", count},
                                      {"ms", seconds * 1e3},
                                      {"tflops", flops > 0 ? flops / seconds / 1e12 : 0.0}}
                           .dump());
  };
  // Causal attention: QKᵀ and PV over the lower triangle, 2 FLOPs per multiply-add.
  const double att_flops = 2.0 * 2.0 * B * H * (static_cast<double>(T) * (T + 1) / 2) * hd;
  const bf16* q = qkv.data();
  bf16* d = dqkv.data();
  time_op("attention forward", "attention", L, att_flops, [&] {
    cuda::attention_forward(ctx, out.data(), lse.data(), q, q + C, q + 2 * C, 3 * C, B, T, H, H, hd,
                            causal_attention(hd));
  });
  time_op("attention backward", "attention", L, 2.5 * att_flops, [&] {
    cuda::attention_backward(ctx, d, d + C, d + 2 * C, delta.data(), dout.data(), out.data(),
                             lse.data(), q, q + C, q + 2 * C, 3 * C, B, T, H, H, hd,
                             causal_attention(hd));
  });
  const auto kInOut = WeightLayout::kInOut;
  const auto kOverwrite = cuda::GradWrite::kOverwrite;
  auto gemm_flops = [&](int k, int m) { return 2.0 * N * k * m; };
  // The block's four linears: forward, then input (overwritten, as the model does) + weight +
  // bias gradients.
  const struct {
    const char* name;
    int in, outc;
  } linears[] = {{"qkv", C, 3 * C}, {"attention projection", C, C}};
  for (const auto& l : linears) {
    time_op(fmt::format("{} forward", l.name).c_str(), "gemm", L, gemm_flops(l.in, l.outc), [&] {
      cuda::linear_forward(ctx, y.data(), x.data(), w.data(), bias.data(), N, l.in, l.outc, kInOut);
    });
    time_op(fmt::format("{} backward", l.name).c_str(), "gemm", L, 2 * gemm_flops(l.in, l.outc),
            [&] {
              cuda::linear_backward(ctx, out.data(), dw.data(), db.data(), y.data(), x.data(),
                                    w.data(), N, l.in, l.outc, kInOut, kOverwrite);
            });
  }
  time_op("fc forward + bias + GELU", "gemm", L, gemm_flops(C, F), [&] {
    cuda::linear_gelu_forward(ctx, y.data(), pre.data(), x.data(), w.data(), bias.data(), N, C, F,
                              kInOut);
  });
  time_op("fc projection forward", "gemm", L, gemm_flops(F, C), [&] {
    cuda::linear_forward(ctx, out.data(), y.data(), w.data(), bias.data(), N, F, C, kInOut);
  });
  time_op("fc projection backward + dGELU", "gemm", L, 2 * gemm_flops(F, C), [&] {
    cuda::linear_dgelu_backward(ctx, dact.data(), x.data(), dw.data(), db.data(), dout.data(),
                                y.data(), pre.data(), w.data(), N, F, C, kInOut);
  });
  time_op("fc backward", "gemm", L, 2 * gemm_flops(C, F), [&] {
    cuda::linear_backward(ctx, out.data(), dw.data(), db.data(), dact.data(), x.data(), w.data(), N,
                          C, F, kInOut, kOverwrite);
  });
  const auto kOutIn = WeightLayout::kOutIn;
  time_op("classifier forward N x C -> V", "gemm", 1, gemm_flops(C, V), [&] {
    cuda::linear_forward(ctx, logits.data(), x.data(), head_w.data(), nullptr, N, C, V, kOutIn);
  });
  time_op("classifier backward", "gemm", 1, 2 * gemm_flops(C, V), [&] {
    cuda::linear_backward(ctx, out.data(), dw.data(), nullptr, logits.data(), x.data(),
                          head_w.data(), N, C, V, kOutIn, kOverwrite);
  });
  ctx.synchronize("op breakdown");
  const double rest_s = step_s - attention_s - gemm_s;
  fmt::print("{}\n", nlohmann::json{{"kind", "breakdown"},
                                    {"step_ms", step_s * 1e3},
                                    {"attention_ms", attention_s * 1e3},
                                    {"gemm_ms", gemm_s * 1e3},
                                    {"rest_ms", rest_s * 1e3}}
                         .dump());
}

#endif

}  // namespace

int main(int argc, char** argv) {
  saturn::install_cuda_provider();
  using namespace saturn;
  CLI::App app{"Saturn engine benchmark (one model shape)"};
  std::string arch = "gpt2";
  int layers = 4, d_model = 256, heads = 4, seq = 128, batch = 8, steps = 5, vocab = 256;
  std::string device = "cpu";
  double peak_tflops = 0;
  bool ops = false, fixed_grid = false;
  app.add_flag("--ops", ops, "cuda: also time the main ops alone at this shape");
  app.add_flag("--fixed-grid", fixed_grid,
               "cpu: GEMMs on the fixed tile grid of reproducible jobs (cpu::FixedGemmGrid)");
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
  const DeviceKind kind = parse_device_kind(device);
  std::unique_ptr<Device> dev;
  try {
    dev = make_device(kind, 0, 0);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_engine --device {}: {}\n", device, e.what());
    return 2;
  }
  const cpu::FixedGemmGrid grid(fixed_grid);
  double dt = 0;
  std::size_t params = 0;
  {
    const auto model = make_model(*dev, mc);
    model->init_weights(1);
    OptimizerConfig oc;
    AdamW opt(oc, model->layout(), 0, model->layout().total(), *dev);
    Rng rng(2);
    const std::size_t n = static_cast<std::size_t>(batch) * seq;
    std::vector<std::int32_t> tokens(n), targets(n);
    for (auto& t : tokens)
      t = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(mc.vocab_size)));
    for (auto& t : targets)
      t = static_cast<std::int32_t>(rng.below(static_cast<std::uint64_t>(mc.vocab_size)));
    Buffer<std::int32_t> dev_tokens(dev->memory(), n, "tokens"),
        dev_targets(dev->memory(), n, "tokens");
    dev->upload(dev_tokens.data(), tokens.data(), n * sizeof(std::int32_t));
    dev->upload(dev_targets.data(), targets.data(), n * sizeof(std::int32_t));
    model->reserve(batch, seq);
    int step = 0;
    auto one_step = [&] {
      model->zero_grads();
      model->forward(dev_tokens.data(), dev_targets.data());
      model->backward(1.0f / static_cast<float>(n));
      // cuda: the clip scale from the norm on the host, one wait per step as training has
      // (the CPU measurement has always been the step without it).
      const float scale =
          kind == DeviceKind::kCpu
              ? 1.0f
              : clip_scale(std::sqrt(dev->sum_of_squares(model->grads(), model->layout().total())),
                           oc.grad_clip);
      opt.step(model->master(), model->weights(), model->grads(), 1e-4, scale, ++step);
      dev->synchronize("benchmark step");
    };
    dt = time_median(steps, one_step);
    params = static_cast<std::size_t>(mc.num_parameters());
  }
  const std::size_t n = static_cast<std::size_t>(batch) * seq;
  nlohmann::json out = {{"kind", "train"},
                        {"device", device},
                        {"arch", arch},
                        {"layers", layers},
                        {"d_model", d_model},
                        {"heads", heads},
                        {"vocab", vocab},
                        {"seq", seq},
                        {"batch", batch},
                        {"params", params},
                        {"fixed_grid", fixed_grid},
                        {"step_s", dt},
                        {"tokens_per_s", static_cast<double>(n) / dt},
                        {"peak_bytes", dev->memory().peak()}};
  if (kind == DeviceKind::kCpu) {
    out["threads"] = omp_get_max_threads();
    out["blas_core"] = openblas_get_corename();
  } else {
#ifdef SATURN_HAVE_CUDA
    auto& cd = dynamic_cast<cuda::CudaDevice&>(*dev);
    const double flops_per_token = 6.0 * static_cast<double>(params) +
                                   12.0 * mc.n_layer * static_cast<double>(mc.d_model) * seq;
    const double peak = peak_tflops > 0 ? peak_tflops * 1e12 : bf16_peak_flops(cd.describe());
    out["gpu"] = cd.describe();
    out["flops_per_token"] = flops_per_token;
    out["peak_flops"] = peak;
    out["mfu"] = peak > 0 ? flops_per_token * static_cast<double>(n) / dt / peak : 0.0;
    out["reserved_bytes"] = cd.allocator().peak_reserved();
    fmt::print("{}\n", out.dump());
    if (ops) op_breakdown(cd.context(), cd.memory(), mc, batch, seq, dt);
    return 0;
#endif
  }
  fmt::print("{}\n", out.dump());
  if (kind != DeviceKind::kCpu) return 0;

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
    // Also the backward's two products (input and weight gradients), which the grid tiles too.
    std::vector<float> da(a.size(), 0.0f), dw(w.size(), 0.0f);
    const double ours_bwd = time_median(10, [&] {
      cpu::linear_backward(da.data(), dw.data(), nullptr, c.data(), a.data(), w.data(), M, K, O,
                           cpu::WeightLayout::kInOut);
    });
    fmt::print("{}\n", nlohmann::json{{"kind", "gemm"},
                                      {"shape", fmt::format("{}x{}x{}", M, K, O)},
                                      {"ours_gflops", flops / ours / 1e9},
                                      {"ours_backward_gflops", 2 * flops / ours_bwd / 1e9},
                                      {"sgemm_gflops", flops / raw / 1e9}}
                           .dump());
  }
  return 0;
}
