// AdamW over a flat parameter buffer (or a shard of one), with decoupled weight decay only on
// the tensors the layout marks for decay, global-norm clipping and the learning-rate schedule.
// The moments live on a device and the update is that device's kernel (Device::adamw_update),
// so one optimizer serves every backend, and an element range serves FSDP's shards.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn {

// Learning rate at optimizer step `step` (0-based): linear warmup to lr over `warmup` steps
// (lr·(step+1)/warmup), then cosine / linear decay to lr·min_lr_ratio at `total_steps`, or
// constant. hf_cosine / hf_linear are transformers' get_cosine_schedule_with_warmup /
// get_linear_schedule_with_warmup exactly: lr·step/warmup from 0, then decay to 0.
double scheduled_lr(const OptimizerConfig& opt, const ScheduleConfig& sched, std::int64_t step,
                    std::int64_t total_steps);

// Clip coefficient for a global gradient norm (PyTorch's clip_grad_norm_ rule).
float clip_scale(double grad_norm, double max_norm);

class AdamW {
 public:
  // Moments for the elements [begin, end) of the gradient layout (ParameterLayout::grad_total:
  // the parameter layout itself unless a LoRA job freezes its base), the whole model or a shard,
  // in `device`'s memory (zeroed); padding between groups and frozen tensors are never updated.
  // The parameters these gradients belong to are addressed from `weight_origin`, the parameter
  // layout's element that step()'s master points at (default: begin, the same element, as for
  // every layout without frozen tensors).
  static constexpr std::size_t kSameOrigin = static_cast<std::size_t>(-1);
  AdamW(const OptimizerConfig& config, const ParameterLayout& layout, std::size_t begin,
        std::size_t end, Device& device, std::size_t weight_origin = kSameOrigin);

  // One update of the parameters from grads[begin, end) (grads points at element `begin`,
  // master and `weights` at element weight_origin of the parameter layout); `weights` is the
  // kernels' copy refreshed in the same pass (null or == master: none). grad_scale multiplies
  // the gradients (clipping). step is 1-based.
  void step(float* master, void* weights, const float* grads, double lr, float grad_scale,
            std::int64_t step);

  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }

 private:
  struct Segment {
    std::size_t grad;    // into grads, m and v (relative to begin_)
    std::size_t weight;  // into master and weights (relative to the weight origin)
    std::size_t count;
    bool decay;
  };
  OptimizerConfig config_;
  Device* device_;
  std::size_t begin_, end_;
  std::vector<Segment> segments_;
  Buffer<float> m_, v_;
};

}  // namespace saturn
