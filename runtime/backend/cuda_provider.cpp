// The process's CUDA provider (cuda_provider.hpp). In saturn_core, below every library and
// provider, so that a provider links whatever backend it is built with (or none).
#include "runtime/backend/cuda_provider.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace saturn {

namespace {

constexpr const char* kNotInstalled =
    "no CUDA provider is installed in this program (its main() must call "
    "install_cuda_provider(); a build error)";

int not_installed_count(std::string* why) {
  if (why != nullptr) *why = kNotInstalled;
  return 0;
}
std::string not_installed_name(int) {
  return kNotInstalled;
}
std::unique_ptr<Device> not_installed_device(int, std::size_t) {
  throw Error(kNotInstalled);
}
std::unique_ptr<Model> not_installed_model(Device&, const ModelConfig&, const ModelOptions&) {
  throw Error(kNotInstalled);
}

bool not_installed_facts(int, CudaDeviceFacts*, std::string* why) {
  if (why != nullptr) *why = kNotInstalled;
  return false;
}
void not_installed_linear(Device&, void*, const void*, const void*, int, int, int) {
  throw Error(kNotInstalled);
}

const CudaProvider kNone{"none",
                         &not_installed_count,
                         &not_installed_name,
                         &not_installed_device,
                         &not_installed_model,
                         nullptr,
                         &not_installed_facts,
                         &not_installed_linear};
const CudaProvider* g_provider = &kNone;

}  // namespace

std::string cuda_version_text(int version) {
  return fmt::format("{}.{}", version / 1000, version % 1000 / 10);
}

const CudaProvider& cuda_provider() {
  return *g_provider;
}

void set_cuda_provider(const CudaProvider& provider) {
  g_provider = &provider;
}

}  // namespace saturn
