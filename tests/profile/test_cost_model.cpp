// The analytic cost model and the calibration's fitting pieces, without MPI.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/core/error.hpp"
#include "runtime/parallel/strategy.hpp"
#include "runtime/profile/calibration.hpp"
#include "runtime/profile/cost_model.hpp"

using namespace saturn;
using namespace saturn::profile;

namespace {

ModelConfig small_model() {
  ModelConfig m;
  m.arch = Arch::kGpt2;
  m.n_layer = 2;
  m.n_head = 4;
  m.d_model = 128;
  m.max_seq_len = 64;
  return m;
}

TrainConfig small_train() {
  TrainConfig t;
  t.batch_size = 16;
  t.seq_len = 64;
  t.steps = 200;
  t.eval_every = 50;
  return t;
}

CostEstimate est(const std::string& strategy, int degree, std::vector<std::string> knobs = {},
                 std::size_t capacity = 0, double load = 1.0) {
  Calibration c = nominal_calibration();
  c.load_factor = load;
  return estimate_cost(small_model(), small_train(), ConfigSpec{strategy, knobs, degree, 1}, c,
                       capacity);
}

}  // namespace

TEST(Nnls, RecoversNonNegativeCoefficients) {
  std::vector<std::vector<double>> X = {
      {1, 2, 0.5}, {2, 1, 1.5}, {3, 5, 2}, {0.5, 4, 1}, {4, 0.5, 3}};
  std::vector<double> y;
  for (const auto& r : X) y.push_back(2 * r[0] + 0 * r[1] + 3 * r[2]);
  const auto w = nnls(X, y);
  EXPECT_NEAR(w[0], 2, 1e-9);
  EXPECT_NEAR(w[1], 0, 1e-9);
  EXPECT_NEAR(w[2], 3, 1e-9);
  // A negative true coefficient is clamped to zero, never returned.
  y.clear();
  for (const auto& r : X) y.push_back(2 * r[0] - 1 * r[1]);
  for (double v : nnls(X, y)) EXPECT_GE(v, 0);
}

TEST(Calibration, GemmRateInterpolatesInLogSize) {
  Calibration c;
  c.gemm_rate = {{1e6, 1e9}, {1e8, 1e10}};
  EXPECT_DOUBLE_EQ(c.gemm_seconds(1e6), 1e-3);
  EXPECT_DOUBLE_EQ(c.gemm_seconds(1e5), 1e-4);  // below the table: its first rate
  EXPECT_DOUBLE_EQ(c.gemm_seconds(1e9), 1e-1);  // above: its last
  EXPECT_NEAR(c.gemm_seconds(1e7), 1e7 / 5.5e9, 1e-12);
}

TEST(Calibration, CollectivesScaleLikeRings) {
  Calibration c;
  c.links["allreduce"] = {LinkFit{2, false, 1e-5, 1e-9, 0}};
  c.links["all_gather"] = {LinkFit{2, false, 1e-5, 1e-9, 0}};
  EXPECT_DOUBLE_EQ(c.comm_seconds(CollOp::kAllreduce, 2, false, 3, 1e6), 3e-5 + 1e-3);
  // g = 4: latency x (g-1)/(g0-1) = 3, bandwidth x ((g-1)/g) / ((g0-1)/g0) = 1.5.
  EXPECT_NEAR(c.comm_seconds(CollOp::kAllreduce, 4, false, 1, 1e6), 3e-5 + 1.5e-3, 1e-12);
  EXPECT_NEAR(c.comm_seconds(CollOp::kAllGather, 4, false, 1, 1e6), 3e-5 + 3e-3, 1e-12);
  EXPECT_EQ(c.comm_seconds(CollOp::kAllreduce, 1, false, 5, 1e6), 0);
  // No inter-node fit: the intra-node one stands in.
  EXPECT_DOUBLE_EQ(c.comm_seconds(CollOp::kAllreduce, 2, true, 1, 0),
                   c.comm_seconds(CollOp::kAllreduce, 2, false, 1, 0));
  EXPECT_EQ(Calibration::from_json(c.to_json()).to_json(), c.to_json());
  // What the trials' probes measured on this hardware, kept with it.
  c.contended_sync_s[2] = 4e-3;
  c.checkpoint_writes["fs-ef53-dev-8:1"] = WriteRates{4e-4, 1e9, 1e-4};
  const Calibration back = Calibration::from_json(c.to_json());
  EXPECT_EQ(back.contended_sync_s, c.contended_sync_s);
  ASSERT_EQ(back.checkpoint_writes.count("fs-ef53-dev-8:1"), 1u);
  EXPECT_DOUBLE_EQ(back.checkpoint_writes.at("fs-ef53-dev-8:1").bytes_per_s, 1e9);
  EXPECT_DOUBLE_EQ(back.checkpoint_writes.at("fs-ef53-dev-8:1").dataset_s, 1e-4);
  nlohmann::json bad = c.to_json();
  bad["contended_sync_s"] = {{"two", 1e-3}};
  EXPECT_THROW(Calibration::from_json(bad), InputError);
}

