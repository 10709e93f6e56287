#include "solver/synthetic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>

namespace saturn::solver::synthetic {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Zoo {
  Model model;
  double act_mb = 0;       // per sample without checkpointing (0: transformer formula)
  double act_ckpt_mb = 0;  // per sample with checkpointing
  double weight = 1;       // how often "mixed" sweeps pick it
  std::vector<int> batches;
  double data = 0;  // samples per job at scale 1
};

Zoo entry(const char* name, double params, int layers, int hidden, int heads, int tokens,
          double flops, double act_mb, double act_ckpt_mb, double weight, std::vector<int> batches,
          double data) {
  Zoo z;
  z.model.name = name;
  z.model.params = params;
  z.model.layers = layers;
  z.model.hidden = hidden;
  z.model.heads = heads;
  z.model.tokens = tokens;
  z.model.flops_per_sample = flops;
  z.act_mb = act_mb;
  z.act_ckpt_mb = act_ckpt_mb;
  z.weight = weight;
  z.batches = std::move(batches);
  z.data = data;
  return z;
}

const std::vector<Zoo>& zoo() {
  // Samples per job at scale 1: LLMs 1e8 tokens (one pass over a WikiText-103-sized corpus),
  // vision models one pass over ImageNet-1k.
  static const std::vector<Zoo> z = [] {
    const double llm = 1e8 / 1024, images = 1.28e6;
    std::vector<Zoo> v;
    v.push_back(entry("gpt2-124m", 124e6, 12, 768, 12, 1024, 0, 0, 0, 2.0, {8, 16, 32}, llm));
    v.push_back(entry("gpt2-355m", 355e6, 24, 1024, 16, 1024, 0, 0, 0, 2.0, {8, 16, 32}, llm));
    v.push_back(entry("gpt2-774m", 774e6, 36, 1280, 20, 1024, 0, 0, 0, 2.0, {8, 16, 32}, llm));
    v.push_back(entry("gpt2-1.5b", 1.56e9, 48, 1600, 25, 1024, 0, 0, 0, 2.0, {8, 16, 32}, llm));
    v.push_back(entry("gptj-6b", 6.05e9, 28, 4096, 16, 1024, 0, 0, 0, 1.5, {8, 16, 32}, llm));
    v.push_back(entry("llama-13b", 13.0e9, 40, 5120, 40, 1024, 0, 0, 0, 0.7, {8, 16}, llm));
    v.push_back(entry("llama-30b", 32.5e9, 60, 6656, 52, 1024, 0, 0, 0, 0.3, {8, 16}, llm));
    v.push_back(entry("vit-b", 86e6, 12, 768, 12, 197, 0, 0, 0, 2.0, {64, 128, 256}, images));
    v.push_back(entry("vit-l", 304e6, 24, 1024, 16, 197, 0, 0, 0, 2.0, {64, 128, 256}, images));
    v.push_back(entry("vit-h", 632e6, 32, 1280, 16, 257, 0, 0, 0, 1.5, {64, 128, 256}, images));
    v.push_back(entry("vit-g", 1.84e9, 48, 1664, 16, 256, 0, 0, 0, 1.0, {64, 128}, images));
    v.push_back(
        entry("resnet-50", 25.6e6, 50, 0, 0, 196, 3 * 4.1e9, 100, 30, 2.0, {128, 256}, images));
    v.push_back(
        entry("resnet-200m", 200e6, 200, 0, 0, 196, 3 * 40e9, 300, 60, 1.5, {64, 128}, images));
    return v;
  }();
  return z;
}

const Zoo& zoo_entry(const std::string& name) {
  for (const Zoo& z : zoo())
    if (z.model.name == name) return z;
  throw SolverError(fmt::format("synthetic: no model '{}' in the zoo", name));
}

// Activation bytes per sample (flash attention: no T^2 term).
double activation_bytes(const Zoo& z, bool ckpt) {
  const Model& m = z.model;
  if (z.act_mb > 0) return (ckpt ? z.act_ckpt_mb : z.act_mb) * 1e6;
  const double layer = 34.0 * m.tokens * m.hidden;
  return ckpt ? m.layers * 2.0 * m.tokens * m.hidden + layer : m.layers * layer;
}

double flops_per_sample(const Model& m) {
  return m.flops_per_sample > 0 ? m.flops_per_sample : 6.0 * m.params * m.tokens;
}

// FLOP/s one device sustains with `tokens` tokens in its micro-batch.
double throughput(const Hardware& hw, double tokens) {
  return hw.peak_tflops * 1e12 * hw.max_mfu * tokens / (tokens + 2048.0);
}

struct Candidate {
  std::string strategy;
  int devices, nodes;
  double step_s, memory_bytes;
};

}  // namespace

