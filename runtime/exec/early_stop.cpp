#include "runtime/exec/early_stop.hpp"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <sstream>

namespace saturn::exec {
namespace {

nlohmann::json number_json(double x) {
  if (std::isfinite(x)) return x;
  return std::isnan(x) ? "nan" : (x > 0 ? "inf" : "-inf");
}

double number_of(const nlohmann::json& j) {
  if (j.is_number()) return j.get<double>();
  const std::string s = j.is_string() ? j.get<std::string>() : "nan";
  if (s == "inf") return INFINITY;
  if (s == "-inf") return -INFINITY;
  return NAN;
}

}  // namespace

std::string EarlyStopHit::describe() const {
  if (rule == "diverged")
    return std::isnan(reference)
               ? fmt::format("early_stop: diverged at step {}: {} is {}", step, metric, value)
               : fmt::format(
                     "early_stop: diverged at step {}: {} {:.6g} > {:g} x the first "
                     "training loss ({:.6g})",
                     step, metric, value, EarlyStopConfig::kDivergenceFactor, reference);
  return fmt::format(
      "early_stop: patience at step {}: val_loss {:.6g}, no better than the best {:.6g} (step "
      "{}) for the evaluations since",
      step, value, reference, best_step);
}

nlohmann::json EarlyStopHit::to_json() const {
  nlohmann::json j = {{"rule", rule},
                      {"step", step},
                      {"metric", metric},
                      {"value", number_json(value)},
                      {"reference", number_json(reference)}};
  if (rule == "patience") j["best_step"] = best_step;
  return j;
}

EarlyStopHit EarlyStopHit::from_json(const nlohmann::json& j) {
  EarlyStopHit h;
  h.rule = j.at("rule").get<std::string>();
  h.step = j.at("step").get<std::int64_t>();
  h.metric = j.at("metric").get<std::string>();
  h.value = number_of(j.at("value"));
  h.reference = number_of(j.at("reference"));
  h.best_step = j.value("best_step", std::int64_t{0});
  return h;
}

std::optional<EarlyStopHit> EarlyStopRule::observe(std::int64_t step, double loss,
                                                   std::optional<double> val_loss) {
  if (!enabled() || fired_) return std::nullopt;
  if (!has_first_ && std::isfinite(loss)) {
    first_loss_ = loss;
    has_first_ = true;
  }
  std::optional<EarlyStopHit> hit;
  if (config_.diverged) {
    const double limit = EarlyStopConfig::kDivergenceFactor * first_loss_;
    const auto check = [&](const char* metric, double x) {
      if (hit) return;
      if (!std::isfinite(x))
        hit = EarlyStopHit{"diverged", step, metric, x, NAN, 0};
      else if (has_first_ && x > limit)
        hit = EarlyStopHit{"diverged", step, metric, x, limit, 0};
    };
    check("loss", loss);
    if (val_loss) check("val_loss", *val_loss);
  }
  if (!hit && config_.patience > 0 && val_loss) {
    if (!has_best_ || *val_loss < best_val_) {
      best_val_ = *val_loss;
      best_step_ = step;
      has_best_ = true;
      since_best_ = 0;
    } else if (++since_best_ >= config_.patience) {
      hit = EarlyStopHit{"patience", step, "val_loss", *val_loss, best_val_, best_step_};
    }
  }
  fired_ = hit.has_value();
  return hit;
}

void EarlyStopRule::replay(const std::string& text, std::int64_t before) {
  // A step may appear twice (a segment cut short after its last checkpoint and run again):
  // the later line holds what the job's history now is.
  std::map<std::int64_t, nlohmann::json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
      continue;  // the half-written last line of a killed run
    const auto step = j["step"].get<std::int64_t>();
    if (step >= 1 && step < before) lines[step] = j;
  }
  for (const auto& [step, j] : lines) {
    const double loss = j.contains("loss") ? number_of(j["loss"]) : NAN;
    std::optional<double> val;
    if (j.contains("val_loss")) val = number_of(j["val_loss"]);
    // An earlier segment's step that would have fired did not stop the job (the rule was not
    // on then, or it is being replayed past a rung): only its state carries over.
    observe(step, loss, val);
    fired_ = false;
  }
}

}  // namespace saturn::exec