TEST(CostModel, MemoryIsTheStrategysOwnEstimate) {
  for (const char* name : {"ddp", "fsdp", "pipeline", "tensor", "offload"}) {
    parallel::StrategySpec spec;
    spec.model = small_model();
    spec.train = small_train();
    spec.degree = 2;
    const parallel::Estimate e = parallel::make_strategy(name, spec)->estimate();
    const CostEstimate c = est(name, 2);
    EXPECT_EQ(c.device_bytes, e.device_bytes) << name;
    EXPECT_EQ(c.host_bytes, e.host_bytes) << name;
    EXPECT_EQ(c.comm_bytes, e.comm_bytes) << name;
    EXPECT_TRUE(c.feasible) << name << ": " << c.reason;
    EXPECT_GT(c.step_s, 0) << name;
    EXPECT_NEAR(c.step_s, c.compute_s + c.bubble_s + c.comm_s + c.transfer_s + c.optimizer_s, 1e-12)
        << name;
  }
}

TEST(CostModel, ComputeSplitsOverReplicasAndPipelinesPayTheBubble) {
  const CostEstimate one = est("ddp", 1), two = est("ddp", 2);
  EXPECT_NEAR(two.compute_s, one.compute_s / 2, 1e-12 * one.compute_s);
  EXPECT_EQ(one.comm_s, 0);
  EXPECT_GT(two.comm_s, 0);
  const CostEstimate pipe = est("pipeline", 2);
  ASSERT_GT(pipe.micro_batches, 0);
  EXPECT_NEAR(pipe.bubble_s, pipe.compute_s / static_cast<double>(pipe.micro_batches), 1e-12);
  const CostEstimate off = est("offload", 1);
  EXPECT_GT(off.transfer_s, 0);
  EXPECT_NEAR(off.transfer_s,
              static_cast<double>(off.host_transfer_bytes) / nominal_calibration().copy_bytes_per_s,
              1e-12);
}

TEST(CostModel, RecomputationTradesTimeForMemory) {
  const CostEstimate plain = est("ddp", 1), rc = est("ddp", 1, {"recompute=true"});
  EXPECT_GT(rc.compute_s, plain.compute_s);
  EXPECT_LT(rc.device_bytes, plain.device_bytes);
}

TEST(CostModel, CapacityMakesConfigurationsInfeasible) {
  const CostEstimate fits = est("ddp", 1);
  const CostEstimate no = est("ddp", 1, {}, fits.device_bytes / 2);
  EXPECT_FALSE(no.feasible);
  EXPECT_NE(no.reason.find("out of memory"), std::string::npos) << no.reason;
  EXPECT_FALSE(est("tensor", 3).feasible);  // 3 divides neither the heads nor the batch
  EXPECT_THROW(est("warp-drive", 1), InputError);
}

// A reproducible job: the trial's micro-batches are the canonical ones, the fp64 pass costs
// time and memory, and tensor parallelism is not offered (with the reason in the profile).
TEST(CostModel, ReproducibleJobs) {
  TrainConfig t = small_train();
  t.reproducible = true;
  const Calibration c = nominal_calibration();
  TrainConfig same_micro = small_train();  // the same micro-batches, fp32 accumulation
  same_micro.micro_batch_size = 2;
  auto rep = [&](const std::string& s, int degree) {
    return estimate_cost(small_model(), t, ConfigSpec{s, {}, degree, 1}, c);
  };
  for (const auto& [s, degree] : std::vector<std::pair<std::string, int>>{
           {"ddp", 2}, {"fsdp", 2}, {"offload", 1}, {"pipeline", 2}}) {
    const CostEstimate exact = rep(s, degree);
    const CostEstimate loose =
        estimate_cost(small_model(), same_micro, ConfigSpec{s, {}, degree, 1}, c);
    ASSERT_TRUE(exact.feasible) << s << ": " << exact.reason;
    EXPECT_EQ(exact.micro_batch, 2) << s;  // canonical: 16 sequences in 8 micro-batches
    EXPECT_GT(exact.step_s, loose.step_s) << s;
    EXPECT_GT(exact.device_bytes + exact.host_bytes, loose.device_bytes + loose.host_bytes) << s;
  }
  const CostEstimate tp = rep("tensor", 2);
  EXPECT_FALSE(tp.feasible);
  EXPECT_NE(tp.reason.find("not available to a reproducible job"), std::string::npos) << tp.reason;
  EXPECT_FALSE(rep("ddp", 16).feasible);  // one row a rank: not a whole canonical micro-batch
}

TEST(CostModel, LoadFactorScalesTheStep) {
  EXPECT_NEAR(est("fsdp", 2, {}, 0, 2.0).step_s, 2 * est("fsdp", 2).step_s, 1e-12);
}

