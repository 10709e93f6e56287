// The CUDA backend as the rest of the runtime reaches it, without CUDA headers or a link-time
// dependency: one library of each executable provides it — the CUDA backend
// (runtime/backend/cuda), its build on the CPU emulator (tests/gpu/emu, for saturn_emu), or, in
// a build without CUDA, one whose every call explains that (runtime/backend/no_cuda.cpp) — and
// the executable's main() installs it first (install_cuda_provider). Libraries never link one,
// so the same libraries serve saturn and saturn_emu.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/backend/device.hpp"

namespace saturn {

class Model;
struct ModelConfig;
struct ModelOptions;
namespace comm {
class Communicator;
}

// NCCL as a job's data communicator (runtime/comm/nccl_communicator.hpp), in builds that have
// it: the real library, or the CUDA emulator's fake (tests/gpu/emu/emu_nccl.cpp).
struct CudaNccl {
  // The physical GPU behind `device` (a Device make_device returned), unique on its host: its
  // PCI bus id. NCCL refuses two ranks of one communicator on one GPU.
  std::string (*gpu_id)(Device& device) = nullptr;
  // A NCCL communicator over the ranks of `bootstrap` (collective over it; the communicator
  // owns it and splits it in split()), ordered after `device`'s compute stream.
  std::unique_ptr<comm::Communicator> (*make_communicator)(
      std::unique_ptr<comm::Communicator> bootstrap, Device& device) = nullptr;
};

// What the hardware fingerprint and the device-capacity rule need to know of one GPU.
struct CudaDeviceFacts {
  std::string name;              // the GPU model, e.g. "NVIDIA H200"
  std::size_t total_memory = 0;  // bytes
  int count = 0;                 // GPUs this process sees
  int driver_version = 0;        // cudaDriverGetVersion: the newest CUDA the driver supports
  int runtime_version = 0;       // cudaRuntimeGetVersion: the CUDA runtime in use
};
// "12.4" from CUDA's 12040.
std::string cuda_version_text(int version);

struct CudaProvider {
  // "cuda", "cuda (emulated on the CPU)" or "none".
  const char* name = "none";
  // How many CUDA devices this process can use; `why` says why when 0.
  int (*device_count)(std::string* why) = nullptr;
  // The model name of GPU `index` (for fingerprints and logs), without touching the device;
  // the reason when it cannot be read. Never throws.
  std::string (*device_name)(int index) = nullptr;
  // GPU `index` (modulo the count) as a Device with `capacity` bytes (0: what it has free);
  // InputError naming why none is usable.
  std::unique_ptr<Device> (*make_device)(int index, std::size_t capacity) = nullptr;
  // The model program on a device make_device returned.
  std::unique_ptr<Model> (*make_model)(Device& device, const ModelConfig& config,
                                       const ModelOptions& options) = nullptr;
  // NCCL, when this build has it; nullptr otherwise (jobs then stage through MPI).
  const CudaNccl* nccl = nullptr;
  // ---- profiling a GPU (issue 17)
  // The facts of GPU `index` (modulo the count), without creating a device; false, with the
  // reason in `why`, when they cannot be read. Never throws.
  bool (*device_facts)(int index, CudaDeviceFacts* facts, std::string* why) = nullptr;
  // One bf16 GEMM out[n, out_features] = in[n, in_features] · weight[in_features, out_features]
  // through the backend's own linear op (cuBLASLt; the emulator's emu_linear), enqueued on the
  // compute stream of `device` (one make_device returned); pointers are its device memory.
  // Calibration times it at the shapes the cost model asks for.
  void (*linear_forward)(Device& device, void* out, const void* in, const void* weight, int n,
                         int in_features, int out_features) = nullptr;
};

// Defined by the provider library the executable links; main() calls it before anything else.
void install_cuda_provider();
// What install_cuda_provider() set; a provider that explains its absence before that.
const CudaProvider& cuda_provider();
void set_cuda_provider(const CudaProvider& provider);

}  // namespace saturn
