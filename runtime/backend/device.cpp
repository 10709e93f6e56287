#include "runtime/backend/device.hpp"

#include <fmt/format.h>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cuda_provider.hpp"

namespace saturn {

std::unique_ptr<Device> make_device(DeviceKind kind, int index, std::size_t capacity) {
  if (kind == DeviceKind::kCuda) return cuda_provider().make_device(index, capacity);
  return std::make_unique<cpu::CpuDevice>(fmt::format("cpu:{}", index), capacity);
}

}  // namespace saturn
