#include "runtime/cli/device_choice.hpp"

#include <fmt/format.h>

#include <exception>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"
#include "runtime/core/log.hpp"

namespace saturn::cli {

DeviceKind resolve_device(const std::string& requested, comm::Communicator& world) {
  if (requested == "cpu") return DeviceKind::kCpu;
  const CudaProvider& cuda = cuda_provider();
  std::string why;
  int count = 0;
  try {
    count = cuda.device_count(&why);
  } catch (const std::exception& e) {
    // Under auto every rank must reach the agreement below: a failing query means no GPU.
    why = e.what();
  }
  if (requested == "cuda") {
    if (count > 0) return DeviceKind::kCuda;
    throw InputError(fmt::format("--device cuda: no usable CUDA device in this process ({}): {}",
                                 cuda.name, why));
  }
  if (requested != "auto")
    throw InputError(fmt::format("--device {}: expected auto, cpu or cuda", requested));
  // The lowest rank without a GPU, or size() when every rank has one.
  int first_without = count > 0 ? world.size() : world.rank();
  world.allreduce(&first_without, 1, comm::ReduceOp::kMin);
  if (first_without == world.size()) {
    log::info(
        "device auto -> cuda: every rank has a usable GPU; this process sees {} ({}), GPU 0: {}",
        count, cuda.name, cuda.device_name(0));
    return DeviceKind::kCuda;
  }
  if (count == 0)
    log::info("device auto -> cpu (no CUDA device: {})", why);
  else
    log::info(
        "device auto -> cpu: rank {} has no usable CUDA device (its log says why); this "
        "process sees {}",
        first_without, count);
  return DeviceKind::kCpu;
}

}  // namespace saturn::cli