const std::vector<Model>& model_zoo() {
  static const std::vector<Model> models = [] {
    std::vector<Model> out;
    for (const Zoo& z : zoo()) out.push_back(z.model);
    return out;
  }();
  return models;
}

const Model& find_model(const std::string& name) {
  return zoo_entry(name).model;
}

std::vector<Config> job_configs(const Model& model, int batch, long long steps,
                                const Cluster& cluster, const Hardware& hw) {
  const Zoo& z = zoo_entry(model.name);
  const double P = model.params, B = batch, T = model.tokens;
  const double memory = hw.device_memory_gib * kGiB * 0.92;  // allocator headroom
  std::set<int> node_sizes;
  int widest = 0;
  for (const Node& n : cluster.nodes) {
    node_sizes.insert(n.devices);
    widest = std::max(widest, n.devices);
  }
  std::vector<Candidate> cands;
  // Each strategy with and without activation checkpointing; the faster one that fits wins.
  auto add = [&](const std::string& name, int g, int k, auto&& step_and_memory) {
    for (bool ckpt : {false, true}) {
      const auto [step, mem] = step_and_memory(ckpt);
      if (!(step > 0) || mem > memory) continue;
      cands.push_back({ckpt ? name + "+ckpt" : name, g, k, step, mem});
      return;  // without checkpointing fits: it is faster
    }
  };
  const double work = flops_per_sample(model) * B;
  const double states = 16.0 * P;  // bf16 weights + grads, fp32 master + Adam m, v
  const double layer_params = P / std::max(1, model.layers);
  auto compute = [&](bool ckpt) { return work * (ckpt ? 4.0 / 3.0 : 1.0); };
  for (int g = 1; g <= widest; ++g) {
    const double ring = 2.0 * (g - 1) / g;
    if (B >= g) {
      const double local = B / g;
      add("ddp", g, 1, [&](bool ckpt) {
        const double t = compute(ckpt) / g / throughput(hw, local * T) +
                         0.3 * 2.0 * P * ring / (hw.nvlink_gbs * 1e9) + 0.002;
        return std::pair{t, states + 2.0 * P + activation_bytes(z, ckpt) * local + 0.5 * kGiB};
      });
      add("fsdp", g, 1, [&](bool ckpt) {
        const double comm = g > 1 ? 3.0 * 2.0 * P * (g - 1.0) / g / (hw.nvlink_gbs * 1e9) : 0.0;
        const double t = compute(ckpt) / g / throughput(hw, local * T) + 0.4 * comm +
                         (g > 1 ? model.layers * 3 * 20e-6 : 0.0) + 0.002;
        return std::pair{t, states / g + 4.0 * 2.0 * layer_params +
                                activation_bytes(z, ckpt) * local + 0.5 * kGiB};
      });
      add("offload", g, 1, [&](bool ckpt) {
        const double comm = g > 1 ? 3.0 * 2.0 * P * (g - 1.0) / g / (hw.nvlink_gbs * 1e9) : 0.0;
        const double pcie = 6.0 * P / g / (hw.pcie_gbs * 1e9);
        const double adam = 2.0 * states / (hw.host_adam_gbs * 1e9);
        const double t =
            compute(ckpt) / g / throughput(hw, local * T) + 0.4 * comm + 0.5 * pcie + adam;
        if (states > hw.host_memory_gib * kGiB) return std::pair{0.0, 0.0};
        return std::pair{t,
                         4.0 * 2.0 * layer_params + activation_bytes(z, ckpt) * local + 1.0 * kGiB};
      });
    }
    if (g > 1 && g <= model.layers) {
      const int m = static_cast<int>(std::min(B, 4.0 * g));
      add("pipeline", g, 1, [&](bool ckpt) {
        const double micro = B / m;
        const double t =
            compute(ckpt) / g / throughput(hw, micro * T) * (m + g - 1.0) / m +
            2.0 * m * micro * T * std::max(1, model.hidden) * 2.0 / (hw.nvlink_gbs * 1e9) + 0.002;
        return std::pair{
            t,
            1.1 * states / g + activation_bytes(z, ckpt) * micro * std::min(m, g) / g + 0.5 * kGiB};
      });
    }
    if (g > 1 && (g & (g - 1)) == 0 && model.heads > 0 && model.heads % g == 0) {
      add("tensor", g, 1, [&](bool ckpt) {
        const double eff = std::pow(0.9, std::log2(static_cast<double>(g)));
        const double comm =
            4.0 * model.layers * B * T * model.hidden * 2.0 * ring / (hw.nvlink_gbs * 1e9);
        const double t = compute(ckpt) / g / (throughput(hw, B * T) * eff) + comm + 0.002;
        return std::pair{t,
                         states / g + activation_bytes(z, ckpt) * B * (1.0 / g + 0.1) + 0.5 * kGiB};
      });
    }
  }
  // Whole-node configurations for models of a billion parameters or more.
  if (P >= 1e9) {
    for (int per_node : node_sizes) {
      if (per_node < 4) continue;
      for (int k : {2, 4}) {
        int fit = 0;
        for (const Node& n : cluster.nodes) fit += n.devices >= per_node;
        if (fit < k) continue;
        const int g = k * per_node;
        if (B < g) continue;
        const double local = B / g;
        add("fsdp", g, k, [&](bool ckpt) {
          const double comm = 3.0 * 2.0 * P * (g - 1.0) / g / (hw.internode_gbs * 1e9);
          const double t = compute(ckpt) / g / throughput(hw, local * T) + 0.4 * comm +
                           model.layers * 3 * 40e-6 + 0.002;
          return std::pair{t, states / g + 4.0 * 2.0 * layer_params +
                                  activation_bytes(z, ckpt) * local + 0.5 * kGiB};
        });
        if (g <= model.layers) {
          const int m = static_cast<int>(std::min(B, 4.0 * g));
          add("pipeline", g, k, [&](bool ckpt) {
            const double micro = B / m;
            const double t =
                compute(ckpt) / g / throughput(hw, micro * T) * (m + g - 1.0) / m +
                2.0 * m * micro * T * std::max(1, model.hidden) * 2.0 / (hw.internode_gbs * 1e9) +
                0.002;
            return std::pair{t, 1.1 * states / g +
                                    activation_bytes(z, ckpt) * micro * std::min(m, g) / g +
                                    0.5 * kGiB};
          });
        }
      }
    }
  }
  std::vector<Config> out;
  for (const Candidate& c : cands) {
    Config config;
    config.strategy = c.strategy;
    config.devices = c.devices;
    config.nodes = c.nodes;
    config.time_s = c.step_s * static_cast<double>(steps);
    config.memory_gib = std::ceil(c.memory_bytes / kGiB * 10.0) / 10.0;
    config.source = "estimate";
    out.push_back(std::move(config));
  }
  return out;
}

