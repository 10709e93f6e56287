#include "runtime/parallel/strategy.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

const char* state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kParams:
      return "params";
    case StateKind::kAdamM:
      return "m";
    case StateKind::kAdamV:
      return "v";
    case StateKind::kFrozen:
      return "frozen";
  }
  return "?";
}

StrategyStats Strategy::stats() const {
  StrategyStats s = stats_;
  s.comm = comm::CommStats{};
  // A communicator may be registered twice (e.g. a one-rank split equal in role to another):
  // count each object once.
  std::vector<const comm::Communicator*> seen;
  for (const auto* c : comms_) {
    if (c == nullptr || std::find(seen.begin(), seen.end(), c) != seen.end()) continue;
    seen.push_back(c);
    s.comm += c->stats();
  }
  return s;
}

void Strategy::check_setup(comm::CommPair& comms, Device& device) const {
  if (comms.size() != spec_.degree)
    throw InputError(fmt::format("{} at degree {} needs {} ranks; the communicator has {}", name(),
                                 spec_.degree, spec_.degree, comms.size()));
  if (device.kind() != spec_.backend)
    throw InputError(fmt::format("{} was planned for the {} backend but runs on {}", name(),
                                 device_kind_name(spec_.backend), device.describe()));
}

void Strategy::reset_stats() {
  stats_ = StrategyStats{};
  for (auto* c : comms_)
    if (c) c->reset_stats();
}

namespace {

bool parse_bool(const std::string& item, const std::string& v) {
  if (v == "true" || v == "1" || v == "on" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "off" || v == "no") return false;
  throw InputError(fmt::format("--knob {}: expected true or false", item));
}

long long parse_int(const std::string& item, const std::string& v, long long min) {
  std::size_t used = 0;
  long long x = 0;
  try {
    x = std::stoll(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || v.empty())
    throw InputError(fmt::format("--knob {}: expected an integer", item));
  if (x < min) throw InputError(fmt::format("--knob {}: must be >= {}", item, min));
  return x;
}

}  // namespace

Knobs parse_knobs(const std::vector<std::string>& items) {
  Knobs k;
  for (const auto& item : items) {
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw InputError(fmt::format("--knob {}: expected KEY=VALUE", item));
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    if (key == "micro_batch_size") {
      k.micro_batch_size = parse_int(item, v, 1);
    } else if (key == "micro_batches") {
      k.micro_batches = static_cast<int>(parse_int(item, v, 1));
    } else if (key == "schedule") {
      if (v == "gpipe")
        k.schedule = PipelineSchedule::kGpipe;
      else if (v == "1f1b")
        k.schedule = PipelineSchedule::k1F1B;
      else
        throw InputError(fmt::format("--knob {}: schedule is gpipe or 1f1b", item));
    } else if (key == "stages") {
      k.stages = static_cast<int>(parse_int(item, v, 1));
    } else if (key == "tensor_degree") {
      k.tensor_degree = static_cast<int>(parse_int(item, v, 1));
    } else if (key == "recompute") {
      k.recompute = parse_bool(item, v);
    } else if (key == "bucket_bytes") {
      k.bucket_bytes = parse_bytes(v, "--knob " + item);
    } else if (key == "overlap") {
      k.overlap = parse_bool(item, v);
    } else if (key == "prefetch") {
      k.prefetch = parse_bool(item, v);
    } else if (key == "balance") {
      k.balance = parse_bool(item, v);
    } else if (key == "device_capacity") {
      k.device_capacity = parse_bytes(v, "--knob " + item);
    } else if (key == "host_capacity") {
      k.host_capacity = parse_bytes(v, "--knob " + item);
    } else {
      throw InputError(fmt::format(
          "--knob {}: unknown knob '{}' (valid: micro_batch_size, micro_batches, schedule, "
          "stages, tensor_degree, recompute, bucket_bytes, overlap, prefetch, balance, "
          "device_capacity, host_capacity)",
          item, key));
    }
  }
  return k;
}

}  // namespace saturn::parallel
