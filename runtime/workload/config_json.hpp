// JSON forms of the model and training configuration of a job, as stored in checkpoint
// attributes (model_config, train_config), plans and run summaries. Reading is lenient about
// missing keys (they take the defaults of runtime/model/config.hpp, so older files stay
// readable) and strict about types.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/model/config.hpp"
#include "runtime/workload/workload.hpp"

namespace saturn {

nlohmann::json to_json(const ModelConfig& model);
nlohmann::json to_json(const TrainConfig& train);
// {"id", "model_name", "model": {...}, "train": {...}}
nlohmann::json to_json(const JobSpec& job);

// Throw InputError naming the field (e.g. "model_config.n_head: expected a number").
ModelConfig model_config_from_json(const nlohmann::json& j);
TrainConfig train_config_from_json(const nlohmann::json& j);
JobSpec job_spec_from_json(const nlohmann::json& j);

// nlohmann::json's ADL hooks, so that `json j = cfg;` and `j.get<ModelConfig>()` work too.
void to_json(nlohmann::json& j, const ModelConfig& model);
void from_json(const nlohmann::json& j, ModelConfig& model);
void to_json(nlohmann::json& j, const TrainConfig& train);
void from_json(const nlohmann::json& j, TrainConfig& train);
void to_json(nlohmann::json& j, const JobSpec& job);
void from_json(const nlohmann::json& j, JobSpec& job);

}  // namespace saturn
