// The evaluation of a strategy whose ranks each hold the whole model (ddp, zero2): the mean
// loss of a batch, each rank forwarding its rows in micro-batches, the sums reduced.
#pragma once

#include <cstdint>

#include "runtime/comm/communicator.hpp"
#include "runtime/data/loader.hpp"
#include "runtime/model/model.hpp"
#include "runtime/parallel/common.hpp"
#include "runtime/parallel/tokens.hpp"

namespace saturn::parallel {

// The mean loss over the trained targets of `batch` (tokens.hpp, loss_scale) over the `size`
// ranks of `control`; this rank (`rank`) forwards its shard_rows in micro-batches of `micro`.
// Every rank of `control` calls it.
double replica_eval_loss(const data::Batch& batch, int rank, int size, std::int64_t micro,
                         Model& model, TokenStage& tokens, DeviceSum& loss,
                         comm::Communicator& control);

}  // namespace saturn::parallel
