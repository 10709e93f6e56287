#include "runtime/optim/adamw_cuda.hpp"

#include <cmath>

#include "runtime/backend/cuda/check.hpp"

namespace saturn {

CudaAdamW::CudaAdamW(const OptimizerConfig& config, CudaGptModel& model)
    : config_(config),
      model_(&model),
      m_(model.context().pool(), model.padded_total(), "optimizer state"),
      v_(model.context().pool(), model.padded_total(), "optimizer state") {
  cudaStream_t s = model.context().stream();
  SATURN_CUDA_CHECK(cudaMemsetAsync(m_.data(), 0, m_.bytes(), s));
  SATURN_CUDA_CHECK(cudaMemsetAsync(v_.data(), 0, v_.bytes(), s));
}

double CudaAdamW::grad_norm() {
  // Padding between tensors holds zeros, so the padded buffer's norm is the layout's.
  return std::sqrt(
      cuda::sum_of_squares(model_->context(), model_->grads(), model_->padded_total()));
}

void CudaAdamW::step(double lr, float grad_scale, std::int64_t step) {
  const auto& ts = model_->layout().tensors();
  for (std::size_t k = 0; k < ts.size(); ++k) {
    const std::size_t off = model_->device_offset(k);
    cuda::AdamWParams p{};
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(config_.beta1);
    p.beta2 = static_cast<float>(config_.beta2);
    p.eps = static_cast<float>(config_.eps);
    p.weight_decay = ts[k].decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    p.step = static_cast<int>(step);
    cuda::adamw_update(model_->context(), model_->master() + off, model_->weights() + off,
                       model_->grads() + off, m_.data() + off, v_.data() + off, ts[k].numel, p,
                       grad_scale);
  }
}

}  // namespace saturn
