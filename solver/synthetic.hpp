// Synthetic job families for benchmarks, the simulator and tests: model-selection sweeps
// shaped like the Saturn paper's workloads, with candidate configurations from an analytic
// cost model (not a profiler, and not fitted to any result).
//
// Cost model, per strategy and device count g (A100-40GB-like devices by default):
//   compute   6 * params * tokens per sample (image models: a given FLOP count), x 4/3 with
//             activation checkpointing; per-device efficiency falls with the local micro-batch
//             (tokens / (tokens + 2048)), which gives Amdahl-like diminishing returns.
//   ddp       full replica (16 bytes/param of weights, gradients, Adam state); gradient
//             all-reduce 2(g-1)/g x 2 bytes/param, 70% hidden behind the backward pass.
//   fsdp      states sharded 1/g; all-gather x2 + reduce-scatter of 2 bytes/param, 60% hidden.
//   pipeline  states 1/g (10% imbalance); GPipe bubble (g-1)/(m+g-1) with m = min(batch, 4g)
//             micro-batches.
//   tensor    g in {1,2,4,8} dividing the heads, one node; 4 activation all-reduces per layer
//             per step, not hidden.
//   offload   ZeRO-offload / "spilling": states in host memory; PCIe traffic and a host Adam
//             step that does not shrink with g.
//   whole-node fsdp / pipeline over 2 or 4 nodes for models of 1B parameters or more, with
//             collectives at the inter-node bandwidth.
// Activation checkpointing is chosen per configuration only when it is needed to fit; the
// strategy label then carries "+ckpt". Configurations that do not fit device memory are not
// emitted (so, e.g., GPT-J-6B has nothing under 4 devices except offload).
#pragma once

#include <string>
#include <vector>

#include "solver/problem.hpp"

namespace saturn::solver::synthetic {

struct Hardware {
  double device_memory_gib = 40.0;
  double host_memory_gib = 1152.0;
  double peak_tflops = 312.0;    // bf16 dense
  double max_mfu = 0.5;          // at large micro-batches
  double nvlink_gbs = 200.0;     // intra-node collective bandwidth per device, GB/s
  double internode_gbs = 40.0;   // inter-node, per device, GB/s
  double pcie_gbs = 20.0;        // host <-> device, per device
  double host_adam_gbs = 100.0;  // host memory bandwidth for the offloaded optimizer step
};

struct Model {
  std::string name;
  double params = 0;  // parameters
  int layers = 0, hidden = 0, heads = 0;
  int tokens = 0;               // sequence length, or patches per image
  double flops_per_sample = 0;  // training FLOPs per sample; 0 = 6 * params * tokens
};

// The models the families draw from (GPT-2 sizes, GPT-J-6B, LLaMA-13B/30B-like, ViT-B/L/H/G,
// ResNet-50/200M-like).
const std::vector<Model>& model_zoo();
const Model& find_model(const std::string& name);

// Candidate configurations of one job: `batch` samples per step, `steps` steps, on a cluster
// whose nodes have the given device counts (for the single-node sizes and whole-node spans).
std::vector<Config> job_configs(const Model& model, int batch, long long steps,
                                const Cluster& cluster, const Hardware& hw = {});

// Families:
//   "txt"   the paper's TXT workload: GPT-2-1.5B and GPT-J-6B x batch {16, 32} x lr {3}:
//           12 jobs, 3 epochs of a 100M-token corpus at sequence length 1024.
//   "img"   the paper's IMG workload: ViT-G-1.8B and a 200M-parameter ResNet x batch
//           {64, 128} x lr {3}: 12 jobs, 10 epochs of a 128k-image subset.
//   "mixed" `jobs` jobs in sweeps over the zoo: each sweep is a model, batch size and data
//           size repeated for 2-5 learning rates (identical jobs, as in real sweeps).
// The cluster's device memory is taken from its first node when it states one.
Problem family(const std::string& name, const Cluster& cluster, int jobs = 12, unsigned seed = 1,
               const Hardware& hw = {});

}  // namespace saturn::solver::synthetic
