#include "runtime/parallel/grad_buckets.hpp"

#include <fmt/format.h>

#include "runtime/core/error.hpp"

namespace saturn::parallel {

void GradBuckets::group_done(comm::Communicator& comm, float* grads, int group) {
  if (hi_ >= lo_ && group != lo_ - 1)
    throw Error(
        fmt::format("gradient buckets: group {} reported after group {} (backward order "
                    "is descending)",
                    group, lo_));
  if (hi_ < lo_) hi_ = group;
  lo_ = group;
  const std::size_t bytes =
      (layout_->grad_group_end(hi_) - layout_->grad_group_begin(lo_)) * sizeof(float);
  if (bucket_bytes_ == 0 || bytes >= bucket_bytes_) launch(comm, grads);
}

void GradBuckets::launch(comm::Communicator& comm, float* grads) {
  if (hi_ < lo_) return;
  const std::size_t b = layout_->grad_group_begin(lo_), e = layout_->grad_group_end(hi_);
  // A LoRA job's embeddings and head have no gradients: nothing to send for them.
  if (e > b) pending_.push_back(comm.iallreduce(grads + b, e - b, comm::ReduceOp::kSum));
  lo_ = 0;
  hi_ = -2;
}

void GradBuckets::finish(comm::Communicator& comm, float* grads) {
  launch(comm, grads);
  for (auto& r : pending_) r.wait();
  pending_.clear();
}

void GradBuckets::progress() {
  for (auto& r : pending_) r.test();
}

}  // namespace saturn::parallel
