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
  // Moments for the elements [begin, end) of the flat layout (the whole model, or a shard), in
  // `device`'s memory (zeroed); padding between groups is never updated.
  AdamW(const OptimizerConfig& config, const ParameterLayout& layout, std::size_t begin,
        std::size_t end, Device& device);

  // One update of master[begin,end) from grads[begin,end); both point at element `begin`, as
  // does `weights`, the kernels' copy refreshed in the same pass (null or == master: none).
  // grad_scale multiplies the gradients (clipping). step is 1-based.
  void step(float* master, void* weights, const float* grads, double lr, float grad_scale,
            std::int64_t step);

  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  std::size_t begin() const { return begin_; }
  std::size_t end() const { return end_; }

 private:
  struct Segment {
    std::size_t begin, end;  // relative to begin_
    bool decay;
  };
  OptimizerConfig config_;
  Device* device_;
  std::size_t begin_, end_;
  std::vector<Segment> segments_;
  Buffer<float> m_, v_;
};

}  // namespace saturn
