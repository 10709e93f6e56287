// The strategies Saturn has, one line each: a strategy's own files say what it is (its
// StrategyInfo: name, help, degrees, knob variants, factory) and how much it costs
// (Strategy::estimate); this list only says that it exists. Offered strategies come first, in
// the order the planner tries them; adding a strategy is its files plus one line here.
#include <fmt/format.h>

#include "runtime/core/error.hpp"
#include "runtime/parallel/ddp.hpp"
#include "runtime/parallel/fsdp.hpp"
#include "runtime/parallel/hybrid.hpp"
#include "runtime/parallel/offload.hpp"
#include "runtime/parallel/pipeline.hpp"
#include "runtime/parallel/tensor.hpp"
#include "runtime/parallel/zero2.hpp"

namespace saturn::parallel {

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> registry = {
      ddp_strategy(),            // ddp.hpp
      fsdp_strategy(),           // fsdp.hpp
      pipeline_strategy(),       // pipeline.hpp
      tensor_strategy(),         // tensor.hpp
      offload_strategy(),        // offload.hpp
      ddp_pipeline_strategy(),   // hybrid.hpp
      ddp_tensor_strategy(),     // hybrid.hpp
      zero2_strategy(),          // zero2.hpp
      single_device_strategy(),  // ddp.hpp; not offered: the planner's degree-1 ddp stands for it
  };
  return registry;
}

const StrategyInfo& strategy_info(const std::string& name) {
  for (const auto& s : strategy_registry())
    if (s.name == name) return s;
  std::string valid;
  for (const auto& s : strategy_registry()) valid += (valid.empty() ? "" : ", ") + s.name;
  throw InputError(fmt::format("unknown strategy '{}' (valid: {})", name, valid));
}

const std::string& one_device_strategy() {
  static const std::string name = [] {
    for (const auto& s : strategy_registry())
      if (!s.offered && s.max_degree == 1) return s.name;
    throw Error("internal: the strategy registry has no one-device strategy");
  }();
  return name;
}

const std::vector<std::string>& strategy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (const auto& s : strategy_registry())
      if (s.offered) n.push_back(s.name);
    return n;
  }();
  return names;
}

std::unique_ptr<Strategy> make_strategy(const std::string& name, const StrategySpec& spec) {
  return strategy_info(name).make(spec);
}

}  // namespace saturn::parallel