TEST(CostModel, RunTimeCountsStartStepsEvaluationsAndCheckpoints) {
  TrainConfig t = small_train();  // eval_every 50
  t.checkpoint_every = 100;
  t.steps = 210;
  SegmentWork w = segment_work(t, 0, 210);
  EXPECT_EQ(w.steps, 210);
  EXPECT_EQ(w.evals, 5);          // at 50, 100, 150, 200 and at the end
  EXPECT_EQ(w.checkpoints, 3);    // at 100, 200 and final.h5
  w = segment_work(t, 100, 200);  // stopped at 200 (a rung): its periodic checkpoint suffices
  EXPECT_EQ(w.evals, 2);
  EXPECT_EQ(w.checkpoints, 1);
  w = segment_work(t, 0, 120);  // stopped at 120: periodic at 100, the stop's at 120
  EXPECT_EQ(w.checkpoints, 2);
  t.steps = 200;
  w = segment_work(t, 150, 200);  // the last step is periodic: both it and final.h5
  EXPECT_EQ(w.evals, 1);
  EXPECT_EQ(w.checkpoints, 2);
  t.eval_every = 0;
  t.checkpoint_every = 0;
  w = segment_work(t, 0, 200);
  EXPECT_EQ(w.evals, 1);
  EXPECT_EQ(w.checkpoints, 1);
  const RunParts p = run_parts(t, 0, 200, UnitCosts{0.5, 2.0, 3.0, 4.0});
  EXPECT_DOUBLE_EQ(p.steps_s, 100.0);
  EXPECT_DOUBLE_EQ(p.evals_s, 2.0);
  EXPECT_DOUBLE_EQ(p.checkpoints_s, 3.0);
  EXPECT_DOUBLE_EQ(p.start_s, 4.0);
  EXPECT_DOUBLE_EQ(p.total(), 109.0);
  EXPECT_EQ(ConfigSpec({"pipeline", {"schedule=gpipe"}, 2, 1}).label(), "pipeline[schedule=gpipe]");
}

// A checkpoint costs its bytes at the file system's rates and, on several ranks, the collective
// waits of writing one parallel HDF5 file (about five per dataset).
TEST(CostModel, CheckpointSecondsAreBytesAtTheWriteRateAndCollectiveWaits) {
  const ModelConfig m = small_model();
  EXPECT_DOUBLE_EQ(checkpoint_bytes(m), 12.0 * static_cast<double>(m.num_parameters()));
  const WriteRates disk{0.002, 1e9};
  const double one = checkpoint_seconds(m, 1, disk, 1e-3);
  EXPECT_DOUBLE_EQ(one, 0.002 + checkpoint_bytes(m) / 1e9);  // one rank waits for no one
  EXPECT_NEAR(checkpoint_seconds(m, 2, disk, 1e-3) - one, 1e-3 * checkpoint_sync_points(m), 1e-12);
  EXPECT_GT(checkpoint_sync_points(m), 5 * 3 * 2 * m.n_layer);          // every block has tensors
  EXPECT_DOUBLE_EQ(checkpoint_seconds(m, 1, WriteRates{}, 1e-3), 0.0);  // not measured
}

// Rates measured on one backend never price a job on the other (GPU profiling, issue 17).
TEST(CostModel, RefusesACalibrationOfAnotherBackend) {
  Calibration cpu = nominal_calibration();
  EXPECT_NO_THROW(estimate_cost(small_model(), small_train(), ConfigSpec{"ddp", {}, 1, 1}, cpu));
  EXPECT_THROW(estimate_cost(small_model(), small_train(), ConfigSpec{"ddp", {}, 1, 1}, cpu, 0, 0,
                             DeviceKind::kCuda),
               Error);
  Calibration gpu = nominal_calibration();
  gpu.device = "cuda: NVIDIA H200";
  EXPECT_NO_THROW(estimate_cost(small_model(), small_train(), ConfigSpec{"ddp", {}, 1, 1}, gpu, 0,
                                0, DeviceKind::kCuda));
  EXPECT_THROW(estimate_cost(small_model(), small_train(), ConfigSpec{"ddp", {}, 1, 1}, gpu),
               Error);
}

// A GEMM measured at its exact shape is timed as measured; others by their FLOPs; records
// written before GPU calibration read as the CPU's.
TEST(Calibration, MeasuredShapesTimeTheirGemms) {
  Calibration c = nominal_calibration();
  const GemmShape measured{64, 32, 96};
  c.gemm_shapes.push_back(GemmShapeTime{measured, 1.5e-3});
  EXPECT_DOUBLE_EQ(c.gemm_seconds(measured), 1.5e-3);
  EXPECT_DOUBLE_EQ(c.gemm_seconds(GemmShape{64, 96, 32}), c.gemm_seconds(2.0 * 64 * 96 * 32));
  nlohmann::json j = nominal_calibration().to_json();
  j.erase("device");
  j.erase("timer");
  j.erase("gemm_shapes");
  j.erase("contended_sync_s");
  j.erase("checkpoint_writes");
  const Calibration old = Calibration::from_json(j);
  EXPECT_EQ(old.device, "cpu");
  EXPECT_EQ(old.timer, "steady_clock");
  EXPECT_TRUE(old.gemm_shapes.empty());
  EXPECT_TRUE(old.contended_sync_s.empty());  // probed again by the next trials
  EXPECT_TRUE(old.checkpoint_writes.empty());
}
