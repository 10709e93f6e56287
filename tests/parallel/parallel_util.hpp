// Helpers for the MPI tests of the parallel strategies: tiny jobs with their data on disk (made
// by rank 0, shared by path), direct strategy runs on in-memory batches, and the comparison
// rule of the equivalence tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/comm/comm_pair.hpp"
#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/core/rng.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/data/token_file.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/parallel/assemble.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/train/trainer.hpp"

namespace saturn::testing {

// The world as a Communicator (one per test process).
inline comm::Communicator& world() {
  static std::unique_ptr<comm::MpiCommunicator> w = comm::MpiCommunicator::world();
  return *w;
}

// What a strategy runs on in a test: a CPU device, a host pool (offload) and the communicator
// pair over `c`. Declare it before the strategy, which must go first.
struct Harness {
  explicit Harness(comm::Communicator& c, const std::string& name = "cpu")
      : device(name, 0), host(name + "-host"), comms(comm::make_comm_pair(c, device)) {}
  void setup(parallel::Strategy& s) { s.setup(*comms, device, host); }
  std::size_t peak() { return device.memory().peak(); }
  cpu::CpuDevice device;
  MemoryPool host;
  std::unique_ptr<comm::CommPair> comms;
};

// Tiny models: 4 layers (a stage per rank at degree 4), 4 heads and an MLP width divisible by
// 4 (tensor parallelism at degree 4).
inline ModelConfig tiny_model(Arch arch) {
  ModelConfig c;
  c.arch = arch;
  c.n_layer = 4;
  c.n_head = 4;
  c.d_model = 32;
  c.d_ff = arch == Arch::kLlama ? 64 : 0;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  return c;
}

// A LLaMA with grouped-query attention, 8 query heads sharing 4 key/value heads (tensor
// parallelism at degree 4 gives a rank two query heads and their one key/value head), and its
// head tied to the token embedding (pipelines: on the first and the last stage).
inline ModelConfig tiny_llama_gqa_tied() {
  ModelConfig c = tiny_model(Arch::kLlama);
  c.n_head = 8;
  c.n_kv_head = 4;
  c.tie_embeddings = true;
  return c;
}

// The llama variants of the families Saturn imports (issue 30) at once: Qwen2's q/k/v and
// LLaMA's o and MLP biases (tensor parallelism splits the column-parallel ones, replicates the
// row-parallel ones), Mistral's sliding window (5 of 16 positions) and Llama 3.1's rotary
// scaling, with grouped-query attention.
inline ModelConfig tiny_llama_variants() {
  ModelConfig c = tiny_llama_gqa_tied();
  c.tie_embeddings = false;
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.sliding_window = 5;
  c.rope_theta = 500000.0f;
  c.rope_scaling = RopeScalingKind::kLlama3;
  c.rope_factor = 8.0f;
  c.rope_original_max_positions = 12;
  return c;
}

// Gemma's switches: GeGLU, RMSNorm weights as (1 + w), embeddings scaled by sqrt(d_model), and
// a head width of its own (8 heads of 12: 96, not d_model 32), tied.
inline ModelConfig tiny_gemma() {
  ModelConfig c = tiny_llama_gqa_tied();
  c.head_size = 12;
  c.mlp_activation = GatedActivation::kGeluTanh;
  c.norm_unit_offset = true;
  c.scale_embeddings = true;
  c.padding_idx = 0;
  return c;
}

// Gemma 2's besides: norms after attention and the MLP, scores scaled by query_pre_attn_scalar
// and soft-capped, capped logits, and a sliding window (5 of 16 positions) on even layers only.
inline ModelConfig tiny_gemma2() {
  ModelConfig c = tiny_gemma();
  c.post_norms = true;
  c.sliding_window = 5;
  c.alternate_window = true;
  c.query_pre_attn_scalar = 10.0f;
  c.attn_softcap = 0.5f;   // low enough to bend these small initial scores
  c.final_softcap = 0.2f;  // and logits
  return c;
}

// The tiny models by name, for parameterised tests: gpt2, llama, llama_gqa_tied,
// llama_variants, gemma, gemma2.
inline ModelConfig tiny_model_named(const std::string& name) {
  if (name == "gpt2") return tiny_model(Arch::kGpt2);
  if (name == "llama") return tiny_model(Arch::kLlama);
  if (name == "llama_gqa_tied") return tiny_llama_gqa_tied();
  if (name == "llama_variants") return tiny_llama_variants();
  if (name == "gemma") return tiny_gemma();
  if (name == "gemma2") return tiny_gemma2();
  throw std::invalid_argument("no tiny model named " + name);
}

inline TrainConfig tiny_train() {
  TrainConfig t;
  t.batch_size = 8;
  t.seq_len = 16;
  t.steps = 20;
  t.eval_every = 10;
  t.eval_batches = 2;
  t.seed = 7;
  // Adam's first update of an element is lr·g/(|g| + eps): for the few elements whose first
  // gradient lands within a few eps of zero it depends on g's last bits, which any change of
  // summation order (a reduction across ranks, a split matrix product) moves. Warm-up (as real
  // schedules have) and eps = 1e-6 keep that first step small; after it, Adam's history damps
  // such differences (docs/strategies.md, "Equivalence").
  t.optimizer.lr = 1e-3;
  t.optimizer.eps = 1e-6;
  t.optimizer.weight_decay = 0.1;
  t.optimizer.grad_clip = 0.5;  // active in most steps: exercises the global norm
  t.schedule.warmup = 10;
  t.schedule.decay = "cosine";
  return t;
}

// Tokens with structure (a noisy repeating pattern), so training moves the loss.
inline std::vector<std::uint16_t> pattern_tokens(std::size_t n, int vocab, std::uint64_t seed) {
  Rng r(seed);
  std::vector<std::uint16_t> t(n);
  for (std::size_t i = 0; i < n; ++i)
    t[i] = static_cast<std::uint16_t>(r.uniform() < 0.2
                                          ? r.below(static_cast<std::uint64_t>(vocab))
                                          : (i * 7 + i / 5) % static_cast<std::size_t>(vocab));
  return t;
}

// A loss mask in runs of trained and untrained targets of irregular lengths (about 60 %
// trained), so that micro-batches and ranks hold different numbers of trained targets.
inline std::vector<std::uint8_t> pattern_loss_mask(std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  std::vector<std::uint8_t> m(n);
  std::uint8_t on = 1;
  for (std::size_t i = 0; i < n;) {
    const std::size_t run = 1 + r.below(on ? 40 : 30);
    for (std::size_t k = 0; k < run && i < n; ++k, ++i) m[i] = on;
    on = on ? 0 : 1;
  }
  return m;
}

// Record starts for packed instruction data: records of 1 to 40 tokens (seq_len 16: records
// inside a window, across its edges and longer than it).
inline std::vector<std::uint64_t> pattern_record_starts(std::size_t n, std::uint64_t seed) {
  Rng r(seed);
  std::vector<std::uint64_t> starts;
  for (std::size_t i = 0; i < n; i += 1 + r.below(40)) starts.push_back(i);
  return starts;
}

// A data directory made by rank 0 and removed at exit; every rank gets its path. With
// `loss_masks`, instruction data: a loss mask beside each token file; with `records`, the
// record starts beside them too (packing without cross-attention).
class SharedData {
 public:
  explicit SharedData(int vocab, bool loss_masks = false, bool records = false) {
    comm::Communicator& c = world();
    rank_ = c.rank();
    std::int64_t pid = ::getpid();
    c.broadcast(&pid, 1, 0);
    dir_ = std::filesystem::temp_directory_path() /
           ("saturn-par-" + std::to_string(pid) + "-" + std::to_string(counter()++));
    if (c.rank() == 0) {
      std::filesystem::create_directories(dir_);
      data::write_llmc_tokens(dir_ / "train.bin", pattern_tokens(20000, vocab, 1));
      data::write_llmc_tokens(dir_ / "val.bin", pattern_tokens(3000, vocab, 2));
      if (loss_masks) {
        data::write_loss_mask(dir_ / "train.mask", pattern_loss_mask(20000, 3));
        data::write_loss_mask(dir_ / "val.mask", pattern_loss_mask(3000, 4));
      }
      if (records) {
        data::write_record_starts(dir_ / "train.records", pattern_record_starts(20000, 5));
        data::write_record_starts(dir_ / "val.records", pattern_record_starts(3000, 6));
      }
    }
    c.barrier();
  }
  // A function-static instance is destroyed after MPI_Finalize, when every rank has finished:
  // no barrier is needed (or allowed) then.
  ~SharedData() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) world().barrier();
    if (rank_ == 0) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  SharedData(const SharedData&) = delete;
  SharedData& operator=(const SharedData&) = delete;
  std::filesystem::path train() const { return dir_ / "train.bin"; }
  std::filesystem::path val() const { return dir_ / "val.bin"; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path dir_;
  int rank_ = 0;
};

// Relative difference of two equal-shaped tensors: max|a - b| / max|b| (b the reference).
inline double relative_diff(const float* a, const float* b, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(static_cast<double>(b[i])));
  }
  return den > 0 ? num / den : num;
}

// Per tensor of the canonical layout: the largest relative difference and its tensor.
inline std::pair<double, std::string> worst_tensor(const ModelConfig& model,
                                                   const std::vector<float>& got,
                                                   const std::vector<float>& ref) {
  const ParameterLayout layout(model);
  std::pair<double, std::string> worst{0.0, ""};
  for (const auto& t : layout.tensors()) {
    const double d = relative_diff(got.data() + t.offset, ref.data() + t.offset, t.numel);
    if (d > worst.first || worst.second.empty()) worst = {d, t.name};
  }
  return worst;
}

// Whole canonical state of a strategy, on every rank.
inline std::vector<float> canonical_everywhere(parallel::Strategy& s, const ModelConfig& model,
                                               parallel::StateKind kind) {
  std::vector<float> all = parallel::assemble_canonical(world(), model, s.export_state(kind));
  std::int64_t n = static_cast<std::int64_t>(all.size());
  world().broadcast(&n, 1, 0);
  all.resize(static_cast<std::size_t>(n));
  world().broadcast(all.data(), all.size(), 0);
  return all;
}

}  // namespace saturn::testing
