// AdamW for CudaGptModel: fp32 moments and master weights on the device, the bf16 weight copy
// refreshed in the same kernel; decoupled decay only on the tensors the layout marks, as AdamW
// (adamw.hpp) does on the CPU, and clipping through the gradient scale (clip_scale()).
#pragma once

#include <cstdint>

#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/gpt_cuda.hpp"

namespace saturn {

class CudaAdamW {
 public:
  // Moments from the model's device pool ("optimizer state"), zeroed.
  CudaAdamW(const OptimizerConfig& config, CudaGptModel& model);

  // The global L2 norm of the model's gradients (fp64 accumulation, fixed order).
  double grad_norm();
  // One update of every parameter; grad_scale multiplies the gradients first. step: 1-based.
  void step(double lr, float grad_scale, std::int64_t step);

 private:
  OptimizerConfig config_;
  CudaGptModel* model_;
  Buffer<float> m_, v_;
};

}  // namespace saturn
