// Calibration of the analytic cost model, measured once per hardware fingerprint and stored:
//
//  - compute: the achieved GEMM rate as a function of a GEMM's size (the backend's own linear
//    kernel on representative shapes), then a fit of real forward+backward passes of small
//    models, t = a·(GEMM time from the table) + b·(attention FLOPs) + c·(elementwise work), which
//    captures how much slower a whole model runs than its GEMMs alone;
//  - the optimizer: AdamW, clipping and zeroing cost per local parameter;
//  - communication: latency α and inverse bandwidth β of allreduce, all-gather, reduce-scatter
//    and send/recv per group size (within a node; across nodes when the world spans several),
//    fitted as t = α + β·bytes with bytes counted as CommStats counts them;
//  - host<->device copies (the CPU backend: memcpy between two memory pools).
//
// Everything is measured with every rank of the world running the same work at the same time:
// the executor keeps all ranks busy, and on a CPU node whose ranks outnumber its cores the
// per-rank rate depends on how many ranks compete.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/config.hpp"
#include "runtime/profile/file_system.hpp"
#include "runtime/profile/hardware.hpp"

namespace saturn::profile {

// A collective's fitted cost on groups of one size: t = alpha_s + beta_s_per_byte · bytes.
struct LinkFit {
  int group = 2;
  bool inter_node = false;
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  double fit_error = 0;  // median relative error of the fit over the measured sizes
  // allreduce fits only: extra wait per synchronisation point in a step (ranks arriving at
  // different times), beyond alpha.
  double sync_s = 0;
};

// Collectives the cost model knows (comm/communicator.hpp).
using CollOp = comm::CollOp;
const char* coll_op_name(CollOp op);

// The work of one forward+backward micro-batch, as the compute model sees it.
struct ComputeFeatures {
  double gemm_s = 0;      // sum over the GEMMs of flops / table rate
  double attn_flops = 0;  // attention scores and values, forward and backward
  double elem_units = 0;  // elementwise work: per token, sum of row widths of norms/activations
  double flops = 0;       // matrix FLOPs as the strategies count them (block + head)
};

// One GEMM out[n, o] = in[n, k] · W[k, o] as the cost model sees a linear layer.
using GemmShape = std::array<int, 3>;  // n, k, o
// The GEMMs of one forward+backward micro-batch of B sequences of T tokens of `model` (one per
// linear of a block, then the head; each stands for three GEMMs of equal FLOPs: forward, input
// gradient, weight gradient), tensor-parallel shard `tp`: what Calibration::features() times.
std::vector<GemmShape> model_gemm_shapes(const ModelConfig& model, int B, int T, int tp);

// A GEMM shape measured on the device: seconds of one call.
struct GemmShapeTime {
  GemmShape shape{};
  double seconds = 0;
};

struct Calibration {
  std::string hardware_id;
  std::string created_utc;
  double seconds = 0;  // how long calibrating took
  bool quick = false;  // from CalibrationOptions::quick: coarser, never shared through the cache

  // The backend the rates are of: "cpu", or on CUDA the provider and GPU ("cuda: NVIDIA
  // H200"). The cost model refuses a CPU calibration for a CUDA job (estimate_cost).
  std::string device = "cpu";
  // The clock compute was timed with: "steady_clock" (CPU) or "cuda events" (GPU).
  std::string timer = "steady_clock";
  // Achieved GEMM rate (FLOP/s per rank) at increasing GEMM sizes (FLOPs of one call).
  std::vector<std::pair<double, double>> gemm_rate;
  // On a GPU: GEMMs measured at the exact shapes the cost model asks for (the jobs' models at
  // their micro-batches); gemm_seconds(shape) uses them before interpolating gemm_rate.
  std::vector<GemmShapeTime> gemm_shapes;
  // Compute fit: t = gemm_scale·gemm_s + attn_s_per_flop·attn_flops + elem_s_per_unit·elem_units.
  double gemm_scale = 1.0;
  double attn_s_per_flop = 0;
  double elem_s_per_unit = 0;
  double compute_fit_error = 0;  // median relative error over the calibration models
  double optimizer_s_per_param = 0;
  double copy_bytes_per_s = 0;
  // Whether copy_bytes_per_s was measured with pinned (page-locked) host memory; on a GPU,
  // false means pageable host memory (no pinned allocation available to calibration).
  bool copy_pinned = false;
  // Fraction of a reduction overlapped by compute when a strategy overlaps it. MPI on the CPU
  // backend only progresses inside MPI calls, so little overlaps there.
  double overlap = 0;
  std::map<std::string, std::vector<LinkFit>> links;  // by coll_op_name
  double probe_flops_per_s = 0;                       // probe_speed when calibrating
  // Measured by the first trials on this hardware, then kept with it (a warm calibration probes
  // neither again): the wait per synchronisation of a group of each size smaller than a node
  // while the node's other ranks compute (a checkpoint's collectives in the batch), and how
  // fast checkpoints reach each file system a run directory was on (by file_system_id).
  std::map<int, double> contended_sync_s;
  std::map<std::string, WriteRates> checkpoint_writes;
  // Not stored: calibration-time speed / current speed (probe_speed), multiplying every time
  // the model predicts; 1 when unknown.
  double load_factor = 1.0;

