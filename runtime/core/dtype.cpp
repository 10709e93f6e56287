#include "runtime/core/dtype.hpp"

namespace saturn {

std::size_t dtype_size(DType type) {
  switch (type) {
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
  }
  return 0;
}

const char* dtype_name(DType type) {
  switch (type) {
    case DType::kFloat32:
      return "fp32";
    case DType::kFloat64:
      return "fp64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBFloat16:
      return "bf16";
  }
  return "?";
}

}  // namespace saturn
