#include "runtime/train/step_control.hpp"

namespace saturn {

StepDecision agree_step(comm::Communicator& comm, const StepRequests& mine) {
  std::int32_t v[4] = {mine.stop ? 1 : 0, mine.signal, mine.early_stop ? 1 : 0, mine.fault ? 1 : 0};
  comm.allreduce(v, 4, comm::ReduceOp::kMax);
  StepDecision d;
  d.signal = v[1];
  d.early_stop = v[2] != 0;
  d.fault = v[3] != 0;
  d.stop = v[0] != 0 || d.signal != 0 || d.early_stop;
  return d;
}

}  // namespace saturn
