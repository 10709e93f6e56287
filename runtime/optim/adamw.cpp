#include "runtime/optim/adamw.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace saturn {

namespace {

// transformers' get_cosine_schedule_with_warmup and get_linear_schedule_with_warmup: LambdaLR's
// factor at optimizer step `step`, computed in their order so that the rates are equal to the
// bit: from 0 over the warmup, to 0 at total_steps.
double transformers_factor(const ScheduleConfig& sched, std::int64_t step,
                           std::int64_t total_steps) {
  if (step < sched.warmup)
    return static_cast<double>(step) / static_cast<double>(std::max<std::int64_t>(1, sched.warmup));
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - sched.warmup));
  if (sched.decay == "hf_linear")
    return std::max(0.0, static_cast<double>(total_steps - step) / span);
  const double progress = static_cast<double>(step - sched.warmup) / span;
  // num_cycles = 0.5 (their default): cos(pi * 0.5 * 2 * progress).
  return std::max(0.0, 0.5 * (1.0 + std::cos(std::numbers::pi * 0.5 * 2.0 * progress)));
}

}  // namespace

double scheduled_lr(const OptimizerConfig& opt, const ScheduleConfig& sched, std::int64_t step,
                    std::int64_t total_steps) {
  const double lr = opt.lr;
  if (sched.decay == "hf_cosine" || sched.decay == "hf_linear")
    return lr * transformers_factor(sched, step, total_steps);
  if (step < sched.warmup)
    return lr * static_cast<double>(step + 1) / static_cast<double>(sched.warmup);
  if (sched.decay == "constant") return lr;
  const double min_lr = lr * sched.min_lr_ratio;
  const std::int64_t span = std::max<std::int64_t>(1, total_steps - sched.warmup);
  const double progress =
      std::clamp(static_cast<double>(step - sched.warmup) / static_cast<double>(span), 0.0, 1.0);
  if (sched.decay == "linear") return min_lr + (1.0 - progress) * (lr - min_lr);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (lr - min_lr);
}

float clip_scale(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coef = max_norm / (grad_norm + 1e-6);
  return coef < 1.0 ? static_cast<float>(coef) : 1.0f;
}

AdamW::AdamW(const OptimizerConfig& config, const ParameterLayout& layout, std::size_t begin,
             std::size_t end, Device& device, std::size_t weight_origin)
    : config_(config),
      device_(&device),
      begin_(begin),
      end_(end),
      m_(device.memory(), end - begin, "optimizer state"),
      v_(device.memory(), end - begin, "optimizer state") {
  device.zero(m_.data(), m_.bytes());
  device.zero(v_.data(), v_.bytes());
  if (weight_origin == kSameOrigin) weight_origin = begin;
  for (const auto& t : layout.tensors()) {
    if (!t.trainable) continue;
    const std::size_t b = std::max(t.grad_offset, begin),
                      e = std::min(t.grad_offset + t.numel, end);
    if (b >= e) continue;
    const std::size_t weight = t.offset + (b - t.grad_offset) - weight_origin;
    Segment* last = segments_.empty() ? nullptr : &segments_.back();
    if (last != nullptr && last->decay == t.decay && last->grad + last->count == b - begin &&
        last->weight + last->count == weight) {
      last->count += e - b;
    } else {
      segments_.push_back({b - begin, weight, e - b, t.decay});
    }
  }
}

void AdamW::step(float* master, void* weights, const float* grads, double lr, float grad_scale,
                 std::int64_t step) {
  const DType wt = device_->traits().weights;
  const bool separate = weights != nullptr && weights != static_cast<void*>(master);
  for (const auto& s : segments_) {
    AdamWStep p{};
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(config_.beta1);
    p.beta2 = static_cast<float>(config_.beta2);
    p.eps = static_cast<float>(config_.eps);
    p.weight_decay = s.decay ? static_cast<float>(config_.weight_decay) : 0.0f;
    p.step = static_cast<int>(step);
    device_->adamw_update(master + s.weight, separate ? advance(weights, wt, s.weight) : nullptr,
                          grads + s.grad, m_.data() + s.grad, v_.data() + s.grad, s.count, p,
                          grad_scale);
  }
}

}  // namespace saturn
