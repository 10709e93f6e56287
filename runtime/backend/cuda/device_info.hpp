// CUDA device discovery. Compiled only when nvcc is found (SATURN_HAVE_CUDA); works without a
// GPU or driver, reporting why none is usable.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace saturn::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::size_t total_memory = 0;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
};

struct DeviceQuery {
  std::vector<DeviceInfo> devices;
  std::string error;  // why no device is usable (no driver, no device), empty when fine
};

DeviceQuery query_devices();
// The CUDA runtime version this binary was built against, e.g. "13.0".
std::string runtime_version();
// cudaDriverGetVersion and cudaRuntimeGetVersion (e.g. 12040); 0, with the reason in `why`,
// when they fail.
int driver_version_number(std::string* why);
int runtime_version_number(std::string* why);

}  // namespace saturn::cuda
