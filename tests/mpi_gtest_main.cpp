// MPI-aware GoogleTest main: only rank 0 prints results, and the process exit code is the
// maximum over ranks, so a failure on any rank fails the test executable.
#include <gtest/gtest.h>
#include <mpi.h>

#include "runtime/backend/cuda_provider.hpp"

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
