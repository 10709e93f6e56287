// The CUDA runtime API as the CPU emulator provides it (test only): the functions the backend's
// host code calls (runtime/backend/cuda/*.cpp and the host halves of the .cu files), defined
// here instead of in libcudart, so that the real host code runs unchanged. A process sees
// SATURN_EMU_DEVICES emulated GPUs (default 8, so that a node's ranks each find their own);
// they share the process's one device arena, which is each process's own. Streams and events
// are ordered trivially (every operation completes before it returns).
//
// Strictness: copies and memsets check that their device side lies inside one live device
// allocation and their host side does not touch device memory (a wrong cudaMemcpyKind is an
// error, as a wrong pointer would be on a GPU), and device memory is only reachable from inside
// these calls and kernels (emu_core.hpp).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/gpu/emu/emu_core.hpp"

namespace {

thread_local cudaError_t g_last = cudaSuccess;
int g_device = 0;

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
    const std::string msg = std::string(what) + ": a pointer is not the memory its cudaMemcpyKind says (device: one live allocation; host: not device memory)";
    return fail(cudaErrorInvalidValue, msg.c_str());
  }
  const auto* d = static_cast<const char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (d < s + bytes && s < d + bytes)
    return fail(cudaErrorInvalidValue,
                (std::string(what) + ": source and destination overlap (undefined on a GPU)").c_str());
  emu::DeviceAccess access;
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

struct Event {
  std::chrono::steady_clock::time_point t;
};

}  // namespace

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
  if (!emu::device_free(p)) return fail(cudaErrorInvalidValue, "cudaFree of a pointer cudaMalloc did not return");
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return copy(dst, src, count, kind, "cudaMemcpy");
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t) {
  return copy(dst, src, count, kind, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t) {
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidPitchValue, "cudaMemcpy2DAsync: width exceeds a pitch");
  for (size_t r = 0; r < height; ++r) {
    const cudaError_t e = copy(static_cast<char*>(dst) + r * dpitch,
                               static_cast<const char*>(src) + r * spitch, width, kind,
                               "cudaMemcpy2DAsync");
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t count) {
  if (count == 0) return cudaSuccess;
  if (!emu::is_device_range(p, count))
    return fail(cudaErrorInvalidValue, "cudaMemset outside one live device allocation");
  emu::DeviceAccess access;
  std::memset(p, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t count, cudaStream_t) {
  return cudaMemset(p, value, count);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) {
  *s = reinterpret_cast<cudaStream_t>(new int(0));
  return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int) {
  return cudaStreamCreate(s);
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  delete reinterpret_cast<int*>(s);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) {
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = reinterpret_cast<cudaEvent_t>(new Event{std::chrono::steady_clock::now()});
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int) {
  return cudaEventCreate(e);
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  reinterpret_cast<Event*>(e)->t = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) {
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<Event*>(b)->t -
                                                 reinterpret_cast<Event*>(a)->t)
            .count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete reinterpret_cast<Event*>(e);
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice: no such emulated device (SATURN_EMU_DEVICES)");
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
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
    default:
      return "cudaErrorUnknown";
  }
}
cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// cuBLASLt: the handle only (the GEMMs themselves are emu_linear.cpp's).
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
  return "emulated cuBLASLt status";
}

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
