// One device's execution context: the compute stream every op of the CUDA backend runs on, the
// cuBLASLt handle and its workspace, and small scratch for reductions. The workspace and scratch
// come from the device MemoryPool, so they show in its accounting like any other buffer.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

#include "runtime/core/memory.hpp"

namespace saturn::cuda {

class Context {
 public:
  // Makes `device` current for this thread and sets up its stream and cuBLASLt handle.
  // `pool` must be a pool over that device (CachingDeviceAllocator) and outlive the context.
  Context(int device, MemoryPool& pool);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasLtHandle_t lt() const { return lt_; }
  void* workspace() { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  // kReduceBlocks + 1 doubles of device scratch for two-stage reductions (reduce.cu).
  double* reduce_scratch() { return scratch_.data(); }
  static constexpr int kReduceBlocks = 512;
  MemoryPool& pool() { return *pool_; }
  // Waits for the stream and checks for asynchronous errors (naming `what` when one is found).
  void synchronize(const char* what = "stream synchronize");

  // Test instrumentation of attention.cu: the (query tile, key tile) pairs each attention kernel
  // computes (per query head; the dk/dv kernel counts each of a kv head's query heads), so tests
  // can check the tiles a sliding window skips. Off by default: the kernels then get a null
  // counter and pay one null check per tile.
  enum AttentionKernel : int { kAttentionForward = 0, kAttentionDq = 1, kAttentionDkv = 2 };
  struct AttentionTiles {
    std::uint64_t forward = 0, dq = 0, dkv = 0;
  };
  // Counts from zero from here on (the counters are allocated on the first call; the reset is
  // enqueued on the stream, so it orders after the kernels already launched).
  void enable_attention_tile_count();
  // Waits for the stream and returns the counts so far; all zero when counting is off.
  AttentionTiles attention_tiles();
  // The device counters, indexed by AttentionKernel; null when counting is off.
  unsigned long long* attention_tile_counters() { return tile_counts_.data(); }

  // One GEMM problem's cuBLASLt state, built once (linear.cpp): the operation descriptor (with
  // its transposes, epilogue, bias and aux types and aux leading dimension), the A, B and D
  // layouts, and the algorithm the heuristic chose. Only the bias and aux pointers change from
  // call to call (set as attributes of the cached descriptor); their alignment is part of the
  // key, since the heuristic's choice depends on it. `algo_found` false: cuBLASLt offered no
  // algorithm (remembered so the query is not repeated).
  struct Gemm {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool algo_found = false;
    Gemm() = default;
    Gemm(const Gemm&) = delete;
    Gemm& operator=(const Gemm&) = delete;
    ~Gemm();  // destroys the descriptors
  };
  // The problem's full description (shape, transposes, leading dimensions, types, epilogue,
  // alignments, beta == 0), as linear.cpp lays it out.
  using GemmKey = std::array<std::int64_t, 18>;
  std::map<GemmKey, std::unique_ptr<Gemm>>& gemm_cache() { return gemms_; }

 private:
  int device_;
  MemoryPool* pool_;
  cudaStream_t stream_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  Buffer<std::byte> workspace_;
  Buffer<double> scratch_;
  Buffer<unsigned long long> tile_counts_;  // attention tile counters: empty unless enabled
  std::map<GemmKey, std::unique_ptr<Gemm>> gemms_;
};

}  // namespace saturn::cuda
