// Element types of device buffers and messages, shared by the backends, the model and the
// communicators. BFloat16 is a storage type (the bits of a bfloat16 value, laid out as CUDA's
// __nv_bfloat16), so that code which only moves or sizes bf16 data needs no CUDA header.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace saturn {

struct BFloat16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(BFloat16) == 2);

// Round to nearest even (NaN stays NaN), as __float2bfloat16 does.
inline BFloat16 to_bfloat16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
    return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40u)};
  const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return BFloat16{static_cast<std::uint16_t>((u + rounding) >> 16)};
}
inline float to_float(BFloat16 x) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(x.bits) << 16);
}

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kBFloat16 };

std::size_t dtype_size(DType type);
const char* dtype_name(DType type);  // "fp32", "fp64", "int32", "int64", "bf16"

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<std::int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<std::int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBFloat16;
}

// p advanced by `elements` elements of `type` (untyped device pointers of a known type).
inline void* advance(void* p, DType type, std::size_t elements) {
  return static_cast<std::byte*>(p) + elements * dtype_size(type);
}
inline const void* advance(const void* p, DType type, std::size_t elements) {
  return static_cast<const std::byte*>(p) + elements * dtype_size(type);
}

}  // namespace saturn
