#include "runtime/backend/device.hpp"

#include <fmt/format.h>

#include "runtime/backend/cpu/device.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"

namespace saturn {

std::unique_ptr<Device> make_device(DeviceKind kind, int index, std::size_t capacity) {
  if (kind == DeviceKind::kCuda) return cuda_provider().make_device(index, capacity);
  return std::make_unique<cpu::CpuDevice>(fmt::format("cpu:{}", index), capacity);
}

std::size_t device_capacity_for(DeviceKind kind, int index, std::size_t given,
                                const std::string& flag) {
  if (kind == DeviceKind::kCpu) return given;
  CudaDeviceFacts facts;
  std::string why;
  if (!cuda_provider().device_facts(index, &facts, &why))
    throw InputError(fmt::format("--device cuda: no usable CUDA device: {}", why));
  const auto gib = [](std::size_t b) { return static_cast<double>(b) / double(1ull << 30); };
  if (facts.total_memory <= kCudaReservedBytes)
    throw InputError(fmt::format(
        "--device cuda: GPU {} ({}) has {:.2f} GiB, no more than the {:.2f} GiB reserved for the "
        "CUDA context, cuBLASLt and NCCL",
        index, facts.name, gib(facts.total_memory), gib(kCudaReservedBytes)));
  const std::size_t usable = facts.total_memory - kCudaReservedBytes;
  if (given > usable)
    throw InputError(fmt::format(
        "{} {} bytes ({:.2f} GiB) exceeds GPU {} ({}): {} bytes ({:.2f} GiB) usable, its {} bytes "
        "({:.2f} GiB) less {:.2f} GiB reserved for the CUDA context, cuBLASLt and NCCL",
        flag, given, gib(given), index, facts.name, usable, gib(usable), facts.total_memory,
        gib(facts.total_memory), gib(kCudaReservedBytes)));
  return given > 0 ? given : usable;
}

}  // namespace saturn
