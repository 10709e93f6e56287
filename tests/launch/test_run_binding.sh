#!/usr/bin/env bash
# Device binding inside `saturn run --np 2` (no Slurm needed; the environment stands in for the
# launcher's GPU variables): each rank binds once and logs it; on the CPU backend that is a
# logged no-op; --device cuda picks the GPU of the node-local rank, refuses two ranks on one GPU
# unless --oversubscribe-devices / SATURN_OVERSUBSCRIBE_DEVICES=1, and then stops with exit 2
# (`saturn run` does not drive the CUDA backend yet) before anything is written. The failing
# rank's reason is printed once.
# Usage: test_run_binding.sh SATURN_EXE
set -uo pipefail
saturn=$1
source "$(dirname "$0")/../lib.sh"

prepare_data "$saturn" 10 || { bad "saturn data prepare"; exit 1; }
cat >"$work/w.yaml" <<'YAML'
name: binding-test
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 3, eval_batches: 1, seed: 3}
models: {m: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}}
jobs:
  - {model: m, lr: 1e-3, batch_size: 2}
strategies: [ddp]
solver: {time_limit: 1}
YAML

# run LOG ENV... -- ARGS...: saturn run on 2 ranks with the environment given; sets rc.
run() {
  local log=$1 envs=()
  shift
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$saturn" run "$work/w.yaml" --np 2 "$@" >"$log" 2>&1
  rc=$?
}

# expect LOG NAME PATTERN...: every pattern (grep -E) matches a line of LOG.
expect() {
  local log=$1 name=$2 p
  shift 2
  for p in "$@"; do
    if ! grep -qE -- "$p" "$log"; then
      bad "$name: no line matching: $p"
      cat "$log"
      return
    fi
  done
  ok "$name"
}

# 1. CPU backend: the whole run, one logged no-op binding per rank, GPUs named as unused.
run "$work/cpu.log" CUDA_VISIBLE_DEVICES=0,1 -- --run-dir "$work/cpu" --no-trials --quiet
if [[ $rc == 0 && $(grep -c '\] device: ' "$work/cpu.log") == 2 ]]; then
  expect "$work/cpu.log" "CPU backend: each rank binds once, a logged no-op" \
    '^\[saturn r0\] device: local rank 0 of 2 -> cpu:0 \(CPU backend: binding is a no-op.*; GPUs CUDA_VISIBLE_DEVICES=0,1 are not used$' \
    '^\[saturn r1\] device: local rank 1 of 2 -> cpu:1 \(CPU backend: binding is a no-op'
else
  bad "CPU run: rc=$rc, $(grep -c '\] device: ' "$work/cpu.log") device lines (want 0 and 2)"
  cat "$work/cpu.log"
fi

kernels='no usable CUDA device'
# 2. --device cuda, one GPU per rank.
run "$work/two.log" CUDA_VISIBLE_DEVICES=2,3 SLURM_JOB_GPUS=6,7 -- --device cuda --run-dir "$work/two"
[[ $rc == 2 ]] || bad "--device cuda: rc=$rc, want 2"
expect "$work/two.log" "--device cuda: local rank r takes visible GPU r" \
  '^\[saturn r0\] device: local rank 0 of 2 -> cuda:0 \(visible GPU 2 of \[2,3\].* from CUDA_VISIBLE_DEVICES, global GPU 6 \(SLURM_JOB_GPUS\)$' \
  '^\[saturn r1\] device: local rank 1 of 2 -> cuda:1 \(visible GPU 3 of \[2,3\].* global GPU 7 \(SLURM_JOB_GPUS\)$' \
  "saturn: error: .*($kernels)"
[[ -e $work/two ]] && bad "--device cuda wrote the run directory before stopping"

# 3. Two ranks, one GPU: refused, with the reason printed once.
run "$work/one.log" CUDA_VISIBLE_DEVICES=5 -- --device cuda
[[ $rc == 2 ]] || bad "oversubscribed: rc=$rc, want 2"
expect "$work/one.log" "two ranks on one GPU are refused" \
  '^saturn: error: device binding failed on rank 0: device binding: 2 ranks on this node would share GPU 5 \(2 local ranks, 1 visible GPU\(s\) \[5\]\).*--oversubscribe-devices or SATURN_OVERSUBSCRIBE_DEVICES=1$'
if [[ $(grep -c 'saturn: error' "$work/one.log") != 1 ]] || grep -qE "\] device: |$kernels" "$work/one.log"; then
  bad "oversubscribed: the error is not alone and once"
  cat "$work/one.log"
fi

# 4. ... unless asked for, by flag or by environment.
run "$work/flag.log" CUDA_VISIBLE_DEVICES=5 -- --device cuda --oversubscribe-devices
expect "$work/flag.log" "--oversubscribe-devices shares the GPU" \
  '^\[saturn r1\] device: local rank 1 of 2 -> cuda:0 \(visible GPU 5 of \[5\].*oversubscribed: 2 ranks on it' \
  "$kernels"
run "$work/env.log" CUDA_VISIBLE_DEVICES=5 SATURN_OVERSUBSCRIBE_DEVICES=1 -- --device cuda
expect "$work/env.log" "SATURN_OVERSUBSCRIBE_DEVICES=1 shares the GPU" \
  '^\[saturn r0\] device: local rank 0 of 2 -> cuda:0 \(visible GPU 5 of \[5\].*oversubscribed: 2 ranks on it' \
  "$kernels"

# 5. No GPU visible.
run "$work/none.log" CUDA_VISIBLE_DEVICES= -- --device cuda
[[ $rc == 2 ]] || bad "no GPU: rc=$rc, want 2"
expect "$work/none.log" "no visible GPU is a clear error" \
  '^saturn: error: device binding failed on rank 0: device binding: local rank 0 of 2 sees no CUDA device'

finish
