// Controls the CUDA emulator offers tests beyond the CUDA API (test only, emu_runtime.cpp).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace emu {

// Holds `stream` back (hold) or lets it go: operations on a held stream still complete at once
// (the emulator is synchronous), but events recorded on it stay pending (cudaEventQuery returns
// cudaErrorNotReady) until it is let go, as if its work were still running on a GPU. Waiting on
// the host for such an event or stream (cudaEventSynchronize, cudaStreamSynchronize) is an error,
// since it could never return.
void hold_stream(cudaStream_t stream, bool hold);

// cudaMemsetAsync calls so far in this process: the memsets the backend enqueues (tests count
// those of a model pass; the allocator's poisoning of released blocks, emulator-only, uses
// cudaMemset and is not counted).
std::uint64_t memset_async_calls();

}  // namespace emu
