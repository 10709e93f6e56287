// The CUDA runtime API as the CPU emulator provides it (test only): the functions the backend's
// host code calls (runtime/backend/cuda/*.cpp and the host halves of the .cu files), defined
// here instead of in libcudart, so that the real host code runs unchanged. A process sees
// SATURN_EMU_DEVICES emulated GPUs (default 8, so that a node's ranks each find their own);
// they share the process's one device arena, which is each process's own.
//
// Streams and events (issue 17, emu_stream.hpp/.cpp): kernels, copies, memsets and GEMMs run
// synchronously when called, after completing whatever is queued before them on their stream;
// deferred work (the fake NCCL's operations, emu_nccl.cpp) is queued on a stream and runs only
// when something orders on it: later work on that stream, cudaStreamSynchronize,
// cudaDeviceSynchronize, cudaEventSynchronize / cudaStreamWaitEvent of an event recorded after
// it (an event remembers its stream and position), or progress made by cudaEventQuery, whose
// first query of a pending event always says cudaErrorNotReady. Independent streams complete in
// a shuffled order (SATURN_EMU_SEED). A kernel that reads a NCCL result its stream did not wait
// for therefore reads stale data, as it may on a GPU.
//
// Strictness: copies and memsets check that their device side lies inside one live device
// allocation and their host side does not touch device memory (a wrong cudaMemcpyKind is an
// error, as a wrong pointer would be on a GPU), and device memory is only reachable from inside
// these calls and kernels (emu_core.hpp).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "tests/gpu/emu/emu_core.hpp"
#include "tests/gpu/emu/emu_stream.hpp"
#include "tests/gpu/emu/emu_testing.hpp"

namespace {

thread_local cudaError_t g_last = cudaSuccess;
int g_device = 0;
// What emu::host_waits() reports (emu_testing.hpp); atomics, since the fake NCCL's threads call
// into the runtime too.
struct HostWaitCounters {
  std::atomic<long> stream_syncs{0}, device_syncs{0}, event_syncs{0}, blocking_copies{0};
} g_host_waits;
std::atomic<std::uint64_t> g_memset_async_calls{0};  // emu::memset_async_calls()

int device_count() {
  static const int n = [] {
    const char* v = std::getenv("SATURN_EMU_DEVICES");
    const int c = v != nullptr ? std::atoi(v) : 8;
    return c > 0 ? c : 8;
  }();
  return n;
}

cudaError_t fail(cudaError_t e, const char* what) {
  std::fprintf(stderr, "CUDA emulator: %s\n", what);
  g_last = e;
  return e;
}

// Checks one side of a copy: device memory must be one live allocation, host memory must not
// be device memory.
bool side_ok(const void* p, std::size_t bytes, bool device) {
  if (bytes == 0) return true;
  if (device) return emu::is_device_range(p, bytes);
  return !emu::is_device(p) && !emu::is_device(static_cast<const char*>(p) + bytes - 1);
}

cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                 const char* what) {
  if (bytes == 0) return cudaSuccess;
  bool dst_dev = false, src_dev = false;
  switch (kind) {
    case cudaMemcpyHostToHost:
      break;
    case cudaMemcpyHostToDevice:
      dst_dev = true;
      break;
    case cudaMemcpyDeviceToHost:
      src_dev = true;
      break;
    case cudaMemcpyDeviceToDevice:
      dst_dev = src_dev = true;
      break;
    case cudaMemcpyDefault:
      dst_dev = emu::is_device(dst);
      src_dev = emu::is_device(src);
      break;
  }
  if (!side_ok(dst, bytes, dst_dev) || !side_ok(src, bytes, src_dev)) {
    const std::string msg = std::string(what) +
                            ": a pointer is not the memory its cudaMemcpyKind says (device: one "
                            "live allocation; host: not device memory)";
    return fail(cudaErrorInvalidValue, msg.c_str());
  }
  const auto* d = static_cast<const char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d < s + bytes && s < d + bytes)
    return fail(
        cudaErrorInvalidValue,
        (std::string(what) + ": source and destination overlap (undefined on a GPU)").c_str());
  emu::DeviceAccess access;
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

struct Event {
  std::chrono::steady_clock::time_point t;
  emu::EventPosition position;  // deferred work (emu_stream.hpp)
};

