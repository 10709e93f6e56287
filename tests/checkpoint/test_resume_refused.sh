#!/usr/bin/env bash
# Impossible resumes are refused with exit 2 before anything trains (issue 15, item 3); they
# used to "finish" the job with steps that never ran, no final.h5 and no val loss:
#  - `saturn train --resume` from a checkpoint past the job's (lowered) steps, or from another
#    job's checkpoint;
#  - `saturn run --resume` of a run whose workload lowered the steps below a job's newest
#    checkpoint, raised them past a finished job's final.h5, or whose job directory holds
#    another job's checkpoint. Nothing runs: the timeline does not grow.
# Usage: test_resume_refused.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none

prepare_data "$saturn" 20 || bad "data prepare"
workload() {  # workload STEPS > FILE
  cat <<YAML
name: refused
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults:
  seq_len: 16
  steps: $1
  eval_every: 0
  eval_batches: 1
  checkpoint_every: 5
  seed: 11
models:
  g: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
jobs:
  - sweep: {model: [g], lr: [3e-3, 1e-3], batch_size: [4]}
YAML
}
workload 20 >"$work/w20.yaml"
workload 10 >"$work/w10.yaml"
workload 30 >"$work/w30.yaml"
a=g-lr3e-3-bs4
b=g-lr1e-3-bs4

# expect_refusal NAME EXPECTED_MESSAGE_REGEX command...: exit 2 naming the cause.
expect_refusal() {
  local name=$1 pattern=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -Eq "$pattern" <<<"$out"; then
    ok "$name: exit 2 ($(grep -Eo "$pattern" <<<"$out" | head -1))"
  else
    bad "$name: exit $rc"; tail -5 <<<"$out"
  fi
}

# saturn train: a at step 15 (checkpoints 5, 10, 15), b at step 10.
R="$work/train"
"$saturn" train "$work/w20.yaml" --job $a --run-dir "$R" --max-steps 15 --quiet 2>/dev/null
"$saturn" train "$work/w20.yaml" --job $b --run-dir "$R" --max-steps 10 --quiet 2>/dev/null
expect_refusal "train: checkpoint at step 15, job lowered to 10 steps" \
  "step-00000015.h5: it is at step 15, past job $a's 10 steps" \
  "$saturn" train "$work/w10.yaml" --job $a --run-dir "$R" --resume --quiet
[ ! -e "$R/jobs/$a/final.h5" ] && ok "train: no final.h5 written" || bad "train: final.h5 exists"
cp "$R/jobs/$a/checkpoints/step-00000015.h5" "$R/jobs/$b/checkpoints/"
expect_refusal "train: another job's checkpoint" "it belongs to job '$a', not to job '$b'" \
  "$saturn" train "$work/w20.yaml" --job $b --run-dir "$R" --resume --quiet

# saturn run: both jobs finished (20 steps, final.h5).
S="$work/run"
if "$saturn" run "$work/w20.yaml" --np 1 --run-dir "$S" --no-trials --quiet >"$work/run.log" 2>&1; then
  ok "saturn run: the batch finished"
else
  bad "saturn run: exit $?"; tail -20 "$work/run.log"
fi
events=$(wc -l <"$S/timeline.jsonl")
cp "$S/workload.yaml" "$work/run-workload.yaml"
# Steps raised past a finished job: it would be reported as 30 steps done.
sed -i 's/steps: 20/steps: 30/' "$S/workload.yaml"
expect_refusal "run --resume: finished at 20, steps raised to 30" \
  "job $a finished at step 20 \(.*final.h5\), but the workload now gives it 30 steps" \
  "$saturn" run --resume "$S" --np 1 --no-trials --quiet
# Steps lowered below the newest checkpoint of a job without final.h5.
sed -i 's/steps: 30/steps: 10/' "$S/workload.yaml"
rm "$S/jobs/$a/final.h5" "$S/jobs/$b/final.h5"
expect_refusal "run --resume: checkpoint at 20, steps lowered to 10" \
  "job $a's newest checkpoint .*step-00000020.h5 is at step 20, past the job's 10 steps" \
  "$saturn" run --resume "$S" --np 1 --no-trials --quiet
# Another job's checkpoint as a job's newest.
cp "$work/run-workload.yaml" "$S/workload.yaml"
cp "$S/jobs/$a/checkpoints/step-00000020.h5" "$S/jobs/$b/checkpoints/step-00000020.h5"
expect_refusal "run --resume: another job's checkpoint" \
  "step-00000020.h5 belongs to job '$a', not to job '$b'" \
  "$saturn" run --resume "$S" --np 1 --no-trials --quiet
[ "$(wc -l <"$S/timeline.jsonl")" -eq "$events" ] && ok "run --resume: nothing ran (timeline unchanged)" \
  || bad "run --resume: the timeline grew"
$py -c 'import json, sys; s = json.load(open(sys.argv[1])); assert all(j["status"] == "finished" and j["steps_done"] == 20 for j in s["jobs"]), s["jobs"]' \
  "$S/summary.json" && ok "run --resume: summary.json still says what ran" || bad "summary.json changed"
finish
