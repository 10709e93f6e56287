#include "runtime/comm/comm_pair.hpp"

#include "runtime/comm/mpi_communicator.hpp"
#include "runtime/comm/staged_communicator.hpp"
#include "runtime/core/error.hpp"

namespace saturn::comm {

CommPair::CommPair(std::unique_ptr<Communicator> control, std::unique_ptr<Communicator> data)
    : owned_control_(std::move(control)),
      owned_data_(std::move(data)),
      control_(owned_control_.get()),
      data_(owned_data_.get()) {
  if (control_ == nullptr || data_ == nullptr) throw Error("CommPair needs two communicators");
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

CommPair::CommPair(Communicator& control, Communicator& data) : control_(&control), data_(&data) {
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

CommPair::CommPair(Communicator& control, std::unique_ptr<Communicator> data)
    : owned_data_(std::move(data)), control_(&control), data_(owned_data_.get()) {
  if (data_ == nullptr) throw Error("CommPair needs a data communicator");
  if (control_->size() != data_->size() || control_->rank() != data_->rank())
    throw Error("CommPair: the control and data communicators span different ranks");
}

std::unique_ptr<CommPair> CommPair::split(int color, int key) {
  auto c = control_->split(color, key);
  auto d = data_ == control_ ? nullptr : data_->split(color, key);
  if (!c) return nullptr;
  if (data_ == control_) {
    // One object for both (a one-rank CPU job): keep it one.
    auto* raw = c.get();
    auto pair = std::make_unique<CommPair>(*raw, *raw);
    pair->owned_control_ = std::move(c);
    return pair;
  }
  return std::make_unique<CommPair>(std::move(c), std::move(d));
}

std::unique_ptr<CommPair> make_comm_pair(Communicator& control, Device& device) {
  std::unique_ptr<Communicator> data;
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(&control)) {
    data = mpi->duplicate();  // its own MPI context: data traffic never matches control traffic
    if (!device.memory().host_accessible())
      data = std::make_unique<StagedCommunicator>(device, std::move(data));
  } else if (control.size() == 1) {
    data = std::make_unique<SelfCommunicator>(&device);
  } else {
    throw Error("make_comm_pair: a multi-rank control communicator that is not MPI");
  }
  return std::make_unique<CommPair>(control, std::move(data));
}

}  // namespace saturn::comm
