// CudaGptModel and CudaAdamW, unchanged, on the emulated CUDA backend (kernels through the
// emulator, GEMMs through the backend's own plans): forward, backward and a few training steps
// against the CPU model, as tests/gpu/test_gpu_model.cpp does on a GPU, on tiny shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/model/gpt.hpp"
#include "runtime/model/gpt_cuda.hpp"
#include "runtime/optim/adamw.hpp"
#include "runtime/optim/adamw_cuda.hpp"

namespace saturn {
namespace {

using Vec = std::vector<float>;

double rel_error(const float* got, const float* want, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 2;
  c.n_head = 2;
  c.d_model = 64;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  return c;
}

class EmulatedModel : public ::testing::TestWithParam<Arch> {};

TEST_P(EmulatedModel, ForwardBackwardAndTrainingMatchCpu) {
  const ModelConfig cfg = tiny(GetParam());
  const int B = 1, T = 16;
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::mt19937 rng(99);
  std::vector<std::int32_t> tokens(N), targets(N);
  for (auto& t : tokens) t = static_cast<std::int32_t>(rng() % 64);
  for (auto& t : targets) t = static_cast<std::int32_t>(rng() % 64);
  targets[3] = -1;

  MemoryPool cpu_pool("cpu");
  GptModel cpu(cfg, cpu_pool);
  cpu.init_weights(5);
  for (std::size_t i = 0; i < cpu.num_params(); ++i)
    cpu.params()[i] = __bfloat162float(__float2bfloat16(cpu.params()[i]));
  MemoryPool dev_pool("emulated device");
  cuda::Context ctx(dev_pool);
  CudaGptModel gpu(cfg, ctx);
  gpu.set_params(cpu.params());
  Vec back(gpu.num_params());
  gpu.get_params(back.data());
  EXPECT_EQ(rel_error(back.data(), cpu.params(), back.size()), 0.0);

  cpu.forward_logits(tokens.data(), B, T);
  gpu.forward_logits(tokens.data(), B, T);
  Vec logits(N * cfg.vocab_size);
  gpu.get_logits(logits.data());
  EXPECT_LT(rel_error(logits.data(), cpu.logits(), logits.size()), 3e-2);

  cpu.zero_grads();
  gpu.zero_grads();
  const float lc = cpu.forward(tokens.data(), targets.data(), B, T);
  const float lg = gpu.forward(tokens.data(), targets.data(), B, T);
  EXPECT_NEAR(lg, lc, 5e-3 * lc);
  cpu.backward(1.0f / static_cast<float>(N - 1));
  gpu.backward(1.0f / static_cast<float>(N - 1));
  Vec grads(gpu.num_params());
  gpu.get_grads(grads.data());
  EXPECT_LT(rel_error(grads.data(), cpu.grads(), grads.size()), 5e-2);
  for (const auto& t : cpu.layout().tensors())
    EXPECT_LT(rel_error(grads.data() + t.offset, cpu.grads() + t.offset, t.numel), 1e-1) << t.name;

  // A few optimizer steps on a repeated batch: the losses must stay together.
  OptimizerConfig oc;
  oc.lr = 1e-3;
  AdamW cpu_opt(oc, cpu.layout(), 0, cpu.num_params(), cpu_pool);
  CudaAdamW gpu_opt(oc, gpu);
  for (int s = 1; s <= 3; ++s) {
    cpu.zero_grads();
    gpu.zero_grads();
    const float c = cpu.forward(tokens.data(), targets.data(), B, T);
    const float g = gpu.forward(tokens.data(), targets.data(), B, T);
    EXPECT_NEAR(g, c, 0.02 + 0.02 * c) << "step " << s;
    cpu.backward(1.0f / static_cast<float>(N));
    gpu.backward(1.0f / static_cast<float>(N));
    const double nc = std::sqrt(cpu::sum_of_squares(cpu.grads(), cpu.num_params()));
    const double ng = gpu_opt.grad_norm();
    EXPECT_NEAR(ng, nc, 0.05 * nc) << "step " << s;
    cpu_opt.step(cpu.params(), cpu.grads(), oc.lr, clip_scale(nc, 1.0), s);
    gpu_opt.step(oc.lr, clip_scale(ng, 1.0), s);
  }
  Vec p(gpu.num_params());
  gpu.get_params(p.data());
  EXPECT_LT(rel_error(p.data(), cpu.params(), p.size()), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Arch, EmulatedModel, ::testing::Values(Arch::kGpt2, Arch::kLlama),
                         [](const auto& info) { return std::string(arch_name(info.param)); });

}  // namespace
}  // namespace saturn
