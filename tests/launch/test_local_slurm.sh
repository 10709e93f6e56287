#!/usr/bin/env bash
# On a real single-node Slurm (slurm/local-slurm.sh, 127.0.0.1, fake GPUs), with scripts that
# `saturn sbatch` generates:
#  1. hostlists: our parser against the live `scontrol show hostnames/hostlist`;
#  2. a job through --launcher mpirun and one through --launcher srun complete, one rank per GPU;
#  3. for both launchers, and for slurm/templates/saturn.sbatch: USR1 to the batch shell (`scancel --batch --signal=USR1`, the stand-in
#     for --signal=B:USR1@LEAD) -> ranks checkpoint -> exit 99 -> scontrol requeue ->
#     SLURM_RESTART_COUNT=1 -> --resume -> the ranks finish from their checkpoint.
# `saturn run` does not exist yet, so the script's run command is replaced (hidden --command) by
# a stand-in rank program with the same contract: USR1 -> save state, exit 99; --resume -> load.
# Then the cluster stops and nothing of it may be left running.
# Usage: test_local_slurm.sh SATURN_EXE TEST_LAUNCH_EXE    (exit 77: skipped)
set -uo pipefail
saturn=$1
test_launch=$2
here=$(cd "$(dirname "$0")" && pwd)
harness="$here/../../slurm/local-slurm.sh"

for tool in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel mpirun; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "SKIP: $tool is not installed (scripts/install-deps.sh --tests installs Slurm and munge)"
    exit 77
  fi
done
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: the local Slurm runs its daemons as root and makes fake GPU devices with mknod"
  exit 77
fi

work=$(mktemp -d /tmp/saturn-slurm-test.XXXXXX)
chmod 755 "$work"  # munged wants every directory above its socket world-executable
export SATURN_SLURM_DIR=$work/slurm SATURN_SLURM_GPUS=10 SATURN_SLURM_CPUS=16
# A port block of our own (controller, slurmd, srun range: PORT..PORT+299), so a cluster someone
# runs by hand on the default ports does not collide.
export SATURN_SLURM_PORT=$((30000 + (RANDOM % 100) * 300))
export SLURM_CONF=$SATURN_SLURM_DIR/slurm.conf
# Test-box settings the jobs inherit (sbatch exports the submitting environment).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_rmaps_base_oversubscribe=1
passed=0
failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }

