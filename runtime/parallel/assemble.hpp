// Whole canonical state from the slices ranks hold, and back: for tests, tools and the final
// parameters of a run. (Checkpoints do not need this: they write each rank's slices as
// hyperslabs directly.)
#pragma once

#include <vector>

#include "runtime/comm/communicator.hpp"
#include "runtime/model/config.hpp"
#include "runtime/parallel/canonical.hpp"

namespace saturn::parallel {

// Collective: every rank passes what it holds (export_state); `root` receives the whole
// canonical flat buffer in ParameterLayout(model) order (other ranks: empty). Only writer
// slices travel, so each element arrives once.
std::vector<float> assemble_canonical(comm::Communicator& comm, const ModelConfig& model,
                                      const StateSlices& slices, int root = 0);

// Fills every slice's data with its box of the canonical flat buffer (ParameterLayout(model)
// order); the counterpart of import for a caller that holds the whole state.
void fill_from_canonical(const ModelConfig& model, const std::vector<float>& canonical,
                         const StateSlices& slices);

}  // namespace saturn::parallel
