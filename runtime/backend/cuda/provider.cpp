// The CUDA provider (backend/cuda_provider.hpp) of a build with the CUDA backend: real GPUs, or,
// compiled into saturn_emu's backend, the CPU emulator's (tests/gpu/emu), which names itself.
#include <fmt/format.h>

#ifdef SATURN_HAVE_NCCL
#include "runtime/comm/nccl_communicator.hpp"
#endif

#include "runtime/backend/cuda/backend.hpp"
#include "runtime/backend/cuda/check.hpp"
#include "runtime/backend/cuda/device.hpp"
#include "runtime/backend/cuda/device_info.hpp"
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/core/error.hpp"
#include "runtime/model/transformer.hpp"

namespace saturn {

template class Transformer<cuda::Backend>;

namespace {

int device_count(std::string* why) {
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty() && why != nullptr) *why = q.error;
  return static_cast<int>(q.devices.size());
}

std::string device_name(int index) {
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty()) return "no CUDA device: " + q.error;
  return q.devices[static_cast<std::size_t>(index) % q.devices.size()].name;
}

std::unique_ptr<Device> make_cuda_device(int index, std::size_t capacity) {
  std::string why;
  const int count = device_count(&why);
  if (count == 0) throw InputError(fmt::format("--device cuda: no usable CUDA device: {}", why));
  // A rank's own GPU: ranks of a node take the node's GPUs in turn (the launcher binds them;
  // with more ranks than GPUs, ranks share one).
  return std::make_unique<cuda::CudaDevice>(index % count, capacity);
}

std::unique_ptr<Model> make_cuda_model(Device& device, const ModelConfig& config,
                                       const ModelOptions& options) {
  auto* cuda_device = dynamic_cast<cuda::CudaDevice*>(&device);
  if (cuda_device == nullptr)
    throw Error(fmt::format("make_cuda_model: {} is not a CUDA device", device.describe()));
  return std::make_unique<Transformer<cuda::Backend>>(config, options, cuda_device->context(),
                                                      device.memory());
}

cuda::CudaDevice& as_cuda_device(Device& device, const char* what) {
  auto* cuda_device = dynamic_cast<cuda::CudaDevice*>(&device);
  if (cuda_device == nullptr)
    throw Error(fmt::format("{}: {} is not a CUDA device", what, device.describe()));
  return *cuda_device;
}

#ifdef SATURN_HAVE_NCCL
std::string gpu_id(Device& device) {
  const int index = as_cuda_device(device, "gpu_id").index();
  char bus[32] = {};
  SATURN_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, index));
  return bus;
}

std::unique_ptr<comm::Communicator> make_nccl_communicator(
    std::unique_ptr<comm::Communicator> bootstrap, Device& device) {
  auto& cuda_device = as_cuda_device(device, "make_nccl_communicator");
  auto nccl = std::make_unique<comm::NcclCommunicator>(std::move(bootstrap), cuda_device.index(),
                                                       cuda_device.context().stream());
  // A buffer released before its request is waited stays out of reuse until NCCL is done.
  cuda::CachingDeviceAllocator& allocator = cuda_device.allocator();
  nccl->set_stream_use_recorder(
      [&allocator](const void* p, cudaStream_t s) { allocator.record_stream(p, s); });
  return nccl;
}

const CudaNccl kNccl{&gpu_id, &make_nccl_communicator};
constexpr const CudaNccl* kNcclOrNull = &kNccl;
#else
constexpr const CudaNccl* kNcclOrNull = nullptr;
#endif

bool device_facts(int index, CudaDeviceFacts* facts, std::string* why) {
  const cuda::DeviceQuery q = cuda::query_devices();
  if (q.devices.empty()) {
    if (why != nullptr) *why = "no CUDA device: " + q.error;
    return false;
  }
  const cuda::DeviceInfo& d = q.devices[static_cast<std::size_t>(index) % q.devices.size()];
  std::string reason;
  CudaDeviceFacts f;
  f.name = d.name;
  f.total_memory = d.total_memory;
  f.count = static_cast<int>(q.devices.size());
  f.driver_version = cuda::driver_version_number(&reason);
  f.runtime_version = cuda::runtime_version_number(&reason);
  if (f.driver_version == 0 || f.runtime_version == 0) {
    if (why != nullptr) *why = reason;
    return false;
  }
  *facts = f;
  return true;
}

void linear_forward(Device& device, void* out, const void* in, const void* weight, int n,
                    int in_features, int out_features) {
  auto* cuda_device = dynamic_cast<cuda::CudaDevice*>(&device);
  if (cuda_device == nullptr)
    throw Error(fmt::format("cuda linear_forward: {} is not a CUDA device", device.describe()));
  cuda::linear_forward(cuda_device->context(), static_cast<cuda::bf16*>(out),
                       static_cast<const cuda::bf16*>(in), static_cast<const cuda::bf16*>(weight),
                       nullptr, n, in_features, out_features, cuda::WeightLayout::kInOut);
}

}  // namespace

void install_cuda_provider() {
#ifdef SATURN_CUDA_EMULATION
  static const CudaProvider provider{"cuda (emulated on the CPU)",
                                     &device_count,
                                     &device_name,
                                     &make_cuda_device,
                                     &make_cuda_model,
                                     kNcclOrNull,
                                     &device_facts,
                                     &linear_forward};
#else
  static const CudaProvider provider{
      "cuda",           &device_count, &device_name,  &make_cuda_device,
      &make_cuda_model, kNcclOrNull,   &device_facts, &linear_forward};
#endif
  set_cuda_provider(provider);
}

}  // namespace saturn