  // Seconds of one GEMM of `flops` FLOPs (log-linear interpolation of gemm_rate).
  double gemm_seconds(double flops) const;
  // Seconds of one GEMM of this shape: measured (gemm_shapes) when it was, else by its FLOPs.
  double gemm_seconds(const GemmShape& shape) const;
  bool has_gemm_shape(const GemmShape& shape) const;
  // Seconds of one forward+backward micro-batch of B sequences of T tokens of the whole model
  // (tensor-parallel shard when tp > 1), from the fit.
  double micro_batch_seconds(const ModelConfig& model, int B, int T, int tp) const;
  ComputeFeatures features(const ModelConfig& model, int B, int T, int tp) const;
  // Seconds of `calls` calls of `op` on a group of `group` ranks moving `bytes` in all: the
  // nearest measured group size, scaled to `group` as a ring algorithm scales.
  double comm_seconds(CollOp op, int group, bool inter_node, double calls, double bytes) const;
  // Seconds ranks of a group of `group` wait for each other at `points` synchronisation points
  // of a step (LinkFit::sync_s of the nearest measured group size).
  double sync_seconds(int group, bool inter_node, double points) const;
  bool has_inter_node() const;

  nlohmann::json to_json() const;
  static Calibration from_json(const nlohmann::json& j);
};

// Round numbers for a machine that was never calibrated (planning from a laptop with no
// store): about 20 GFLOP/s per rank, 5 GB/s copies, 5 µs / 5 GB/s collectives.
Calibration nominal_calibration();

struct CalibrationOptions {
  int repeats = 3;         // timed windows per measurement (median)
  double window_s = 0.02;  // each window at least this long (spans scheduler time slices)
  bool quick = false;      // fewer shapes and sizes (tests)
  // The backend calibrated: the CPU, or each rank's GPU (device_index, -1: the rank; pool of
  // device_capacity bytes, 0: what the GPU has), timed with its device timer.
  DeviceKind device = DeviceKind::kCpu;
  int device_index = -1;
  std::size_t device_capacity = 0;
  // On a GPU: the model shapes to time GEMMs at (model_gemm_shapes of the jobs), and the
  // wall-clock budget of the GEMM and model-fit measurements together (calibrate(): GEMMs up
  // to half of it, the fit the rest; add_gemm_shapes: all of it). Shapes are measured
  // from the smallest; one whose predicted time (its FLOPs at the rate measured so far) would
  // overrun the budget is not measured (logged; its time is interpolated). On the emulator,
  // whose GEMMs run at CPU speed, this is what keeps calibration short.
  std::vector<GemmShape> gemm_shapes;
  double gpu_budget_s = 30;
};

// The current speed of this machine, every rank computing at once: the median rate of one
// fixed GEMM (FLOP/s). Calibration records it; a later run compares, so a node slowed down (or
// sped up) since calibrating is accounted for (Calibration::load_factor).
double probe_speed(comm::Communicator& world, double window_s = 0.02);

// Collective over `world`: measures everything above. node_of_rank[r] is rank r's node index
// (as detect_hardware found it); groups never mix nodes except for the inter-node fits.
Calibration calibrate(comm::Communicator& world, const Hardware& hardware,
                      const std::vector<int>& node_of_rank, const CalibrationOptions& options = {});

// Collective over `world`, GPU calibrations only: times on each rank's device the shapes of
// `shapes` that `cal` lacks (within options.gpu_budget_s) and adds them (gemm_shapes and the
// rate table); returns how many were added. Every rank passes the same shapes.
int add_gemm_shapes(comm::Communicator& world, Calibration& cal,
                    const std::vector<GemmShape>& shapes, const CalibrationOptions& options);

// Non-negative least squares for up to a few features (exhaustive over active sets): the
// coefficients minimising |X·w - y|² with w >= 0. Rows of X are samples.
std::vector<double> nnls(const std::vector<std::vector<double>>& X, const std::vector<double>& y);

}  // namespace saturn::profile
