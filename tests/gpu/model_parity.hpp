// The model program on a CUDA device (a GPU, or the CPU emulator) against the same program on the
// CPU backend: forward (loss and logits) and backward (every parameter's gradient) from identical
// bf16-representable weights, and a short training run whose losses must track the CPU run's.
// Shared by tests/gpu/test_gpu_model.cpp (a GPU) and tests/gpu/emu/test_cuda_emulated_model.cpp.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/device.hpp"
#include "runtime/core/dtype.hpp"
#include "runtime/model/cpu_model.hpp"
#include "runtime/model/model.hpp"
#include "runtime/optim/adamw.hpp"

namespace saturn::model_parity {

using Vec = std::vector<float>;

inline double rel_error(const float* got, const float* want, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    den += static_cast<double>(want[i]) * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline float round_bf16(float x) {
  return to_float(to_bfloat16(x));
}

// A model on a device driven from host arrays, reading and writing the canonical flat layout
// (the device's own layout may align its groups).
class DeviceModel {
 public:
  DeviceModel(Device& device, const ModelConfig& config)
      : device_(&device), model_(make_model(device, config)), canonical_(config) {}
  Model& model() { return *model_; }

  void set_params(const float* canonical) {
    const auto& dst = model_->layout().tensors();
    const auto& src = canonical_.tensors();
    for (std::size_t k = 0; k < src.size(); ++k)
      device_->upload(model_->master() + dst[k].offset, canonical + src[k].offset,
                      src[k].numel * sizeof(float));
    model_->refresh_weights();
  }
  // The device's parameters (or, gradients: its trained tensors' gradients) in the canonical
  // layout (resp. gradient layout) of the CPU.
  Vec canonical(const float* on_device, bool gradients = false) {
    Vec out(gradients ? canonical_.grad_total() : canonical_.total());
    const auto& src = model_->layout().tensors();
    const auto& dst = canonical_.tensors();
    for (std::size_t k = 0; k < dst.size(); ++k) {
      if (gradients && !dst[k].trainable) continue;
      device_->download(out.data() + (gradients ? dst[k].grad_offset : dst[k].offset),
                        on_device + (gradients ? src[k].grad_offset : src[k].offset),
                        dst[k].numel * sizeof(float));
    }
    return out;
  }
  Vec params() { return canonical(model_->master()); }
  Vec grads() { return canonical(model_->grads(), true); }

  // Packed records: [2][B*T] positions and segment ends (Model::set_segments), host memory,
  // for the next passes; empty: none.
  void set_segments(const std::vector<std::int32_t>& segments) { segments_host_ = segments; }

  float forward(const std::vector<std::int32_t>& tokens, const std::vector<std::int32_t>& targets,
                int B, int T) {
    upload_tokens(tokens, targets, B, T);
    model_->forward(tokens_.data(), targets_.data());
    float loss = 0;
    device_->download(&loss, model_->loss(), sizeof loss);
    return loss;
  }
  Vec logits(const std::vector<std::int32_t>& tokens, int B, int T) {
    upload_tokens(tokens, tokens, B, T);
    model_->forward(tokens_.data(), nullptr);
    const std::size_t n =
        static_cast<std::size_t>(B) * T * static_cast<std::size_t>(model_->config().vocab_size);
    const DType t = model_->traits().activations;
    std::vector<std::byte> raw(n * dtype_size(t));
    device_->download(raw.data(), model_->logits(), raw.size());
    Vec out(n);
    if (t == DType::kFloat32) {
      std::memcpy(out.data(), raw.data(), raw.size());
    } else {
      const auto* b = reinterpret_cast<const BFloat16*>(raw.data());
      for (std::size_t i = 0; i < n; ++i) out[i] = to_float(b[i]);
    }
    return out;
  }
  void backward(float dloss) { model_->backward(dloss); }
  double grad_norm() {
    return std::sqrt(device_->sum_of_squares(model_->grads(), model_->layout().grad_total()));
  }

 private:
  void upload_tokens(const std::vector<std::int32_t>& tokens,
                     const std::vector<std::int32_t>& targets, int B, int T) {
    const std::size_t n = static_cast<std::size_t>(B) * T;
    if (model_->batch() != B || model_->seq() != T) model_->reserve(B, T);
    if (tokens_.size() != n) {
      tokens_ = Buffer<std::int32_t>(device_->memory(), n, "tokens");
      targets_ = Buffer<std::int32_t>(device_->memory(), n, "tokens");
    }
    device_->upload(tokens_.data(), tokens.data(), n * sizeof(std::int32_t));
    device_->upload(targets_.data(), targets.data(), n * sizeof(std::int32_t));
    if (segments_host_.empty()) {
      model_->set_segments(nullptr);
      return;
    }
    segments_ = Buffer<std::int32_t>(device_->memory(), segments_host_.size(), "tokens");
    device_->upload(segments_.data(), segments_host_.data(),
                    segments_host_.size() * sizeof(std::int32_t));
    model_->set_segments(segments_.data());
  }
  Device* device_;
  std::unique_ptr<Model> model_;
  ParameterLayout canonical_;
  Buffer<std::int32_t> tokens_, targets_, segments_;
  std::vector<std::int32_t> segments_host_;
};

// Packed records for B rows of T tokens: records of the given lengths (cycled, the last one cut
// by the row's end) as [2][B*T] positions and segment ends, as parallel::TokenStage stages them.
inline std::vector<std::int32_t> packed_segments(int B, int T, const std::vector<int>& lengths) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::vector<std::int32_t> s(2 * N);
  std::size_t next = 0;
  for (int b = 0; b < B; ++b) {
    std::int32_t* pos = s.data() + static_cast<std::size_t>(b) * T;
    std::int32_t* end = pos + N;
    for (int t = 0; t < T;) {
      const int len = lengths[next++ % lengths.size()];
      for (int i = 0; i < len && t < T; ++i, ++t) pos[t] = i;
    }
    end[T - 1] = T;
    for (int t = T - 2; t >= 0; --t) end[t] = pos[t + 1] == 0 ? t + 1 : end[t + 1];
  }
  return s;
}

struct Tolerances {
  double logits = 3e-2, loss = 5e-3, grads = 5e-2, tensor_grads = 1e-1;
};

// Forward and backward from the same bf16-representable weights; segments: packed records
// ([2][B*T], packed_segments; empty: none).
inline void parity_case(Device& device, const ModelConfig& cfg, int B, int T,
                        const Tolerances& tol = {},
                        const std::vector<std::int32_t>& segments = {}) {
  SCOPED_TRACE(arch_name(cfg.arch));
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::mt19937 rng(99);
  std::vector<std::int32_t> tokens(N), targets(N);
  for (auto& t : tokens)
    t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
  for (auto& t : targets)
    t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
  targets[5] = -1;  // an ignored position

  MemoryPool cpu_pool("cpu");
  CpuModel cpu(cfg, cpu_pool);
  cpu.init_weights(5);
  // LoRA's B starts at zero (so would A's gradient): give the adapters values that matter.
  for (const auto& t : cpu.layout().tensors())
    if (t.name.find(".lora_B.") != std::string::npos)
      for (std::size_t i = 0; i < t.numel; ++i)
        cpu.params()[t.offset + i] =
            0.05f * static_cast<float>(static_cast<int>(rng() % 201) - 100) / 100.0f;
  for (std::size_t i = 0; i < cpu.num_params(); ++i) cpu.params()[i] = round_bf16(cpu.params()[i]);
  DeviceModel gpu(device, cfg);
  gpu.set_params(cpu.params());
  const Vec back = gpu.params();
  EXPECT_EQ(rel_error(back.data(), cpu.params(), back.size()), 0.0);
  if (!segments.empty()) {
    cpu.reserve(B, T);
    cpu.model().set_segments(segments.data());
    gpu.set_segments(segments);
  }

  cpu.forward_logits(tokens.data(), B, T);
  const Vec want_logits(cpu.logits(), cpu.logits() + N * static_cast<std::size_t>(cfg.vocab_size));
  const Vec logits = gpu.logits(tokens, B, T);
  EXPECT_LT(rel_error(logits.data(), want_logits.data(), logits.size()), tol.logits);

  cpu.zero_grads();
  gpu.model().zero_grads();
  const float lc = cpu.forward(tokens.data(), targets.data(), B, T);
  const float lg = gpu.forward(tokens, targets, B, T);
  EXPECT_NEAR(lg, lc, tol.loss * lc);
  const float dloss = 1.0f / static_cast<float>(N - 1);
  cpu.backward(dloss);
  gpu.backward(dloss);
  const Vec grads = gpu.grads();
  EXPECT_LT(rel_error(grads.data(), cpu.grads(), grads.size()), tol.grads);
  EXPECT_GT(grads.size(), 0u);
  for (const auto& t : cpu.layout().tensors()) {
    if (!t.trainable) continue;
    EXPECT_LT(rel_error(grads.data() + t.grad_offset, cpu.grads() + t.grad_offset, t.numel),
              tol.tensor_grads)
        << t.name;
  }
}

// `steps` AdamW steps on a fixed, learnable batch: the losses must track the CPU run's.
inline void training_case(Device& device, const ModelConfig& cfg, int B, int T, int steps,
                          double lr, bool require_learning) {
  SCOPED_TRACE(arch_name(cfg.arch));
  const std::size_t N = static_cast<std::size_t>(B) * T;
  std::mt19937 rng(7);
  std::vector<std::int32_t> seq(static_cast<std::size_t>(T) + 1);
  for (auto& t : seq) t = static_cast<std::int32_t>(rng() % static_cast<unsigned>(cfg.vocab_size));
  std::vector<std::int32_t> tokens(N), targets(N);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < T; ++i) {
      tokens[static_cast<std::size_t>(b) * T + i] = seq[static_cast<std::size_t>(i)];
      targets[static_cast<std::size_t>(b) * T + i] = seq[static_cast<std::size_t>(i) + 1];
    }
  OptimizerConfig oc;
  oc.lr = lr;
  oc.grad_clip = 1.0;
  MemoryPool cpu_pool("cpu");
  CpuModel cpu(cfg, cpu_pool);
  cpu.init_weights(7);
  for (std::size_t i = 0; i < cpu.num_params(); ++i) cpu.params()[i] = round_bf16(cpu.params()[i]);
  cpu::CpuDevice cpu_device(cpu_pool);
  AdamW cpu_opt(oc, cpu.layout(), 0, cpu.layout().grad_total(), cpu_device, 0);
  DeviceModel gpu(device, cfg);
  gpu.set_params(cpu.params());
  AdamW gpu_opt(oc, gpu.model().layout(), 0, gpu.model().layout().grad_total(), device, 0);
  std::vector<float> lc, lg;
  for (int s = 1; s <= steps; ++s) {
    cpu.zero_grads();
    lc.push_back(cpu.forward(tokens.data(), targets.data(), B, T));
    cpu.backward(1.0f / static_cast<float>(N));
    const double nc = std::sqrt(cpu_device.sum_of_squares(cpu.grads(), cpu.layout().grad_total()));
    cpu_opt.step(cpu.params(), nullptr, cpu.grads(), oc.lr, clip_scale(nc, oc.grad_clip), s);

    gpu.model().zero_grads();
    lg.push_back(gpu.forward(tokens, targets, B, T));
    gpu.backward(1.0f / static_cast<float>(N));
    const double ng = gpu.grad_norm();
    gpu_opt.step(gpu.model().master(), gpu.model().weights(), gpu.model().grads(), oc.lr,
                 clip_scale(ng, oc.grad_clip), s);
    EXPECT_NEAR(ng, nc, 0.1 * nc) << "gradient norm at step " << s;
  }
  for (int s = 0; s < steps; ++s) {
    const auto i = static_cast<std::size_t>(s);
    std::printf("step %2d  cpu %.4f  cuda %.4f\n", s + 1, lc[i], lg[i]);
    EXPECT_NEAR(lg[i], lc[i], 0.05 + 0.05 * lc[i]) << "step " << s + 1;
  }
  if (require_learning) {
    EXPECT_LT(lc.back(), lc.front() - 1.0f) << "the CPU run did not learn; the check is void";
    EXPECT_LT(lg.back(), lg.front() - 1.0f);
  }
  const Vec p = gpu.params();
  EXPECT_LT(rel_error(p.data(), cpu.params(), p.size()), 2e-2);
}

}  // namespace saturn::model_parity
