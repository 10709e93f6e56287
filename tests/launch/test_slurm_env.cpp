// Slurm environment parsing, on environments recorded from a real Slurm 22.05 (local-slurm.sh:
// one node "vm", and two virtual nodes node[01-02], 2 fake GPUs each).
#include <gtest/gtest.h>

#include "launch/slurm_env.hpp"
#include "runtime/core/error.hpp"
#include "tests/launch/recorded_env.hpp"

namespace saturn::launch {
namespace {

std::string error_of(const Environment& env) {
  try {
    parse_slurm_env(env);
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InputError";
  return {};
}

TEST(SlurmEnv, OutsideSlurm) {
  const SlurmEnv s = parse_slurm_env({{"HOME", "/root"}});
  EXPECT_FALSE(s.in_allocation);
  EXPECT_FALSE(s.in_step);
  EXPECT_TRUE(s.nodes.empty());
  EXPECT_EQ(s.ntasks, -1);
  EXPECT_EQ(s.restart_count, 0);
  EXPECT_EQ(s.procid, -1);
  EXPECT_EQ(s.localid, -1);
  EXPECT_EQ(s.gpus_on_node, -1);
  EXPECT_FALSE(s.array);
}

TEST(SlurmEnv, RecordedBatchShellOneNode) {
  const SlurmEnv s = parse_slurm_env(recorded::batch_one_node());
  EXPECT_TRUE(s.in_allocation);
  EXPECT_FALSE(s.in_step);
  EXPECT_EQ(s.job_id, "1");
  EXPECT_EQ(s.job_name, "e.sbatch");
  EXPECT_EQ(s.partition, "debug");
  EXPECT_EQ(s.nodes, std::vector<std::string>{"vm"});
  EXPECT_EQ(s.num_nodes, 1);
  EXPECT_EQ(s.ntasks, 2);
  EXPECT_EQ(s.tasks_per_node, std::vector<int>{2});
  EXPECT_EQ(s.cpus_per_node, std::vector<int>{2});
  EXPECT_EQ(s.cpus_per_task, -1);  // no -c given
  EXPECT_EQ(s.gpus_on_node, 2);
  EXPECT_EQ(s.gpus_per_node, 2);
  EXPECT_EQ(s.gpu_type, "");
  EXPECT_EQ(s.job_gpus, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(s.procid, 0);
  EXPECT_EQ(s.localid, 0);
  EXPECT_EQ(s.nodeid, 0);
  EXPECT_EQ(s.restart_count, 0);  // unset on the first run
  EXPECT_EQ(s.submit_dir, "/tmp/sl-exp/j");
}

TEST(SlurmEnv, RecordedBatchShellTwoNodes) {
  const SlurmEnv s = parse_slurm_env(recorded::batch_two_nodes());
  EXPECT_EQ(s.nodelist, "node[01-02]");
  EXPECT_EQ(s.nodes, (std::vector<std::string>{"node01", "node02"}));
  EXPECT_EQ(s.num_nodes, 2);
  EXPECT_EQ(s.ntasks, 4);
  EXPECT_EQ(s.tasks_per_node, (std::vector<int>{2, 2}));  // "2(x2)"
  EXPECT_EQ(s.cpus_per_node, (std::vector<int>{2, 2}));
  EXPECT_EQ(s.cpus_per_task, 1);
}

TEST(SlurmEnv, RecordedSrunTask) {
  const SlurmEnv s = parse_slurm_env(recorded::srun_task_two_nodes(3));
  EXPECT_TRUE(s.in_step);
  EXPECT_EQ(s.procid, 3);
  EXPECT_EQ(s.localid, 1);
  EXPECT_EQ(s.nodeid, 1);
}

TEST(SlurmEnv, RestartCountAndArray) {
  Environment env = recorded::batch_one_node();
  env["SLURM_RESTART_COUNT"] = "1";
  env["SLURM_ARRAY_JOB_ID"] = "40";
  env["SLURM_ARRAY_TASK_ID"] = "2";
  env["SLURM_ARRAY_TASK_COUNT"] = "4";
  env["SLURM_ARRAY_TASK_MIN"] = "0";
  env["SLURM_ARRAY_TASK_MAX"] = "3";
  const SlurmEnv s = parse_slurm_env(env);
  EXPECT_EQ(s.restart_count, 1);
  ASSERT_TRUE(s.array);
  EXPECT_EQ(s.array->job_id, "40");
  EXPECT_EQ(s.array->task_id, 2);
  EXPECT_EQ(s.array->task_count, 4);
  EXPECT_EQ(s.array->task_min, 0);
  EXPECT_EQ(s.array->task_max, 3);
}

TEST(SlurmEnv, CompressedPerNodeCounts) {
  EXPECT_EQ(expand_per_node_counts("2(x3),1", "V"), (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(expand_per_node_counts("4", "V"), (std::vector<int>{4}));
  EXPECT_EQ(expand_per_node_counts("2(x2)", "V"), (std::vector<int>{2, 2}));
  EXPECT_EQ(expand_per_node_counts("8,4(x2),2", "V"), (std::vector<int>{8, 4, 4, 2}));
  EXPECT_EQ(expand_per_node_counts("0", "V"), (std::vector<int>{0}));
  for (const char* bad :
       {"", "x", "2(x)", "2(3)", "2(x0)", "2(x3", "(x3)", "2,,1", "-1", "2x3", "2(x3)1"}) {
    try {
      expand_per_node_counts(bad, "SLURM_TASKS_PER_NODE");
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_TASKS_PER_NODE"), std::string::npos) << bad;
    }
  }
}

TEST(SlurmEnv, GpuCounts) {
  EXPECT_EQ(parse_gpu_count("2", "V").count, 2);
  EXPECT_EQ(parse_gpu_count("gpu:2", "V").count, 2);
  EXPECT_EQ(parse_gpu_count("gpu:2", "V").type, "");
  EXPECT_EQ(parse_gpu_count("a100:4", "V").count, 4);
  EXPECT_EQ(parse_gpu_count("a100:4", "V").type, "a100");
  EXPECT_EQ(parse_gpu_count("gpu:a100:4", "V").type, "a100");
  EXPECT_EQ(parse_gpu_count("gpu:a100:4", "V").count, 4);
  EXPECT_EQ(parse_gpu_count("a100:2,v100:1", "V").count, 3);
  EXPECT_EQ(parse_gpu_count("a100:2,v100:1", "V").type, "");
  for (const char* bad : {"", "gpu:", "a:b:c:4", "x:a100:4", "gpu:a100", "-1", "2,"})
    EXPECT_THROW(parse_gpu_count(bad, "SLURM_GPUS_PER_NODE"), InputError) << bad;

  Environment env = recorded::batch_one_node();
  env["SLURM_GPUS_PER_NODE"] = "a100:4";
  const SlurmEnv s = parse_slurm_env(env);
  EXPECT_EQ(s.gpus_per_node, 4);
  EXPECT_EQ(s.gpu_type, "a100");
}

TEST(SlurmEnv, InconsistentOrMalformedVariablesAreNamed) {
  Environment env = recorded::batch_two_nodes();
  env["SLURM_JOB_NUM_NODES"] = "3";
  EXPECT_NE(error_of(env).find("SLURM_JOB_NUM_NODES says 3"), std::string::npos);

  env = recorded::batch_two_nodes();
  env["SLURM_TASKS_PER_NODE"] = "2(x3)";
  EXPECT_NE(error_of(env).find("SLURM_TASKS_PER_NODE=\"2(x3)\" describes 3 node(s)"),
            std::string::npos);
  // Inside an srun step the variable describes the step, which may use fewer nodes.
  env["SLURM_STEP_ID"] = "0";
  env["SLURM_TASKS_PER_NODE"] = "1";
  EXPECT_NO_THROW(parse_slurm_env(env));

  env = recorded::batch_one_node();
  env["SLURM_JOB_NODELIST"] = "vm[1-";
  EXPECT_NE(error_of(env).find("SLURM_JOB_NODELIST"), std::string::npos);

  env = recorded::batch_one_node();
  env["SLURM_RESTART_COUNT"] = "one";
  EXPECT_NE(error_of(env).find("SLURM_RESTART_COUNT=\"one\""), std::string::npos);

  env = recorded::batch_one_node();
  env["SLURM_JOB_CPUS_PER_NODE"] = "2(x2)";
  EXPECT_NE(error_of(env).find("SLURM_JOB_CPUS_PER_NODE"), std::string::npos);
}

TEST(SlurmEnv, CurrentEnvironmentIsACopy) {
  const Environment env = current_environment();
  EXPECT_NE(env_get(env, "PATH"), nullptr);
  EXPECT_EQ(env_get(env, "SATURN_SURELY_UNSET_VARIABLE"), nullptr);
}

}  // namespace
}  // namespace saturn::launch
