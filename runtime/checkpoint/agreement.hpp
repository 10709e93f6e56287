// Internal to checkpoints: how the ranks of a collective write or read agree on failure. A
// phase never throws between collective HDF5 calls; each rank records its own outcome in a
// Status, and at the phase's end every rank calls agree(): if any rank failed, all throw the
// lowest failing rank's error, so no rank is left waiting in a collective.
#pragma once

#include <mpi.h>

#include <exception>
#include <filesystem>
#include <string>

#include "runtime/checkpoint/checkpoint.hpp"

namespace saturn::ckpt::detail {

int rank_of(MPI_Comm comm);
int size_of(MPI_Comm comm);
// Broadcasts `s` from `root` (length, then bytes).
void bcast_string(MPI_Comm comm, int root, std::string& s);

// A rank's outcome of one phase.
struct Status {
  bool failed = false;
  // The failure is the caller's input, not the file (an InputError, e.g. a checkpoint of
  // another job): agree() throws InputError then.
  bool bad_input = false;
  std::string dataset;
  std::string message;
  void fail(std::string ds, std::string msg, bool input = false) {
    if (failed) return;  // keep the first cause
    failed = true;
    bad_input = input;
    dataset = std::move(ds);
    message = std::move(msg);
  }
};

// Runs f, recording an exception as this rank's failure.
template <typename F>
void attempt(Status& st, const std::string& dataset, F&& f) {
  if (st.failed) return;
  try {
    f();
  } catch (const std::exception& e) {
    st.fail(dataset, e.what());
  }
}

// Collective. If any rank failed, every rank throws the lowest failing rank's error: a
// CheckpointError naming `file` and the dataset, or for bad input an InputError naming `file`.
void agree(MPI_Comm comm, const std::filesystem::path& file, const Status& st);

}  // namespace saturn::ckpt::detail
