// MPI for commands that may run as a plain process (`saturn train`, `saturn ckpt`): parallel
// HDF5 needs MPI initialised even on one rank. Whoever initialised MPI finalises it.
#pragma once

namespace saturn::ckpt {

// Initialises MPI (MPI_Init_thread, FUNNELED: one thread calls MPI and HDF5) unless it already
// is; the destructor finalises it only if this guard initialised it.
class MpiGuard {
 public:
  MpiGuard();
  ~MpiGuard();
  MpiGuard(const MpiGuard&) = delete;
  MpiGuard& operator=(const MpiGuard&) = delete;
  bool owns() const { return owns_; }

 private:
  bool owns_ = false;
};

// For library callers without a guard: initialises MPI if needed and finalises it at exit.
void ensure_mpi();

}  // namespace saturn::ckpt
