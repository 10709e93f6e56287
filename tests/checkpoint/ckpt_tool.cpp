// Helper of the checkpoint scripts (fault injection, h5py and safetensors interoperability).
// Runs as one process or under mpirun; every rank holds a part of a small model's state.
//
//   ckpt_tool write-known FILE ARCH GEN     state with known_value(kind, tensor, flat, GEN)
//                                           (flat ranges per rank: FSDP-like, cutting rows)
//   ckpt_tool save JOB_DIR STEP             a step checkpoint (row blocks per rank), GEN = STEP
//   ckpt_tool load JOB_DIR EXPECT_STEP      loads the newest valid one (column blocks per rank);
//                                           exit 0 iff it is EXPECT_STEP with the right values
//   ckpt_tool corrupt FILE DATASET          flips one bit in the dataset's data (one process)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "runtime/checkpoint/store.hpp"
#include "tests/checkpoint/ckpt_test_util.hpp"

namespace {

using namespace saturn;
using namespace saturn::ckpt;
using namespace saturn::ckpt::testing;

int run(int argc, char** argv, int rank, int size) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write-known" && argc == 5) {
    const ModelConfig model = small_model(parse_arch(argv[3]));
    const ParameterLayout layout(model);
    const int gen = std::atoi(argv[4]);
    OwnedState s = make_state(layout, Decomp::kFlat, rank, size);
    fill_known(s, gen);
    write_checkpoint(MPI_COMM_WORLD, argv[2], meta_for(model, gen, size), s.view());
    return 0;
  }
  const ModelConfig model = small_model(Arch::kGpt2);
  const ParameterLayout layout(model);
  if (mode == "save" && argc == 4) {
    const int step = std::atoi(argv[3]);
    OwnedState s = make_state(layout, Decomp::kRows, rank, size);
    fill_known(s, step);
    save_step_checkpoint(MPI_COMM_WORLD, argv[2], meta_for(model, step, size), s.view());
    return 0;
  }
  if (mode == "load" && argc == 4) {
    const int expect = std::atoi(argv[3]);
    OwnedState s = make_state(layout, Decomp::kCols, rank, size);
    const auto loaded = load_newest_valid(MPI_COMM_WORLD, argv[2], s.view());
    const int step = loaded ? static_cast<int>(loaded->meta.step) : -1;
    const std::int64_t bad = count_mismatches(s, step);
    std::int64_t all_bad = 0;
    MPI_Allreduce(&bad, &all_bad, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
      std::printf("loaded %s (step %d), %lld wrong elements\n",
                  loaded ? loaded->file.filename().c_str() : "nothing", step,
                  static_cast<long long>(all_bad));
    return step == expect && all_bad == 0 ? 0 : 1;
  }
  if (mode == "corrupt" && argc == 4) {
    const std::uint64_t off = dataset_offset(argv[2], argv[3]);
    if (off == 0) {
      std::fprintf(stderr, "no dataset %s in %s\n", argv[3], argv[2]);
      return 1;
    }
    flip_byte(argv[2], off + 5);
    return 0;
  }
  std::fprintf(stderr,
               "usage: ckpt_tool write-known FILE ARCH GEN | save JOB_DIR STEP | "
               "load JOB_DIR EXPECT_STEP | corrupt FILE DATASET\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int rc = 0;
  try {
    rc = run(argc, argv, rank, size);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ckpt_tool: rank %d: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