// ---- pinned host memory and late streams (issue 17, offload / allocator) ----------------------
// Pinned host allocations (cudaHostAlloc, cudaHostRegister), so cudaPointerGetAttributes can say
// which host memory a GPU could copy asynchronously (the backend refuses asynchronous copies
// from pageable memory). And streams a test holds back (emu_testing.hpp): every operation still
// completes at once, but an event recorded on a held stream stays pending (cudaEventQuery:
// cudaErrorNotReady) until the stream is released, as if the stream's work were still running.
std::mutex g_host_mutex;
std::map<const char*, std::size_t> g_pinned;  // start -> bytes
std::set<cudaStream_t> g_held_streams;
std::map<cudaEvent_t, cudaStream_t> g_pending_events;  // recorded on a held stream

bool is_pinned(const void* p) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  const auto* c = static_cast<const char*>(p);
  auto it = g_pinned.upper_bound(c);
  return it != g_pinned.begin() && c < std::prev(it)->first + std::prev(it)->second;
}
// An asynchronous copy between the device and pageable host memory is staged by the driver and
// blocks the host (pinned memory is what makes it asynchronous).
void note_async_copy(const void* dst, const void* src, cudaMemcpyKind kind) {
  const bool dst_host =
      kind == cudaMemcpyDeviceToHost || (kind == cudaMemcpyDefault && !emu::is_device(dst));
  const bool src_host =
      kind == cudaMemcpyHostToDevice || (kind == cudaMemcpyDefault && !emu::is_device(src));
  if (dst_host == src_host) return;  // device to device (or host to host: no device involved)
  if (!is_pinned(dst_host ? dst : src)) ++g_host_waits.blocking_copies;
}
void note_event_record(cudaEvent_t e, cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  if (g_held_streams.count(s) != 0)
    g_pending_events[e] = s;
  else
    g_pending_events.erase(e);
}
bool event_pending(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return g_pending_events.count(e) != 0;
}
void forget_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  g_pending_events.erase(e);
}
bool stream_held(cudaStream_t s) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  return g_held_streams.count(s) != 0;
}
// ---- end of pinned host memory and late streams -----------------------------------------------

}  // namespace

emu::HostWaits emu::host_waits() {
  HostWaits w;
  w.stream_syncs = g_host_waits.stream_syncs.load();
  w.device_syncs = g_host_waits.device_syncs.load();
  w.event_syncs = g_host_waits.event_syncs.load();
  w.blocking_copies = g_host_waits.blocking_copies.load();
  return w;
}

void emu::hold_stream(cudaStream_t stream, bool hold) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  if (hold) {
    g_held_streams.insert(stream);
    return;
  }
  g_held_streams.erase(stream);
  for (auto it = g_pending_events.begin(); it != g_pending_events.end();)
    it = it->second == stream ? g_pending_events.erase(it) : std::next(it);
}

std::uint64_t emu::memset_async_calls() {
  return g_memset_async_calls.load();
}

namespace emu {
const char* cublaslt_last_error();  // emu_linear.cpp
}  // namespace emu

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = emu::device_alloc(bytes);
  if (*p == nullptr) {
    g_last = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (!emu::device_free(p))
    return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  ++g_host_waits.blocking_copies;
  emu::order_before(nullptr);
  return copy(dst, src, count, kind, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  note_async_copy(dst, src, kind);
  emu::order_before(stream);
  return copy(dst, src, count, kind, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  note_async_copy(dst, src, kind);
  emu::order_before(stream);
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidPitchValue, "cudaMemcpy2DAsync: width exceeds a pitch");
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e =
        copy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
             width, kind, "cudaMemcpy2DAsync");
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

namespace {
cudaError_t memset_now(void* p, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!emu::is_device_range(p, count))
    return fail(cudaErrorInvalidValue, "cudaMemset outside one live device allocation");
  emu::DeviceAccess access;
  std::memset(p, value, count);
  return cudaSuccess;
}
}  // namespace

cudaError_t cudaMemset(void* p, int value, size_t count) {
  ++g_host_waits.blocking_copies;
  emu::order_before(nullptr);
  return memset_now(p, value, count);
}

// The caching allocator's poisoning of a block as it becomes reusable (allocator.cpp, emulator
// builds only): NaN in fp32 and bf16. Not a CUDA call, so neither emu::host_waits nor
// emu::memset_async_calls counts what the real allocator never does.
void emu_poison_released_block(void* p, size_t count) {
  if (memset_now(p, 0xFF, count) != cudaSuccess) cudaGetLastError();
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t stream) {
  ++g_memset_async_calls;
  emu::order_before(stream);
  return memset_now(p, value, count);
}

