// The CUDA provider of a build without the CUDA backend (nvcc not found, or SATURN_CUDA=OFF):
// asking for a CUDA device says so instead of failing later.
#include <fmt/format.h>

#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"

namespace saturn {

namespace {

constexpr const char* kWhy =
    "this saturn was built without the CUDA backend (nvcc was not found when it was configured, "
    "or SATURN_CUDA=OFF); rebuild on a machine with the CUDA toolkit (INSTALL.md)";

int count(std::string* why) {
  if (why != nullptr) *why = kWhy;
  return 0;
}

std::string name(int) {
  return kWhy;
}

std::unique_ptr<Device> device(int, std::size_t) {
  throw InputError(fmt::format("--device cuda: {}", kWhy));
}

std::unique_ptr<Model> model(Device&, const ModelConfig&, const ModelOptions&) {
  throw Error(kWhy);
}

bool facts(int, CudaDeviceFacts*, std::string* why) {
  if (why != nullptr) *why = kWhy;
  return false;
}

void linear(Device&, void*, const void*, const void*, int, int, int) {
  throw Error(kWhy);
}

}  // namespace

void install_cuda_provider() {
  static const CudaProvider provider{"none", &count, &name, &device, &model, nullptr, &facts, &linear};
  set_cuda_provider(provider);
}

}  // namespace saturn
