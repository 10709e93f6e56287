// Environments recorded on Slurm 22.05.8 + Open MPI 4.1.4 (slurm/local-slurm.sh, 2 fake GPUs per
// node), trimmed to the variables Saturn reads. Batch scripts requested --ntasks-per-node=2
// --gpus-per-node=2; the two-node job also -c 1.
#pragma once

#include <string>

#include "launch/slurm_env.hpp"

namespace saturn::launch::recorded {

// `env` in the batch shell, one node "vm".
inline Environment batch_one_node() {
  return {{"CUDA_VISIBLE_DEVICES", "0,1"},
          {"GPU_DEVICE_ORDINAL", "0,1"},
          {"SLURMD_NODENAME", "vm"},
          {"SLURM_CPUS_ON_NODE", "2"},
          {"SLURM_GPUS_ON_NODE", "2"},
          {"SLURM_GPUS_PER_NODE", "2"},
          {"SLURM_JOBID", "1"},
          {"SLURM_JOB_CPUS_PER_NODE", "2"},
          {"SLURM_JOB_GPUS", "0,1"},
          {"SLURM_JOB_ID", "1"},
          {"SLURM_JOB_NAME", "e.sbatch"},
          {"SLURM_JOB_NODELIST", "vm"},
          {"SLURM_JOB_NUM_NODES", "1"},
          {"SLURM_JOB_PARTITION", "debug"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NNODES", "1"},
          {"SLURM_NODEID", "0"},
          {"SLURM_NODELIST", "vm"},
          {"SLURM_NPROCS", "2"},
          {"SLURM_NTASKS", "2"},
          {"SLURM_NTASKS_PER_NODE", "2"},
          {"SLURM_PROCID", "0"},
          {"SLURM_SUBMIT_DIR", "/tmp/sl-exp/j"},
          {"SLURM_TASKS_PER_NODE", "2"}};
}

// `env` in the batch shell of a two-node job (node[01-02]).
inline Environment batch_two_nodes() {
  return {{"CUDA_VISIBLE_DEVICES", "0,1"},
          {"SLURMD_NODENAME", "node01"},
          {"SLURM_CPUS_ON_NODE", "2"},
          {"SLURM_CPUS_PER_TASK", "1"},
          {"SLURM_GPUS_ON_NODE", "2"},
          {"SLURM_GPUS_PER_NODE", "2"},
          {"SLURM_JOB_CPUS_PER_NODE", "2(x2)"},
          {"SLURM_JOB_GPUS", "0,1"},
          {"SLURM_JOB_ID", "4"},
          {"SLURM_JOB_NAME", "e2.sbatch"},
          {"SLURM_JOB_NODELIST", "node[01-02]"},
          {"SLURM_JOB_NUM_NODES", "2"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NNODES", "2"},
          {"SLURM_NODEID", "0"},
          {"SLURM_NPROCS", "4"},
          {"SLURM_NTASKS", "4"},
          {"SLURM_PROCID", "0"},
          {"SLURM_TASKS_PER_NODE", "2(x2)"}};
}

// A rank that `mpirun -np 4` started inside the two-node batch script (world rank 0..3). Open MPI
// starts its daemon on the second node with srun, so SLURM_STEP_ID is set, and every rank has
// SLURM_LOCALID=0 and SLURM_PROCID = its node's index: the pitfall binding must avoid.
inline Environment mpirun_rank_two_nodes(int rank) {
  Environment env = batch_two_nodes();
  const int node = rank / 2;
  env["OMPI_COMM_WORLD_SIZE"] = "4";
  env["OMPI_COMM_WORLD_RANK"] = std::to_string(rank);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(rank % 2);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  env["PMIX_RANK"] = std::to_string(rank);
  env["SLURMD_NODENAME"] = node == 0 ? "node01" : "node02";
  env["SLURM_LOCALID"] = "0";
  env["SLURM_NODEID"] = std::to_string(node);
  env["SLURM_PROCID"] = std::to_string(node);
  env["SLURM_STEPID"] = "0";
  env["SLURM_STEP_ID"] = "0";
  return env;
}

// A rank that `mpirun -np 2` started inside the one-node batch script: no srun step here.
inline Environment mpirun_rank_one_node(int rank) {
  Environment env = batch_one_node();
  env["OMPI_COMM_WORLD_SIZE"] = "2";
  env["OMPI_COMM_WORLD_RANK"] = std::to_string(rank);
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = std::to_string(rank);
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  env["PMIX_RANK"] = std::to_string(rank);
  return env;
}

// Task `procid` (0..3) of `srun` in the two-node batch script.
inline Environment srun_task_two_nodes(int procid) {
  Environment env = batch_two_nodes();
  const int node = procid / 2;
  env["SLURMD_NODENAME"] = node == 0 ? "node01" : "node02";
  env["SLURM_LOCALID"] = std::to_string(procid % 2);
  env["SLURM_NODEID"] = std::to_string(node);
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_STEPID"] = "0";
  env["SLURM_STEP_ID"] = "0";
  env["SLURM_STEP_TASKS_PER_NODE"] = "2(x2)";
  return env;
}

// Task `procid` (0..1) of `srun --mpi=pmix` in the one-node batch script.
inline Environment srun_pmix_task_one_node(int procid) {
  Environment env = batch_one_node();
  env["PMIX_RANK"] = std::to_string(procid);
  env["SLURM_LOCALID"] = std::to_string(procid);
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_STEPID"] = "0";
  env["SLURM_STEP_ID"] = "0";
  return env;
}

}  // namespace saturn::launch::recorded
