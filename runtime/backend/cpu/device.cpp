#include "runtime/backend/cpu/device.hpp"

#include <cstring>

#include "runtime/core/error.hpp"

namespace saturn::cpu {

CpuDevice::CpuDevice(std::string name, std::size_t capacity)
    : owned_(std::make_unique<MemoryPool>(std::move(name), capacity)), pool_(owned_.get()) {}

CpuDevice::CpuDevice(MemoryPool& pool) : pool_(&pool) {
  if (!pool.host_accessible())
    throw Error("CpuDevice over '" + pool.name() + "', which is not host memory");
}

const BackendTraits& CpuDevice::traits() const {
  return backend_traits(DeviceKind::kCpu);
}

void CpuDevice::upload(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}
void CpuDevice::download(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}
Device::CopyTicket CpuDevice::upload_async(void* dst, const void* src, std::size_t bytes) {
  upload(dst, src, bytes);
  return 0;
}
Device::CopyTicket CpuDevice::download_async(void* dst, const void* src, std::size_t bytes) {
  download(dst, src, bytes);
  return 0;
}
void CpuDevice::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}
void CpuDevice::zero(void* dst, std::size_t bytes) {
  if (bytes > 0) std::memset(dst, 0, bytes);
}

double CpuDevice::sum_of_squares(const float* x, std::size_t n) {
  return cpu::sum_of_squares(x, n);
}

void CpuDevice::add_exact_squares(ExactSquareSum& into, const float* x, std::size_t n) {
  into.add(x, n);
}

void CpuDevice::add(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void CpuDevice::to_weights(void* weights, const float* master, std::size_t n) {
  // The CPU's kernels read fp32 master weights directly; a separate copy only exists when a
  // caller keeps one (then it is fp32 too).
  if (weights != master) std::memcpy(weights, master, n * sizeof(float));
}

void CpuDevice::adamw_update(float* master, void* weights, const float* grad, float* m, float* v,
                             std::size_t n, const AdamWStep& s, float grad_scale) {
  cpu::adamw_update(master, grad, m, v, n, s, grad_scale);
  if (weights != nullptr && weights != master) std::memcpy(weights, master, n * sizeof(float));
}

void CpuDevice::accumulate(double* acc, float* g, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) acc[i] += static_cast<double>(g[i]);
  std::memset(g, 0, n * sizeof(float));
}

void CpuDevice::round_into(float* out, double* acc, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(acc[i]);
  std::memset(acc, 0, n * sizeof(double));
}

void CpuDevice::widen(double* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = static_cast<double>(src[i]);
}

void CpuDevice::add(double* dst, const double* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void CpuDevice::add_scaled(double* acc, const float* x, double weight) {
  *acc += static_cast<double>(*x) * weight;
}

}  // namespace saturn::cpu
