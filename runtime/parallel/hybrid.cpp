#include "runtime/parallel/hybrid.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

#include "runtime/parallel/common.hpp"
#include "runtime/parallel/ddp.hpp"
#include "runtime/parallel/pipeline.hpp"

namespace saturn::parallel {

namespace {

// A hybrid whose grid cannot be formed: reports why from estimate() and setup().
class UnformedHybrid final : public Strategy {
 public:
  UnformedHybrid(StrategySpec spec, std::string name, std::string reason)
      : Strategy(std::move(spec)), name_(std::move(name)), reason_(std::move(reason)) {}
  std::string name() const override { return name_; }
  Estimate estimate() const override {
    Estimate e;
    return infeasible(e, reason_);
  }
  void setup(comm::CommPair&, Device&, MemoryPool&) override { fail(); }
  StepResult train_step(const data::Batch&, std::int64_t) override { fail(); }
  double evaluate(const data::Batch&) override { fail(); }
  StateSlices export_state(StateKind) override { fail(); }
  void import_state(StateKind, const StateSlices&) override { fail(); }

 private:
  [[noreturn]] void fail() const { throw InputError(reason_); }
  std::string name_, reason_;
};

}  // namespace

int hybrid_stages(const StrategySpec& spec) {
  if (spec.knobs.stages > 0) return spec.knobs.stages;
  for (int p = spec.degree - 1; p >= 2; --p)
    if (spec.degree % p == 0 && p <= spec.model.n_layer) return p;
  return 0;
}

int hybrid_tensor_degree(const StrategySpec& spec) {
  if (spec.knobs.tensor_degree > 0) return spec.knobs.tensor_degree;
  for (int t = spec.degree - 1; t >= 2; --t)
    if (spec.degree % t == 0 && spec.model.n_head % t == 0 && spec.model.kv_heads() % t == 0 &&
        spec.model.ffn_dim() % t == 0)
      return t;
  return 0;
}

std::unique_ptr<Strategy> make_ddp_pipeline(const StrategySpec& spec) {
  const int p = hybrid_stages(spec);
  if (p == 0)
    return std::make_unique<UnformedHybrid>(
        spec, "ddp+pipeline",
        fmt::format("ddp+pipeline: degree {} has no proper divisor p >= 2 with p <= n_layer {} "
                    "(set --knob stages=P)",
                    spec.degree, spec.model.n_layer));
  return std::make_unique<PipelineStrategy>(spec, "ddp+pipeline", p);
}

std::unique_ptr<Strategy> make_ddp_tensor(const StrategySpec& spec) {
  const int t = hybrid_tensor_degree(spec);
  if (t == 0)
    return std::make_unique<UnformedHybrid>(
        spec, "ddp+tensor",
        fmt::format("ddp+tensor: degree {} has no proper divisor t >= 2 dividing n_head {}, "
                    "n_kv_head {} and d_ff {} (set --knob tensor_degree=T)",
                    spec.degree, spec.model.n_head, spec.model.kv_heads(), spec.model.ffn_dim()));
  return std::make_unique<DdpStrategy>(spec, "ddp+tensor", t);
}

StrategyInfo ddp_pipeline_strategy() {
  StrategyInfo s;
  s.name = "ddp+pipeline";
  s.help = "data-parallel replicas of a pipeline (a 2-D grid; --knob stages=P)";
  s.min_degree = 4;
  s.knob_variants.push_back({"schedule=gpipe"});
  s.make = make_ddp_pipeline;
  return s;
}

StrategyInfo ddp_tensor_strategy() {
  StrategyInfo s;
  s.name = "ddp+tensor";
  s.help = "data-parallel replicas of a tensor-parallel group (a 2-D grid; --knob tensor_degree=T)";
  s.min_degree = 4;
  s.make = make_ddp_tensor;
  return s;
}

}  // namespace saturn::parallel
