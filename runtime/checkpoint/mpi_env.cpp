#include "runtime/checkpoint/mpi_env.hpp"

#include <mpi.h>

#include <cstdlib>

namespace saturn::ckpt {

namespace {

bool init_if_needed() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized || finalized) return false;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  return true;
}

void finalize_if_running() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

MpiGuard::MpiGuard() : owns_(init_if_needed()) {}

MpiGuard::~MpiGuard() {
  if (owns_) finalize_if_running();
}

void ensure_mpi() {
  if (init_if_needed()) std::atexit(finalize_if_running);
}

}  // namespace saturn::ckpt
