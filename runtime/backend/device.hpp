// One rank's compute device, as the strategies and the training loop see it: its memory, copies
// between it and the host, and the few vector operations a strategy needs on device buffers
// (norms, sums, conversions, the optimizer update). The transformer's own passes are the
// backend's kernels, run by the model program (runtime/model/transformer.hpp); this interface
// is what lets one strategy implementation drive the CPU and a GPU alike.
//
// Rules every caller follows: a pointer handed to these calls is device memory from memory()
// (or from a pool of the same device); the host never dereferences it (on a GPU it cannot, and
// the CUDA emulator faults when it tries). Host memory goes in and out through upload() and
// download() only. Operations are ordered as called; those that return a value wait for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/core/adamw_step.hpp"
#include "runtime/core/dtype.hpp"
#include "runtime/core/exact_sum.hpp"
#include "runtime/core/memory.hpp"

namespace saturn {

enum class DeviceKind { kCpu, kCuda };
const char* device_kind_name(DeviceKind kind);  // "cpu", "cuda"
// InputError naming the valid ones.
DeviceKind parse_device_kind(const std::string& name);

// What one rank trains on: its backend and device, and the memory it may use. One value wherever
// a run, the planner, a trial or a job needs them, from the same flags on every command
// (`--device`, `--device-memory`, `--host-memory`).
struct Resources {
  DeviceKind device = DeviceKind::kCpu;
  int device_index = -1;  // the rank's device (the launch binding's); -1: its own
  std::size_t device_bytes =
      0;                       // device memory per rank; 0: unlimited (on a GPU: device_memory_for)
  std::size_t host_bytes = 0;  // host memory per rank for offloaded state; 0: unlimited
};

// What a backend's model keeps, in which precision, and how its flat parameter layout is
// aligned: all that memory estimates need, known without a device.
struct BackendTraits {
  DeviceKind kind = DeviceKind::kCpu;
  DType activations = DType::kFloat32;  // activations and their gradients
  DType weights = DType::kFloat32;      // the parameters the kernels read (master copy: fp32)
  std::size_t param_align = 1;          // elements: every parameter group of the flat layout
                                        // starts at a multiple (aligned GEMM operands)
  std::size_t device_workspace = 0;     // bytes the backend itself holds on each device
  // The kernels read a copy of the fp32 master weights in another type (bf16 on CUDA); on the
  // CPU the master weights are what the kernels read.
  bool separate_weights() const { return weights != DType::kFloat32; }
  // What one buffer of `bytes` takes from the device's pool (its allocator's rounding: the CUDA
  // caching allocator's granules; exact on the CPU). Estimates count every buffer this way.
  std::size_t footprint(std::size_t bytes) const;
};
const BackendTraits& backend_traits(DeviceKind kind);

// Times work on one device: start() and stop() mark two points in the order of the device's
// operations (on a GPU: events on its compute stream, so the time is the stream's, not the
// host's, which returns before queued work is done); seconds() waits for the stop point and
// returns the time between them. A timer may be started again after seconds().
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual void start() = 0;
  virtual void stop() = 0;
  // Error when called before start() and stop().
  virtual double seconds() = 0;
  // Which clock: "cuda events" or "steady_clock" (recorded with measurements).
  virtual const char* clock() const = 0;
};