// ---- streams and events: deferred work (emu_stream.hpp) ----------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = emu::create_stream(true);
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  *s = emu::create_stream((flags & cudaStreamNonBlocking) == 0);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  emu::destroy_stream(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (stream_held(s))
    return fail(cudaErrorInvalidValue,
                "cudaStreamSynchronize of a stream the test holds back (it would wait forever)");
  ++g_host_waits.stream_syncs;
  emu::synchronize_stream(s);
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int) {
  emu::stream_wait(s, reinterpret_cast<Event*>(e)->position);
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  ++g_host_waits.device_syncs;
  emu::synchronize_all();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new Event{std::chrono::steady_clock::now(), {}});
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  return cudaEventCreate(e);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  auto* event = reinterpret_cast<Event*>(e);
  event->t = std::chrono::steady_clock::now();
  emu::record(event->position, s);
  note_event_record(e, s);
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (event_pending(e))
    return fail(
        cudaErrorInvalidValue,
        "cudaEventSynchronize of an event on a stream the test holds back (it would wait forever)");
  ++g_host_waits.event_syncs;
  emu::wait_event(reinterpret_cast<Event*>(e)->position);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  // Not ready is a state, not an error: it does not set the last error (as on a GPU).
  if (event_pending(e)) return cudaErrorNotReady;
  return emu::query(reinterpret_cast<Event*>(e)->position) ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(b)->t -
                                                 reinterpret_cast<Event*>(a)->t)
            .count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  forget_event(e);
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice,
                "cudaSetDevice: no such emulated device (SATURN_EMU_DEVICES)");
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
// The PCI bus id names the physical GPU (NCCL's one-rank-per-GPU rule): emulated device i of
// any process on a host is "GPU i" of that host.
cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetPCIBusId: no such emulated device");
  std::snprintf(bus_id, static_cast<std::size_t>(len), "0000:%02x:00.0", device);
  return cudaSuccess;
}
cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: no such device");
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "Saturn CUDA emulator");
  p->totalGlobalMem = emu::device_total();
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 1;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->sharedMemPerBlock = 48 << 10;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  *total = emu::device_total();
  *free_bytes = *total - emu::device_in_use();
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = g_last;
  g_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  return g_last;
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory (emulated device)";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorNotReady:
      return "device not ready";
    default:
      return "emulated CUDA error";
  }
}
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    default:
      return "cudaErrorUnknown";
  }
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// cuBLASLt: the handle and status texts (descriptors, heuristic and GEMMs are emu_linear.cpp's,
// which names why it refused a call).
cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = reinterpret_cast<cublasLtHandle_t>(new int(0));
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete reinterpret_cast<int*>(h);
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasLtGetStatusName(cublasStatus_t) {
  return "CUBLAS_STATUS (emulated)";
}
const char* cublasLtGetStatusString(cublasStatus_t) {
  return emu::cublaslt_last_error();
}

// ---- pinned host memory (issue 17, offload) ----------------------------------------------------
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int) {
  constexpr std::size_t kPage = 4096;
  *p = std::aligned_alloc(kPage, (bytes + kPage - 1) / kPage * kPage);
  if (*p == nullptr) {
    g_last = cudaErrorMemoryAllocation;
    return cudaErrorMemoryAllocation;
  }
  std::lock_guard<std::mutex> lock(g_host_mutex);
  g_pinned[static_cast<const char*>(*p)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, 0);
}
cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(g_host_mutex);
    if (g_pinned.erase(static_cast<const char*>(p)) == 0)
      return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int) {
  if (bytes == 0 || emu::is_device(p))
    return fail(cudaErrorInvalidValue, "cudaHostRegister of device memory or 0 bytes");
  std::lock_guard<std::mutex> lock(g_host_mutex);
  if (!g_pinned.emplace(static_cast<const char*>(p), bytes).second)
    return fail(cudaErrorHostMemoryAlreadyRegistered, "cudaHostRegister: already registered");
  return cudaSuccess;
}
cudaError_t cudaHostUnregister(void* p) {
  std::lock_guard<std::mutex> lock(g_host_mutex);
  if (g_pinned.erase(static_cast<const char*>(p)) == 0)
    return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister: not registered");
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  a->device = g_device;
  if (emu::is_device(p)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(p);
  } else if (is_pinned(p)) {
    a->type = cudaMemoryTypeHost;
    a->hostPointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}
// ---- end of pinned host memory -----------------------------------------------------------------

// ---- versions (issue 17, GPU profiling: the hardware fingerprint names the driver and runtime).
// The emulator is its own "driver": it reports the CUDA version of the headers it was built
// against for both, as a driver at least that new would.
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

}  // extern "C"
