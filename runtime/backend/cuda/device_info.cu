#include <cuda_runtime.h>

#include "runtime/backend/cuda/device_info.hpp"

namespace saturn::cuda {

DeviceQuery query_devices() {
  DeviceQuery q;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    q.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(err);
    return q;
  }
  if (count == 0) {
    q.error = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    return q;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
      q.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      continue;
    }
    q.devices.push_back({i, p.name, p.totalGlobalMem, p.major, p.minor, p.multiProcessorCount});
  }
  return q;
}

std::string runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
}

int driver_version_number(std::string* why) {
  int v = 0;
  const cudaError_t err = cudaDriverGetVersion(&v);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaDriverGetVersion: ") + cudaGetErrorString(err);
    return 0;
  }
  if (v == 0 && why != nullptr) *why = "no CUDA driver is installed (cudaDriverGetVersion: 0)";
  return v;
}

int runtime_version_number(std::string* why) {
  int v = 0;
  const cudaError_t err = cudaRuntimeGetVersion(&v);
  if (err != cudaSuccess) {
    if (why != nullptr) *why = std::string("cudaRuntimeGetVersion: ") + cudaGetErrorString(err);
    return 0;
  }
  return v;
}

}  // namespace saturn::cuda
