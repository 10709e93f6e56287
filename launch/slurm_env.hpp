// The Slurm job environment, parsed once into a struct. Everything takes the environment as a
// map, so tests can feed recorded environments without touching the real one.
//
// Recorded on Slurm 22.05 (tests/launch has the full records): the batch shell has SLURM_JOB_ID,
// SLURM_PROCID=0 and SLURM_LOCALID=0 but no SLURM_STEP_ID; srun tasks have SLURM_STEP_ID and their
// own SLURM_PROCID/SLURM_LOCALID; ranks started by mpirun inside the allocation inherit
// SLURM_LOCALID=0 (and SLURM_PROCID = node index across nodes), so those two say nothing there.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace saturn::launch {

using Environment = std::map<std::string, std::string, std::less<>>;

// A copy of this process's environment.
Environment current_environment();

// The value of `name`, or nullptr when unset.
const std::string* env_get(const Environment& env, std::string_view name);

struct SlurmArray {
  std::string job_id;  // SLURM_ARRAY_JOB_ID
  int task_id = 0;     // SLURM_ARRAY_TASK_ID
  int task_count = 0;  // SLURM_ARRAY_TASK_COUNT (0 when unset)
  int task_min = 0;    // SLURM_ARRAY_TASK_MIN
  int task_max = 0;    // SLURM_ARRAY_TASK_MAX
};

struct SlurmEnv {
  bool in_allocation = false;  // SLURM_JOB_ID is set: a batch script, salloc shell or srun task
  bool in_step = false;        // SLURM_STEP_ID is set: a task of an srun step (or its children)
  std::string job_id;
  std::string job_name;
  std::string partition;
  std::string nodelist;               // SLURM_JOB_NODELIST as given (compressed)
  std::vector<std::string> nodes;     // expanded
  int num_nodes = 0;                  // SLURM_JOB_NUM_NODES (or SLURM_NNODES, or nodes.size())
  int ntasks = -1;                    // SLURM_NTASKS (or SLURM_NPROCS); -1 when unset
  std::vector<int> tasks_per_node;    // SLURM_TASKS_PER_NODE expanded, one entry per node
  std::vector<int> cpus_per_node;     // SLURM_JOB_CPUS_PER_NODE expanded, one entry per node
  int cpus_per_task = -1;             // SLURM_CPUS_PER_TASK (only set with -c); -1 when unset
  int gpus_on_node = -1;              // SLURM_GPUS_ON_NODE; -1 when unset
  int gpus_per_node = -1;             // SLURM_GPUS_PER_NODE count; -1 when unset
  std::string gpu_type;               // "a100" from SLURM_GPUS_PER_NODE=a100:4; empty if none
  std::vector<std::string> job_gpus;  // SLURM_JOB_GPUS: global GPU ids on this node
  int procid = -1;                    // SLURM_PROCID; -1 when unset
  int localid = -1;                   // SLURM_LOCALID; -1 when unset
  int nodeid = -1;                    // SLURM_NODEID; -1 when unset
  int restart_count = 0;              // SLURM_RESTART_COUNT; unset (first run) = 0
  std::string submit_dir;             // SLURM_SUBMIT_DIR
  std::optional<SlurmArray> array;    // when SLURM_ARRAY_JOB_ID is set
};

// Parses the Slurm variables of `env`. Outside an allocation it returns in_allocation = false
// and defaults. Throws InputError naming the variable when one is malformed or when the
// per-node lists disagree with the node count.
SlurmEnv parse_slurm_env(const Environment& env);

// Expands Slurm's compressed per-node counts: "2(x3),1" -> {2, 2, 2, 1}; "4" -> {4}.
// `what` names the variable in error messages.
std::vector<int> expand_per_node_counts(std::string_view text, std::string_view what);

struct GpuCount {
  int count = 0;
  std::string type;  // empty when the spec names none (or names only "gpu")
};
// Parses a GPU count as Slurm writes it: "2", "gpu:2", "a100:4", "gpu:a100:4", and comma lists
// of these ("a100:2,v100:1" sums to 3 with an empty type).
GpuCount parse_gpu_count(std::string_view text, std::string_view what);

}  // namespace saturn::launch
