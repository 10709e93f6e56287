// The two communicators of a job (or of a sub-group of its ranks), each for its purpose:
//  - control: host scalars over MPI (losses, norms, agreement on failure), always host memory;
//  - data: device buffers (gradients, parameters, activations), in the device's element types
//    (bf16 included): MPI directly on the CPU backend, MPI staged through host memory on a GPU
//    (StagedCommunicator) or NCCL on a GPU (see make_comm_pair).
// Both span the same ranks in the same order.
#pragma once

#include <memory>

#include "runtime/backend/device.hpp"
#include "runtime/comm/communicator.hpp"

namespace saturn::comm {

class CommPair {
 public:
  // Owns both.
  CommPair(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> data);
  // Borrows both (they may be one object, e.g. a SelfCommunicator for a one-rank CPU job).
  CommPair(Communicator& control, Communicator& data);
  // Borrows control, owns data.
  CommPair(Communicator& control, std::unique_ptr<Communicator> data);
  CommPair(const CommPair&) = delete;
  CommPair& operator=(const CommPair&) = delete;

  Communicator& control() { return *control_; }
  Communicator& data() { return *data_; }
  int rank() const { return control_->rank(); }
  int size() const { return control_->size(); }
  // Collective over both: ranks passing the same color >= 0 form a new pair, ordered by key
  // (then rank); color < 0 returns nullptr.
  std::unique_ptr<CommPair> split(int color, int key);

 private:
  std::unique_ptr<Communicator> owned_control_, owned_data_;
  Communicator* control_;
  Communicator* data_;
};

// The pair for a job whose ranks form `control` (borrowed; an MpiCommunicator or a
// SelfCommunicator) training on `device` (collective over control). The data communicator is
// a private duplicate of the control one on host memory (CPU). On a device whose memory is not
// host memory (CUDA) it is NCCL when the build has it (real or the emulator's fake) and every
// rank has its own GPU ((host, PCI bus id) gathered over control), else the control one's
// duplicate staged through host memory; SATURN_DATA_COMM=auto|nccl|staged overrides (nccl where
// impossible: InputError naming why). The choice and its reason are logged by the job's rank 0.
std::unique_ptr<CommPair> make_comm_pair(Communicator& control, Device& device);

enum class DataCommChoice { kAuto, kNccl, kStaged };
// SATURN_DATA_COMM (unset: auto); InputError for another value.
DataCommChoice data_comm_choice_from_env();

}  // namespace saturn::comm
