// The CUDA backend as the rest of the runtime reaches it, without CUDA headers. Exactly one
// library of an executable defines these: the CUDA backend (runtime/backend/cuda), its build on
// the CPU emulator (tests/gpu/emu, for saturn_emu), or, in a build without CUDA, a provider
// whose every call explains that (runtime/backend/no_cuda.cpp). Libraries never link one;
// executables do (CMake: saturn_cuda_provider).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/backend/device.hpp"

namespace saturn {

class Model;
struct ModelConfig;
struct ModelOptions;

// GPU `index` as a Device with `capacity` bytes of memory (0: what the GPU has). Error naming
// why when none is usable.
std::unique_ptr<Device> make_cuda_device(int index, std::size_t capacity);
// The model program on a device make_cuda_device returned.
std::unique_ptr<Model> make_cuda_model(Device& device, const ModelConfig& config,
                                       const ModelOptions& options);
// How many CUDA devices this process can use, and why none when 0 (`why` set).
int cuda_device_count(std::string* why);
// "cuda" for the real backend, "cuda (emulated on the CPU)" for saturn_emu, "none".
const char* cuda_backend_name();

}  // namespace saturn