// The host's steady clock as a DeviceTimer (the CPU backend's: its operations finish before
// they return, so host time around them is device time).
std::unique_ptr<DeviceTimer> make_host_timer();

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const BackendTraits& traits() const = 0;
  DeviceKind kind() const { return traits().kind; }
  // For messages and logs, e.g. "cpu:0", "cuda:0 (NVIDIA H200)".
  virtual std::string describe() const = 0;
  virtual MemoryPool& memory() = 0;

  // ---- copies (bytes). upload: the host source may be reused on return. download: the host
  // destination holds the data on return.
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;  // device to device
  // Sets `bytes` at `dst` to zero, ordered with the other operations.
  virtual void zero(void* dst, std::size_t bytes) = 0;
  // Waits for everything enqueued; `what` names the point in errors.
  virtual void synchronize(const char* what) = 0;
  // A timer of this device's work (see DeviceTimer).
  virtual std::unique_ptr<DeviceTimer> timer() = 0;

  // ---- host memory for copies, and asynchronous copies (offload's layer prefetch)
  // The allocator for host memory that is copied to and from this device: page-locked
  // (cudaHostAlloc) on CUDA, where the GPU reads and writes it by DMA, so a copy runs beside
  // compute; nullptr where plain host memory serves (the CPU). Host state that streams through
  // the device lives in a MemoryPool over it: MemoryPool(name, capacity, host_allocator()).
  // The device owns it; it outlives every pool over it only if the pools go first.
  virtual BackingAllocator* host_allocator() { return nullptr; }
  // Copies on the device's copy stream, which runs beside compute. Each starts once everything
  // enqueued on the device before it is done (so its device buffer's previous users have
  // finished), copies run in the order they were issued, and each returns a ticket.
  // wait_copy(t): operations enqueued afterwards run after copy t (the device waits, not the
  // host). finish_copies: the host waits for every copy issued. The host side must be memory
  // from host_allocator() (checked on CUDA: Error naming the copy, since a pageable copy would
  // neither overlap nor be asynchronous) and left alone until finish_copies(): an upload reads
  // its source, a download writes its destination, later. Device buffers may be released as
  // soon as the copy is issued: the device's allocator holds them until the copy is done. The
  // CPU copies at once (there is no other engine to overlap with) and returns ticket 0.
  using CopyTicket = std::uint64_t;
  virtual CopyTicket upload_async(void* dst, const void* src, std::size_t bytes) = 0;
  virtual CopyTicket download_async(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void wait_copy(CopyTicket ticket) = 0;
  virtual void finish_copies(const char* what) = 0;

  // ---- fp32 vectors
  // Sum of squares accumulated in fp64 in an order fixed by n alone (waits for the result).
  virtual double sum_of_squares(const float* x, std::size_t n) = 0;
  // Adds the squares of x exactly (reproducible mode's order-free norm; waits).
  virtual void add_exact_squares(ExactSquareSum& into, const float* x, std::size_t n) = 0;
  virtual void add(float* dst, const float* src, std::size_t n) = 0;  // dst += src
  // The kernels' copy of master weights: converts into `weights` (traits().weights). Nothing
  // to do where the kernels read the master weights themselves (weights == master).
  virtual void to_weights(void* weights, const float* master, std::size_t n) = 0;
  // AdamW on master weights (and their kernel copy `weights`, when separate and not null),
  // torch.optim.AdamW's arithmetic; grad_scale multiplies the gradients first (clipping).
  virtual void adamw_update(float* master, void* weights, const float* grad, float* m, float* v,
                            std::size_t n, const AdamWStep& step, float grad_scale) = 0;

  // ---- fp64 accumulators (reproducible mode)
  virtual void accumulate(double* acc, float* g, std::size_t n) = 0;     // acc += g; g = 0
  virtual void round_into(float* out, double* acc, std::size_t n) = 0;   // out = fp32(acc); acc = 0
  virtual void widen(double* dst, const float* src, std::size_t n) = 0;  // dst = src
  virtual void add(double* dst, const double* src, std::size_t n) = 0;   // dst += src

  // ---- device scalars: *acc += double(*x) * weight (losses summed without a host round trip)
  virtual void add_scaled(double* acc, const float* x, double weight) = 0;
};

// Device memory a GPU needs outside the pool the planner fills: the CUDA context, cuBLASLt's
// and NCCL's own allocations (the cuBLASLt workspace and reduction scratch are in the pool and
// in the estimates, BackendTraits::device_workspace). A stated allowance, to be checked against
// a GPU by the device check: a context is ~0.5 GiB, NCCL's buffers up to ~1 GiB on 8 GPUs.
constexpr std::size_t kCudaReservedBytes = std::size_t{2} << 30;

// The device memory per rank that planning, trials and training use. CPU: `given` (0:
// unlimited). CUDA: from the device, not a flag: GPU `index`'s total memory less
// kCudaReservedBytes; `given` (a flag, named by `flag` in messages) may ask for less, and one
// that exceeds it is InputError naming both numbers; InputError when no GPU is usable.
std::size_t device_capacity_for(DeviceKind kind, int index, std::size_t given,
                                const std::string& flag);

// A device of `kind` for this rank with `capacity` bytes of memory (0: as much as it has).
// cuda: device `index` (the rank's local GPU); throws Error naming why when CUDA is not usable
// (not built, no driver, no device). The name appears in out-of-memory messages.
std::unique_ptr<Device> make_device(DeviceKind kind, int index, std::size_t capacity);

}  // namespace saturn
