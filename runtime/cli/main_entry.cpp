// The entry point of `saturn` (and of saturn_emu, the same program over the emulated CUDA
// backend): everything is in run_main.
#include "runtime/backend/cuda_provider.hpp"
#include "runtime/cli/commands.hpp"

int main(int argc, char** argv) {
  saturn::install_cuda_provider();
  return saturn::cli::run_main(argc, argv);
}
