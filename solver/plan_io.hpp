// The JSON contracts of DESIGN.md: instance files in (`saturn plan --instance`), plans out and
// back in (the executor and re-planning read them).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "solver/problem.hpp"

namespace saturn::solver {

// Strict: unknown keys, wrong types and missing required fields are SolverErrors naming
// `where` (usually the file name) and the field, e.g. "inst.json: jobs[2].configs[0].time_s:
// missing". Optional extras beyond the contract: a job's "steps" (then a configuration may
// give "step_time_s" instead of "time_s"), a configuration's "source".
Problem instance_from_json(const nlohmann::json& j, const std::string& where);
Problem read_instance(const std::string& path);
nlohmann::ordered_json instance_to_json(const Problem& problem);

// The plan contract. Beyond it each job carries "config" (its index in the instance) so that a
// plan reads back unambiguously, and "solver" carries the MILP's own status and slot.
// Keys in the contract's order.
nlohmann::ordered_json plan_to_json(const Problem& problem, const Plan& plan);
Plan plan_from_json(const Problem& problem, const nlohmann::json& j, const std::string& where);

// Writes text to a file (temporary name, then rename). Throws SolverError on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace saturn::solver
