// Data-parallel gradient reduction that overlaps backward: as each parameter group's gradients
// become final (block_backward(l) done), they join a bucket; a full bucket is allreduced
// (non-blocking, sum) while backward continues with the layers below. Groups are reported in
// backward order (head, blocks from the last, embeddings), so a bucket is one contiguous range
// of the flat layout.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/parameters.hpp"

namespace saturn::parallel {

class GradBuckets {
 public:
  // bucket_bytes 0: one bucket per group (per layer).
  GradBuckets(const ParameterLayout& layout, std::size_t bucket_bytes)
      : layout_(&layout), bucket_bytes_(bucket_bytes) {}

  // Group g's gradients at grads + layout.grad_group_begin(g) are final on this rank.
  void group_done(comm::Communicator& comm, float* grads, int group);
  // Launches the partly filled bucket, then waits for every bucket.
  void finish(comm::Communicator& comm, float* grads);
  // Lets MPI progress outstanding reductions (called between layers).
  void progress();

 private:
  void launch(comm::Communicator& comm, float* grads);
  const ParameterLayout* layout_;
  std::size_t bucket_bytes_;
  int lo_ = 0, hi_ = -2;  // current bucket: groups [lo_, hi_]; empty when hi_ < lo_
  std::vector<comm::Request> pending_;
};

}  // namespace saturn::parallel
