#include <fmt/format.h>

#include "runtime/backend/cpu/ops.hpp"
#include "runtime/core/log.hpp"
#include "runtime/train/trainer.hpp"

namespace saturn {

ResumedComputeThreads::ResumedComputeThreads(const TrainJob& job, int recorded, bool log_it)
    : previous_(cpu::compute_threads()) {
  if (!job.train.reproducible || recorded <= 0 || recorded == previous_) return;
  set_ = recorded;
  cpu::set_compute_threads(set_);
  if (log_it)
    log::info(
        "job {}: reproducible: {} threads per rank as when its checkpoint was written "
        "(this run has {})",
        job.id, set_, previous_);
}

ResumedComputeThreads::~ResumedComputeThreads() {
  if (set_ > 0) cpu::set_compute_threads(previous_);
}

int ResumedComputeThreads::threads() const {
  return set_ > 0 ? set_ : previous_;
}

}  // namespace saturn
