// The run directory's write rates (issue 34): what a checkpoint of some bytes costs there.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/error.hpp"
#include "runtime/profile/file_system.hpp"

namespace saturn::profile {
namespace {

namespace fs = std::filesystem;

TEST(WriteRates, MeasuredWhereTheCheckpointsGoAndLeavesNothing) {
  const fs::path dir =
      fs::temp_directory_path() / ("saturn-fs-" + std::to_string(::getpid())) / "jobs";
  const WriteRates r = measure_write_rates(dir);  // creates it, as a new run directory's
  EXPECT_TRUE(r.measured());
  EXPECT_GT(r.latency_s, 0.0);
  EXPECT_GT(r.bytes_per_s, 1e6);  // any disk, even a loaded one, writes 1 MB/s
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir)) << "the probe files are removed";
  EXPECT_DOUBLE_EQ(r.seconds(0), r.latency_s);
  EXPECT_NEAR(r.seconds(1e9) - r.seconds(0), 1e9 / r.bytes_per_s, 1e-9);
  EXPECT_DOUBLE_EQ(WriteRates{}.seconds(1e9), 0.0);  // not measured: not priced
  WriteRates with_datasets = r;
  with_datasets.dataset_s = 1e-4;
  EXPECT_NEAR(with_datasets.seconds(1e9, 300) - r.seconds(1e9), 300 * 1e-4, 1e-12);
  fs::remove_all(dir.parent_path());
}

TEST(WriteRates, FileSystemIdNamesTheFileSystemOfTheNearestExistingDirectory) {
  const fs::path tmp = fs::temp_directory_path();
  const std::string id = file_system_id(tmp);
  EXPECT_EQ(id.rfind("fs-", 0), 0u) << id;
  // A run directory not made yet is on its parent's file system.
  EXPECT_EQ(file_system_id(tmp / "saturn-not-made-yet" / "jobs"), id);
  EXPECT_EQ(file_system_id("relative/not/made"), file_system_id(fs::current_path()));
  EXPECT_NE(file_system_id("/proc"), id) << "procfs is another file system";
}

TEST(WriteRates, AnUnwritableDirectoryIsAnIoErrorNamingIt) {
  const fs::path file =
      fs::temp_directory_path() / ("saturn-fs-file-" + std::to_string(::getpid()));
  std::ofstream(file) << "x";
  try {
    measure_write_rates(file / "jobs");  // under a regular file
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  fs::remove(file);
}

}  // namespace
}  // namespace saturn::profile
