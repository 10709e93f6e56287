// The first field in which two models differ: one list of what makes a model this model (its
// tensors' shapes and the function they compute), for every place that must tell a model from
// another (a checkpoint against the job resuming from it, an export's `--from` origin against
// the checkpoint). The Hugging Face class and the origin's extra config.json fields compute
// nothing and are not compared.
#pragma once

#include <optional>
#include <string>

#include "runtime/model/config.hpp"

namespace saturn {

struct ModelDifference {
  std::string field;  // as ModelConfig and the workload name it (n_head, sliding_window, ...)
  std::string first, second;  // the two values, as text
};

std::optional<ModelDifference> first_difference(const ModelConfig& a, const ModelConfig& b);

}  // namespace saturn
