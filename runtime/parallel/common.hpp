// Helpers shared by the strategies (not part of the Strategy contract): rows and micro-batches,
// canonical slices of what a rank holds, timing, and cost figures for estimates.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/backend/device.hpp"
#include "runtime/core/memory.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/model/config.hpp"
#include "runtime/model/parameters.hpp"
#include "runtime/parallel/canonical.hpp"
#include "runtime/parallel/strategy.hpp"

namespace saturn::parallel {

// Rows [begin, begin + count) of `rows` that shard `shard` of `shards` takes (the loader's
// next_shard split: integer division, so shards differ by at most one row).
struct RowRange {
  std::int64_t begin = 0, count = 0;
};
RowRange shard_rows(std::int64_t rows, int shard, int shards);

// The micro-batch size a rank uses for `rows` local rows per step: knobs.micro_batch_size, else
// train.micro_batch_size, else the largest divisor of rows that is at most 8; for a
// reproducible job the canonical micro-batch. Returns 0 and sets *reason when the configured
// (or canonical) size does not divide rows.
std::int64_t choose_micro_batch(const StrategySpec& spec, std::int64_t rows, std::string* reason);

// Copies rows [row, row + n) of `batch` into micro-batch buffers of `capacity` rows, padding
// the rest with token 0 and target -1 (ignored by the loss), so a fixed activation reservation
// serves a short last micro-batch.
void copy_rows(const data::Batch& batch, std::int64_t row, std::int64_t n, std::int64_t capacity,
               std::int32_t* inputs, std::int32_t* targets);

// Canonical slices of a rank's storage, built once at set-up. Storage is addressed as segments
// (e.g. one flat buffer, or one buffer per parameter group) so the same description serves
// parameters, AdamW m and AdamW v, which have equal layouts in separate buffers. The storage is
// `device`'s memory: where the host cannot read it, slices are staged through host copies
// (export downloads, import uploads); where it can (the CPU), they point into it.
class SliceSet {
 public:
  SliceSet() = default;
  explicit SliceSet(Device& device) : device_(&device) {}
  // Every canonical box of a local (possibly tensor-parallel) tensor whose first element is
  // `offset` floats into segment `segment`. Blocks that are not contiguous in local storage
  // (GPT-2's fused q|k|v columns) are exported through staging copies.
  void add_local_tensor(const ParamTensor& t, int tp_rank, int segment, std::size_t offset,
                        bool writer);
  // Elements [begin, end) of the whole canonical tensor t (row-major), stored contiguously at
  // `offset` of `segment`: up to three boxes (partial first row, whole rows, partial last row).
  void add_flat_range(const ParamTensor& t, std::size_t begin, std::size_t end, int segment,
                      std::size_t offset, bool writer);

  // Slices over the storage whose segment s starts at segments[s].
  StateSlices export_from(const std::vector<float*>& segments);
  // Copies each slice's data into the storage (slices as export_from returned them, possibly
  // refilled by the caller; matched by name and start).
  void import_into(const std::vector<float*>& segments, const StateSlices& slices) const;
  std::size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    TensorSlice slice;  // data filled at export
    int segment = 0;
    std::size_t offset = 0;  // of the block's first element
    std::int64_t rows = 1, cols = 1, stride = 1;
    std::vector<float> staging;  // non-contiguous blocks, and every block of device memory
  };
  void add(Entry e);
  bool staged(const Entry& e) const;
  Device* device_ = nullptr;
  std::vector<Entry> entries_;
};

// A running sum of double scalars in device memory (a step's losses), added to without waiting
// for the device; read() downloads it.
class DeviceSum {
 public:
  DeviceSum() = default;
  explicit DeviceSum(Device& device);
  void reset();                             // to 0
  void add(const float* x, double weight);  // += double(*x) * weight, x a device scalar
  double read();                            // waits
 private:
  Device* device_ = nullptr;
  Buffer<double> value_;
};

// Forward+backward FLOPs per token of one block (matrix products and attention; the mean over
// the layers, whose windows may differ), of blocks [first, end), and of the head; used for stage
// balancing and estimates.
double block_flops_per_token(const ModelConfig& c, int seq_len);
double blocks_flops_per_token(const ModelConfig& c, int seq_len, int first, int end);
double head_flops_per_token(const ModelConfig& c);

// Accumulates wall time into a counter while alive (compute time for stats).
class ScopedTimer {
 public:
  explicit ScopedTimer(double& into) : into_(into), t0_(std::chrono::steady_clock::now()) {}
  ~ScopedTimer() {
    into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;

 private:
  double& into_;
  std::chrono::steady_clock::time_point t0_;
};

// Sets estimate.feasible = false with the reason (the first reason wins) and returns it.
Estimate& infeasible(Estimate& e, const std::string& reason);
// Marks the estimate infeasible when the busiest rank exceeds the capacities in `knobs`.
void check_capacity(Estimate& e, const Knobs& knobs, const std::string& what);
// The last step of every estimate: the cost model's optimizer and reproducible-mode element
// counts from the breakdown's "optimizer state" and "fp64 gradient accumulator" unless the
// strategy set them, what the backend itself holds on each device (the GEMM library's workspace
// on CUDA), then check_capacity.
void finish_estimate(Estimate& e, const StrategySpec& spec, const std::string& what);

// Checks shared by every strategy: degree >= 1, the model valid, the global batch divisible
// into `replicas` data-parallel replicas. Returns false (estimate infeasible) otherwise.
bool check_common(Estimate& e, const StrategySpec& spec, int replicas);

}  // namespace saturn::parallel