Problem family(const std::string& name, const Cluster& cluster, int jobs, unsigned seed,
               const Hardware& base) {
  Hardware hw = base;
  if (!cluster.nodes.empty() && cluster.nodes[0].memory_gib > 0)
    hw.device_memory_gib = cluster.nodes[0].memory_gib;
  Problem p;
  p.cluster = cluster;
  for (Node& n : p.cluster.nodes)
    if (n.memory_gib <= 0) n.memory_gib = hw.device_memory_gib;
  auto add_sweep = [&](const Zoo& z, int batch, double samples, int copies,
                       const char* lr_names[]) {
    const long long steps = std::max(1LL, std::llround(samples / batch));
    const std::vector<Config> configs = job_configs(z.model, batch, steps, p.cluster, hw);
    for (int c = 0; c < copies; ++c) {
      Job job;
      job.id = fmt::format("{}-bs{}-lr{}", z.model.name, batch, lr_names[c]);
      for (int dup = 2;
           std::any_of(p.jobs.begin(), p.jobs.end(), [&](const Job& j) { return j.id == job.id; });
           ++dup)
        job.id = fmt::format("{}-bs{}-lr{}-{}", z.model.name, batch, lr_names[c], dup);
      job.steps = steps;
      job.configs = configs;
      p.jobs.push_back(std::move(job));
    }
  };
  const char* lrs[] = {"1e-5", "1e-4", "3e-3", "3e-4", "1e-3"};
  if (name == "txt") {
    for (const char* m : {"gpt2-1.5b", "gptj-6b"})
      for (int b : {16, 32}) add_sweep(zoo_entry(m), b, 3 * 1e8 / 1024, 3, lrs);
  } else if (name == "img") {
    for (const char* m : {"vit-g", "resnet-200m"})
      for (int b : {64, 128}) add_sweep(zoo_entry(m), b, 10 * 128e3, 3, lrs);
  } else if (name == "mixed") {
    std::mt19937 rng(seed);
    std::vector<double> weights;
    for (const Zoo& z : zoo()) weights.push_back(z.weight);
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    const double scales[] = {0.5, 1.0, 2.0};
    while (static_cast<int>(p.jobs.size()) < jobs) {
      const Zoo& z = zoo()[pick(rng)];
      const int batch = z.batches[rng() % z.batches.size()];
      const double samples = z.data * scales[rng() % 3];
      const int copies =
          std::min(2 + static_cast<int>(rng() % 4), jobs - static_cast<int>(p.jobs.size()));
      add_sweep(z, batch, samples, copies, lrs);
    }
  } else {
    throw SolverError(fmt::format("synthetic: unknown family '{}' (txt, img, mixed)", name));
  }
  return p;
}

}  // namespace saturn::solver::synthetic
