// MPI-aware GoogleTest main: only rank 0 prints results, and the process exit code is the
// maximum over ranks, so a failure on any rank fails the test executable. Another rank prints
// its failures alone (which test, where, the message), so that a failure rank 0 did not see can
// be diagnosed from the log.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>

#include "runtime/backend/cuda_provider.hpp"

namespace {

class OtherRankFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit OtherRankFailures(int rank) : rank_(rank) {}
  // The test's name is kept here: GoogleTest holds its lock while it reports a result, so the
  // report must not ask it (current_test_info) again.
  void OnTestStart(const ::testing::TestInfo& t) override {
    test_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s: %s:%d: %s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  saturn::install_cuda_provider();  // the one the test executable links (saturn_add_test)
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    delete listeners.Release(listeners.default_xml_generator());
    listeners.Append(new OtherRankFailures(rank));
  }
  int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && local == 0 && global != 0) {
    fprintf(stderr, "[saturn] a test failed on another rank (rank 0 passed)\n");
  }
  MPI_Finalize();
  return global;
}
