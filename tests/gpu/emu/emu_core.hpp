// The CUDA emulator's machinery (test only), shared by the kernel language (emu_cuda.hpp), the
// emulated runtime API (emu_runtime.cpp) and the emulated GEMMs (emu_linear.cpp).
//
// Device memory is an arena the host cannot touch: one mmap'd region, inaccessible (PROT_NONE)
// except while an emulated device operation runs (a kernel, a copy, a memset, a GEMM). A host
// dereference of device memory anywhere else faults, and the fault handler names it
// ("host code touched emulated device memory ...") before aborting.
//
// Kernels run block by block in a shuffled order (seeded: SATURN_EMU_SEED); a block's threads
// are fibers on one OS thread, switched at __syncthreads() and at warp shuffles, in an order
// shuffled at every barrier phase, so code that relies on one block or thread running before
// another, or on a barrier it does not have, gives wrong results here as it would on a GPU.
// A barrier some threads never reach (divergent __syncthreads, shuffles with exited lanes) is
// reported as the deadlock it is on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace emu {

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// ---- device memory ---------------------------------------------------------------------------
// nullptr when the arena is exhausted (cudaMalloc then reports cudaErrorMemoryAllocation).
void* device_alloc(std::size_t bytes);
// false when p is not the start of a live allocation.
bool device_free(void* p);
bool is_device(const void* p);
// [p, p + bytes) lies inside one live allocation.
bool is_device_range(const void* p, std::size_t bytes);
std::size_t device_total();
std::size_t device_in_use();

// While alive, device memory is accessible to this process (nests).
class DeviceAccess {
 public:
  DeviceAccess();
  ~DeviceAccess();
  DeviceAccess(const DeviceAccess&) = delete;
  DeviceAccess& operator=(const DeviceAccess&) = delete;
};

// ---- kernels ---------------------------------------------------------------------------------
// Runs body() as the kernel for every block of `grid`, `block` threads each (1-D blocks of a
// multiple of 32 threads), with `smem_bytes` of dynamic shared memory (filled with garbage).
void launch(Dim3 grid, Dim3 block, std::size_t smem_bytes, const std::function<void()>& body);

// Inside a kernel (the kernel language's threadIdx, blockIdx, blockDim and gridDim are set by
// launch() for the thread it runs).
void syncthreads();
// The value `v` of lane src_lane of this thread's warp (every lane of the warp must call).
double shuffle(double v, int src_lane);
// A general warp rendezvous for warp-collective operations (__syncwarp, WMMA): every lane of the
// calling thread's warp must call it, with the same `what` (the operation's name) and `bytes`; a
// lane that exits or waits elsewhere is a deadlock, lanes at different operations are reported
// (warp_violation). Each lane deposits `bytes` (at most kMaxRendezvousBytes) from `data`; the
// result is the 32 lanes' deposits, lane-major, valid until this lane's next warp rendezvous.
constexpr std::size_t kMaxRendezvousBytes = 256;
const void* warp_rendezvous(const char* what, const void* data, std::size_t bytes);
// Reports a misused warp-collective operation in the running kernel (which block, warp, lane)
// and aborts, as the emulator does for a deadlock: a kernel thread cannot unwind to the launch.
[[noreturn]] void warp_violation(const char* what, const char* detail);
void* dynamic_smem();

}  // namespace emu
