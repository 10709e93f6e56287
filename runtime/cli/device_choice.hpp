// `--device auto|cpu|cuda` of train, profile and run: which backend the ranks of one command
// train on. auto (the default) is CUDA when every rank of the command has a usable GPU, else
// the CPU; the ranks agree, so they never train on different backends.
#pragma once

#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"

namespace saturn::cli {

// What --device accepts, for CLI11's IsMember (inline: sbatch's command line needs no more).
inline const std::vector<std::string>& device_option_values() {
  static const std::vector<std::string> values{"auto", "cpu", "cuda"};
  return values;
}
inline constexpr const char* kDeviceOptionHelp =
    "auto (default): cuda when every rank has a usable GPU, else cpu (logged per rank); cpu; or "
    "cuda (exit 2 with the reason when a rank has no usable GPU)";

// Collective over `world` when `requested` is auto (the ranks agree on the lowest rank without
// a usable GPU); local otherwise. Every rank logs an auto decision and why. cuda on a rank
// without a usable GPU throws InputError naming the provider's reason: callers run this inside
// comm::agree_on so that every rank stops alike. `requested` is one of device_option_values().
DeviceKind resolve_device(const std::string& requested, comm::Communicator& world);

}  // namespace saturn::cli
