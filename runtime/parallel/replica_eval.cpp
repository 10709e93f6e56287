#include "runtime/parallel/replica_eval.hpp"

namespace saturn::parallel {

double replica_eval_loss(const data::Batch& batch, int rank, int size, std::int64_t micro,
                         Model& model, TokenStage& tokens, DeviceSum& loss,
                         comm::Communicator& control) {
  const RowRange rows = shard_rows(batch.batch_size, rank, size);
  loss.reset();
  tokens.for_each_micro(batch, rows.begin, rows.count, micro, true,
                        [&](std::int64_t k, double weight) {
                          model.set_segments(tokens.segments(k));
                          model.forward(tokens.inputs(k), tokens.targets(k));
                          loss.add(model.loss(), weight);
                        });
  double sum = loss.read();
  control.allreduce(&sum, 1, comm::ReduceOp::kSum);
  return sum / loss_scale(batch).divisor;
}

}  // namespace saturn::parallel
