// A job's `early_stop:` rule (docs/workload.md, "early_stop"), step by step over its metrics:
//  - diverged: the training loss of a step, or a val_loss, is not finite (NaN, ±Inf), or is
//    above EarlyStopConfig::kDivergenceFactor times the job's first training loss (step 1's,
//    else the first one seen);
//  - patience K: K evaluations in a row without a val_loss strictly below the best so far
//    (the first evaluation sets the best).
// The first rule that fires stops the job at that step. Pure bookkeeping: the job's leader
// feeds it every step (earlier segments' steps from metrics.jsonl first), no MPI, no files.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "runtime/model/config.hpp"

namespace saturn::exec {

struct EarlyStopHit {
  std::string rule;  // "diverged" | "patience"
  std::int64_t step = 0;
  std::string metric;  // "loss" | "val_loss"
  double value = 0;    // the metric at `step` (NaN/Inf as measured)
  // diverged: the threshold it passed (NaN for a non-finite value); patience: the best val_loss.
  double reference = 0;
  std::int64_t best_step = 0;  // patience: the evaluation that set the best
  std::string describe() const;
  nlohmann::json to_json() const;  // non-finite numbers as strings ("nan", "inf")
  static EarlyStopHit from_json(const nlohmann::json& j);
};

class EarlyStopRule {
 public:
  explicit EarlyStopRule(const EarlyStopConfig& config) : config_(config) {}
  bool enabled() const { return config_.enabled(); }
  // One step's metrics (val_loss: when the step evaluated). The hit, if the rule stops the job
  // at this step; after a hit the rule says nothing more.
  std::optional<EarlyStopHit> observe(std::int64_t step, double loss,
                                      std::optional<double> val_loss);
  // Replays metrics.jsonl lines of earlier segments (steps below `before`), so that patience
  // and the first loss carry over a re-plan, a rung or a resume.
  void replay(const std::string& metrics_jsonl_text, std::int64_t before);

 private:
  EarlyStopConfig config_;
  double first_loss_ = 0;
  bool has_first_ = false;
  double best_val_ = 0;
  std::int64_t best_step_ = 0;
  bool has_best_ = false;
  std::int64_t since_best_ = 0;
  bool fired_ = false;
};

}  // namespace saturn::exec
