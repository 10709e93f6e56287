// The profile store: HDF5 round trip, merging with what another run wrote, atomic replacement,
// keys that ignore learning rate and seed.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/core/error.hpp"
#include "runtime/profile/store.hpp"

namespace fs = std::filesystem;
using namespace saturn;
using namespace saturn::profile;

namespace {

fs::path temp_dir(const char* name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("saturn-{}-{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

Hardware some_hardware() {
  Hardware h;
  h.cpu_model = "Test CPU";
  h.cores = 8;
  h.threads_per_rank = 2;
  h.blas = "Haswell";
  h.mpi = "Open MPI v4.1.4";
  h.ranks_per_node = {4, 4};
  return h;
}

ProfileEntry some_entry(const std::string& strategy, int degree, bool measured) {
  ModelConfig m;
  TrainConfig t;
  ProfileEntry e;
  e.key.signature = signature_of(m, t);
  e.key.config = ConfigSpec{strategy, {"recompute=true"}, degree, 1};
  e.key.hardware = some_hardware().id();
  e.model_name = "small";
  e.estimate.step_s = 0.125 * degree;
  e.estimate.device_bytes = 123456789;
  e.estimate.comm_bytes = 987654321;
  e.estimate.flops = 1.5e12;
  e.estimate.micro_batch = 4;
  e.estimate.micro_batches = 2;
  e.estimate.layout = "dp=2";
  e.estimated_utc = "2025-01-01T00:00:00Z";
  if (measured) {
    Measurement x;
    x.step_s = 0.25;
    x.step_min_s = 0.2;
    x.step_max_s = 0.3;
    x.steps = 3;
    x.peak_device_bytes = 123456000;
    x.device_capacity = 1 << 30;
    x.concurrent = true;
    x.setup_s = 0.375;
    x.sync_s = 0.0625;
    x.measured_utc = "2025-01-02T00:00:00Z";
    e.measured = x;
  }
  return e;
}

}  // namespace

TEST(ProfileStore, RoundTripsThroughHdf5) {
  const fs::path dir = temp_dir("store-rt");
  ProfileStore s;
  s.put(some_entry("fsdp", 2, true));
  s.put(some_entry("ddp", 4, false));
  Calibration c = nominal_calibration();
  c.hardware_id = some_hardware().id();
  c.links["allreduce"].push_back(LinkFit{4, true, 1e-5, 3e-10, 0.1});
  s.put_hardware(HardwareRecord{some_hardware(), c});
  s.save(dir / "p.h5");
  // Written atomically: no temporary file is left behind.
  for (const auto& f : fs::directory_iterator(dir))
    EXPECT_EQ(f.path().filename(), "p.h5") << f.path();

  const ProfileStore r = ProfileStore::load(dir / "p.h5");
  ASSERT_EQ(r.entries().size(), 2u);
  const ProfileEntry want = some_entry("fsdp", 2, true);
  const ProfileEntry* got = r.find(want.key.id());
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->key.text(), want.key.text());
  EXPECT_EQ(got->key.config.knobs, want.key.config.knobs);
  EXPECT_DOUBLE_EQ(got->estimate.step_s, want.estimate.step_s);
  EXPECT_EQ(got->estimate.device_bytes, want.estimate.device_bytes);
  EXPECT_EQ(got->estimate.layout, "dp=2");
  ASSERT_TRUE(got->measured.has_value());
  EXPECT_DOUBLE_EQ(got->measured->step_s, 0.25);
  EXPECT_EQ(got->measured->peak_device_bytes, 123456000u);
  EXPECT_EQ(got->measured->device_capacity, std::size_t{1} << 30);
  EXPECT_TRUE(got->measured->concurrent);
  EXPECT_DOUBLE_EQ(got->measured->setup_s, 0.375);
  EXPECT_DOUBLE_EQ(got->measured->sync_s, 0.0625);
  EXPECT_FALSE(r.find(some_entry("ddp", 4, false).key.id())->measured.has_value());
  const HardwareRecord* hw = r.hardware(some_hardware().id());
  ASSERT_NE(hw, nullptr);
  EXPECT_EQ(hw->hardware.ranks_per_node, (std::vector<int>{4, 4}));
  ASSERT_TRUE(hw->calibration.has_value());
  EXPECT_TRUE(hw->calibration->has_inter_node());
  // The text form (what rank 0 broadcasts) round-trips too.
  EXPECT_EQ(ProfileStore::from_text(r.to_text()).to_text(), r.to_text());
  fs::remove_all(dir);
}

// A trial stored before trials timed their set-up loads, its set-up unmeasured (0).
TEST(ProfileStore, ReadsATrialStoredWithoutItsSetUpTime) {
  const fs::path dir = temp_dir("store-old");
  ProfileStore s;
  const ProfileEntry e = some_entry("fsdp", 2, true);
  s.put(e);
  s.save(dir / "p.h5");
  {
    const hid_t f = H5Fopen((dir / "p.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    const hid_t g = H5Gopen2(f, ("/profiles/" + e.key.id()).c_str(), H5P_DEFAULT);
    ASSERT_GE(g, 0);
    EXPECT_GE(H5Adelete(g, "trial_setup_s"), 0);
    EXPECT_GE(H5Adelete(g, "trial_sync_s"), 0);
    H5Gclose(g);
    H5Fclose(f);
  }
  const ProfileStore r = ProfileStore::load(dir / "p.h5");
  const ProfileEntry* got = r.find(e.key.id());
  ASSERT_NE(got, nullptr);
  ASSERT_TRUE(got->measured.has_value());
  EXPECT_DOUBLE_EQ(got->measured->setup_s, 0.0);
  EXPECT_DOUBLE_EQ(got->measured->sync_s, 0.0);
  EXPECT_DOUBLE_EQ(got->measured->step_s, 0.25);
  fs::remove_all(dir);
}

TEST(ProfileStore, SaveMergesWhatAnotherRunWrote) {
  const fs::path dir = temp_dir("store-merge");
  ProfileStore a, b;
  a.put(some_entry("fsdp", 2, false));
  b.put(some_entry("fsdp", 2, true));  // the other run measured it
  b.put(some_entry("pipeline", 2, true));
  b.save(dir / "p.h5");
  a.save(dir / "p.h5");
  const ProfileStore r = ProfileStore::load(dir / "p.h5");
  EXPECT_EQ(r.entries().size(), 2u);
  EXPECT_TRUE(r.find(some_entry("fsdp", 2, false).key.id())->measured.has_value());
  fs::remove_all(dir);
}

TEST(ProfileStore, AbsentFileIsEmptyAndForeignFileIsAnError) {
  const fs::path dir = temp_dir("store-bad");
  EXPECT_TRUE(ProfileStore::load(dir / "none.h5").entries().empty());
  std::ofstream(dir / "junk.h5") << "not hdf5";
  EXPECT_THROW(ProfileStore::load(dir / "junk.h5"), IoError);
  fs::remove_all(dir);
}

TEST(ProfileStore, SignatureIgnoresLearningRateSeedAndSteps) {
  ModelConfig m;
  TrainConfig a, b;
  b.optimizer.lr = 1e-2;
  b.seed = 99;
  b.steps = 5000;
  b.schedule.warmup = 7;
  EXPECT_EQ(signature_of(m, a), signature_of(m, b));
  b.batch_size = 32;
  EXPECT_NE(signature_of(m, a), signature_of(m, b));
  TrainConfig c;
  c.seq_len = 64;
  EXPECT_NE(signature_of(m, a), signature_of(m, c));
  TrainConfig r;  // reproducible jobs are profiled apart
  r.reproducible = true;
  EXPECT_NE(signature_of(m, a), signature_of(m, r));
  TrainConfig p;  // so are jobs packed without cross-attention (block-diagonal attention)
  p.packing.cross_attention = false;
  EXPECT_NE(signature_of(m, a), signature_of(m, p));
  EXPECT_EQ(signature_of(m, a).find("nocross"), std::string::npos);  // old stores' keys kept
}

TEST(Hardware, FingerprintIdCoversTheLayout) {
  Hardware a = some_hardware(), b = some_hardware();
  EXPECT_EQ(a.id(), b.id());
  b.ranks_per_node = {8};
  EXPECT_NE(a.id(), b.id());
  b = some_hardware();
  b.threads_per_rank = 1;
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(Hardware::from_json(a.to_json()).id(), a.id());
  EXPECT_THROW(Hardware::from_json(nlohmann::json{{"cores", 2}}), InputError);
}
