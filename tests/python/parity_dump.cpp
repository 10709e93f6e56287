// Writes what the PyTorch parity test compares against: a tiny model's initial weights, one
// batch, our logits, loss and every parameter gradient, then the losses of 10 AdamW steps and
// the final weights. Layout: DIR/meta.json (names, shapes, offsets) + DIR/tensors.bin (fp32).
#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/core/memory.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/model/cpu_model.hpp"
#include "runtime/optim/adamw.hpp"

namespace {

struct Dump {
  nlohmann::json meta = nlohmann::json::object();
  std::vector<float> data;
  void add(const std::string& name, const float* x, std::size_t n,
           std::vector<std::int64_t> shape) {
    meta["tensors"][name] = {{"offset", data.size()}, {"shape", shape}};
    data.insert(data.end(), x, x + n);
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: parity_dump gpt2|llama OUT_DIR\n");
    return 2;
  }
  using namespace saturn;
  ModelConfig mc;
  mc.arch = parse_arch(argv[1]);
  mc.n_layer = 2;
  mc.n_head = 4;
  mc.d_model = 64;
  mc.d_ff = mc.arch == Arch::kLlama ? 96 : 0;
  mc.vocab_size = 256;
  mc.max_seq_len = 16;
  const int B = 4, T = 16, steps = 10;
  OptimizerConfig oc;
  oc.lr = 1e-3;
  oc.beta1 = 0.9;
  oc.beta2 = 0.95;
  oc.eps = 1e-8;
  oc.weight_decay = 0.1;
  oc.grad_clip = 1.0;

  MemoryPool pool("cpu:0");
  CpuModel model(mc, pool);
  model.init_weights(42);
  // Larger-than-init weights make the test sensitive to every term (init is near-uniform).
  {
    Rng rng(7);
    for (const auto& t : model.layout().tensors()) {
      float* w = model.params() + t.offset;
      const bool vec = t.shape.size() == 1;
      for (std::size_t i = 0; i < t.numel; ++i)
        w[i] = vec ? static_cast<float>(1.0 + 0.1 * rng.normal()) : w[i] * 5.0f;
    }
  }
  Rng data_rng(99);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(B) * T * steps), targets(tokens.size());
  for (auto& x : tokens) x = static_cast<std::int32_t>(data_rng.below(256));
  for (auto& x : targets) x = static_cast<std::int32_t>(data_rng.below(256));

  Dump d;
  d.meta["config"] = {{"arch", argv[1]},
                      {"n_layer", mc.n_layer},
                      {"n_head", mc.n_head},
                      {"d_model", mc.d_model},
                      {"d_ff", mc.ffn_dim()},
                      {"vocab_size", mc.vocab_size},
                      {"max_seq_len", mc.max_seq_len},
                      {"norm_eps", mc.norm_eps},
                      {"rope_theta", mc.rope_theta},
                      {"B", B},
                      {"T", T},
                      {"steps", steps},
                      {"lr", oc.lr},
                      {"beta1", oc.beta1},
                      {"beta2", oc.beta2},
                      {"eps", oc.eps},
                      {"weight_decay", oc.weight_decay},
                      {"grad_clip", oc.grad_clip}};
  d.meta["tokens"] = tokens;
  d.meta["targets"] = targets;
  nlohmann::json names = nlohmann::json::array();
  for (const auto& t : model.layout().tensors()) {
    names.push_back(t.name);
    d.add("init/" + t.name, model.params() + t.offset, t.numel, t.shape);
  }
  d.meta["names"] = names;

  cpu::CpuDevice device(pool);
  AdamW opt(oc, model.layout(), 0, model.num_params(), device);
  std::vector<float> losses;
  const float dloss = 1.0f / static_cast<float>(B * T);
  for (int s = 0; s < steps; ++s) {
    const std::size_t off = static_cast<std::size_t>(s) * B * T;
    model.zero_grads();
    const float loss = model.forward(tokens.data() + off, targets.data() + off, B, T);
    if (s == 0) {
      // Logits before backward (backward overwrites the probabilities).
      std::vector<float> logits(static_cast<std::size_t>(B) * T * mc.vocab_size);
      CpuModel probe(mc, pool);
      std::memcpy(probe.params(), model.params(), model.num_params() * sizeof(float));
      probe.forward_logits(tokens.data(), B, T);
      std::memcpy(logits.data(), probe.logits(), logits.size() * sizeof(float));
      d.add("logits", logits.data(), logits.size(), {B * T, mc.vocab_size});
    }
    model.backward(dloss);
    if (s == 0) {
      d.meta["loss0"] = loss;
      for (const auto& t : model.layout().tensors())
        d.add("grad/" + t.name, model.grads() + t.offset, t.numel, t.shape);
    }
    losses.push_back(loss);
    double ss = 0;
    for (std::size_t i = 0; i < model.num_params(); ++i)
      ss += static_cast<double>(model.grads()[i]) * model.grads()[i];
    const float scale = clip_scale(std::sqrt(ss), oc.grad_clip);
    opt.step(model.params(), nullptr, model.grads(), oc.lr, scale, s + 1);
  }
  d.meta["losses"] = losses;
  for (const auto& t : model.layout().tensors())
    d.add("final/" + t.name, model.params() + t.offset, t.numel, t.shape);

  const std::string dir = argv[2];
  std::ofstream(dir + "/meta.json") << d.meta.dump();
  std::ofstream bin(dir + "/tensors.bin", std::ios::binary);
  bin.write(reinterpret_cast<const char*>(d.data.data()),
            static_cast<std::streamsize>(d.data.size() * sizeof(float)));
  return bin.good() ? 0 : 1;
}
