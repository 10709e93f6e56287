// What each dataset of a checkpoint costs where the run writes it (issue 34): a real probe
// checkpoint written on this rank alone, timed, and removed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/exec/checkpoint_probe.hpp"
#include "runtime/profile/file_system.hpp"

namespace saturn::exec {
namespace {

namespace fs = std::filesystem;

TEST(CheckpointProbe, PricesEachDatasetAndLeavesNothing) {
  const fs::path dir = fs::temp_directory_path() / ("saturn-probe-" + std::to_string(::getpid()));
  const profile::WriteRates rates = profile::measure_write_rates(dir);
  const double dataset_s = checkpoint_dataset_seconds(dir, rates);
  // A dataset's header, attributes and checksum: more than nothing, less than 10 ms on any disk.
  EXPECT_GT(dataset_s, 0.0);
  EXPECT_LT(dataset_s, 0.01);
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe checkpoint is removed";
  fs::remove_all(dir);
}

TEST(CheckpointProbe, AnUnwritableDirectoryIsAnIoError) {
  const fs::path file =
      fs::temp_directory_path() / ("saturn-probe-file-" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  EXPECT_THROW(checkpoint_dataset_seconds(file, profile::WriteRates{1e-3, 1e8, 0}), IoError);
  fs::remove(file);
}

}  // namespace
}  // namespace saturn::exec