cleanup() {
  local rc=$?
  "$harness" stop
  # Nothing of the cluster may be left: no daemon and no job step mentioning our directory.
  local left
  left=$(ps -eo pid=,args= | grep -F "$work" | grep -v grep || true)
  if [[ -n "$left" ]]; then
    echo "FAIL: left running after stop:"
    echo "$left"
    rc=1
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT

if ! "$harness" start; then
  echo "FAIL: the local Slurm did not start; logs:"
  tail -n 20 "$SATURN_SLURM_DIR"/log/* "$SATURN_SLURM_DIR"/munge/munged.log 2>/dev/null
  exit 1
fi

# 1. Hostlists against the live scontrol.
out=$("$test_launch" --gtest_filter='HostlistScontrol.*' 2>&1)
if grep -q '\[  PASSED  \] 1 test' <<<"$out" && ! grep -q SKIPPED <<<"$out"; then
  ok "hostlists match scontrol"
else
  bad "hostlists vs scontrol"
  echo "$out"
fi

# A workload for saturn sbatch to validate (its data files only need to exist here).
mkdir -p "$work/data"
head -c 4096 /dev/urandom >"$work/data/train.bin"
cp "$work/data/train.bin" "$work/data/val.bin"
cat >"$work/w.yaml" <<'YAML'
name: slurm-test
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 10}
models: {m: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}}
jobs:
  - {model: m, lr: 1e-3, batch_size: 4}
YAML

# The stand-in for `saturn run WORKLOAD --run-dir DIR [--resume]`: STEPS steps of 0.1 s; on
# USR1 it saves its step and exits 99; with --resume it starts from the saved step.
standin=$work/standin.sh
cat >"$standin" <<'EOF'
#!/bin/bash
steps=$1 dir=$2
shift 2
stop=0
trap 'stop=1' USR1
rank=${OMPI_COMM_WORLD_RANK:-${SLURM_PROCID:-0}}
ntasks=${OMPI_COMM_WORLD_SIZE:-${SLURM_NTASKS:-1}}
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${SLURM_LOCALID:-?}}
resume=0
for a in "$@"; do [[ $a == --resume ]] && resume=1; done
start=0
[[ $resume == 1 && -f $dir/state.$rank ]] && start=$(cat "$dir/state.$rank")
echo "rank $rank local $local_rank cvd=${CUDA_VISIBLE_DEVICES:-unset} restart=${SLURM_RESTART_COUNT:-0} resume=$resume start=$start"
step=$start
while ((step < steps)); do
  if [[ $stop == 1 ]]; then
    echo "$step" >"$dir/state.$rank"
    echo "rank $rank checkpointed at $step"
    # Like saturn's ranks, leave only once every rank has saved: mpirun kills the other ranks
    # as soon as one exits with a non-zero status.
    touch "$dir/saved.${SLURM_RESTART_COUNT:-0}.$rank"
    while (($(ls "$dir" | grep -c "^saved\.${SLURM_RESTART_COUNT:-0}\.") < ntasks)); do sleep 0.05; done
    exit 99
  fi
  sleep 0.1
  step=$((step + 1))
done
echo "rank $rank finished at $step (resumed from $start)"
EOF
chmod +x "$standin"

# submit NAME LAUNCHER STEPS: prints the job id.
submit() {
  local name=$1 launcher=$2 steps=$3 run=$work/$1
  mkdir -p "$run"
  "$saturn" sbatch "$work/w.yaml" --nodes 1 --gpus-per-node 2 --time 00:10:00 \
    --launcher "$launcher" --run-dir "$run" --command "$standin $steps $run" |
    sed -n 's/^submitted batch job //p'
}

wait_gone() {  # wait_gone JOBID SECONDS: until squeue no longer lists the job
  local _
  for _ in $(seq 1 $(($2 * 4))); do
    [[ -z "$(squeue -h -j "$1" 2>/dev/null)" ]] && return 0
    sleep 0.25
  done
  return 1
}

job_field() {  # job_field JOBID FIELD: from scontrol show job
  scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# 3 (started first: the requeue delay dominates). All at once: 10 fake GPUs.
declare -A requeue_job
for launcher in mpirun srun; do
  requeue_job[$launcher]=$(submit "requeue-$launcher" "$launcher" 60)
  [[ -n "${requeue_job[$launcher]}" ]] || bad "submit requeue-$launcher"
done
# The template, with a saturn-like front (run WORKLOAD --run-dir DIR [--resume]) for the stand-in.
front=$work/saturn-front.sh
cat >"$front" <<FRONT
#!/bin/bash
dir=\$4
shift 4
exec "$standin" 60 "\$dir" "\$@"
FRONT
chmod +x "$front"
mkdir -p "$work/requeue-template"
requeue_job[template]=$(WORKLOAD=$work/w.yaml RUN_DIR=$work/requeue-template SATURN=$front \
  sbatch --parsable --nodes=1 --ntasks-per-node=2 --gpus-per-node=2 --cpus-per-task=1 \
  --time=00:10:00 --output="$work/requeue-template/slurm-%j.out" \
  "$here/../../slurm/templates/saturn.sbatch")
[[ -n "${requeue_job[template]}" ]] || bad "submit the template"
# 2. Plain runs.
declare -A plain_job
for launcher in mpirun srun; do
  plain_job[$launcher]=$(submit "plain-$launcher" "$launcher" 3)
  [[ -n "${plain_job[$launcher]}" ]] || bad "submit plain-$launcher"
done

# Signal each requeue job once both of its ranks run their loop.
for launcher in mpirun srun template; do
  id=${requeue_job[$launcher]}
  log=$work/requeue-$launcher/slurm-$id.out
  for _ in $(seq 1 240); do
    [[ $(grep -c '^rank .* start=0' "$log" 2>/dev/null) -ge 2 ]] && break
    sleep 0.25
  done
  sleep 1
  scancel --batch --signal=USR1 "$id"
done

for launcher in mpirun srun; do
  id=${plain_job[$launcher]}
  log=$work/plain-$launcher/slurm-$id.out
  if wait_gone "$id" 60 || [[ $(job_field "$id" JobState) == COMPLETED ]]; then :; fi
  state=$(job_field "$id" JobState)
  if [[ $state == COMPLETED && $(grep -c '^rank [01] finished at 3' "$log") == 2 ]] &&
    grep -qE '^rank 0 local 0 cvd=[0-9],[0-9] ' "$log" &&
    grep -qE '^rank 1 local 1 cvd=[0-9],[0-9] ' "$log" &&
    grep -q 'launcher exited with 0' "$log"; then
    ok "sbatch --launcher $launcher: 2 ranks, one per GPU, completed"
  else
    bad "sbatch --launcher $launcher (state $state)"
    cat "$log"
  fi
done

for launcher in mpirun srun template; do
  id=${requeue_job[$launcher]}
  log=$work/requeue-$launcher/slurm-$id.out
  wait_gone "$id" 120 || true
  state=$(job_field "$id" JobState)
  restarts=$(job_field "$id" Restarts)
  if [[ $state == COMPLETED && $restarts == 1 ]] &&
    [[ $(grep -c '^rank [01] checkpointed at [1-9]' "$log") == 2 ]] &&
    grep -q 'launcher exited with 99' "$log" &&
    grep -q 'restart_count=1 --resume' "$log" &&
    [[ $(grep -cE '^rank [01] local [01] cvd=[0-9],[0-9] restart=1 resume=1 start=[1-9]' "$log") == 2 ]] &&
    [[ $(grep -c '^rank [01] finished at 60 (resumed from [1-9]' "$log") == 2 ]]; then
    ok "$launcher: USR1 -> checkpoint -> exit 99 -> requeue -> restart 1 -> resume -> done"
  else
    bad "$launcher: requeue flow (state $state, restarts $restarts)"
    cat "$log"
  fi
done

# The script `saturn sbatch` wrote is the one --dry-run prints.
dry=$("$saturn" sbatch "$work/w.yaml" --nodes 1 --gpus-per-node 2 --time 00:10:00 \
  --launcher mpirun --run-dir "$work/plain-mpirun" --command "$standin 3 $work/plain-mpirun" --dry-run)
if [[ -n "$dry" && "$dry" == "$(cat "$work/plain-mpirun/saturn.sbatch" 2>/dev/null)" ]]; then
  ok "--dry-run prints the submitted script"
else
  bad "--dry-run differs from the written script"
fi

echo "passed $passed, failed $failed"
[[ $failed -eq 0 ]]
