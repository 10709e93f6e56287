#!/usr/bin/env bash
# `saturn train` with checkpoints, through the real executable, for gpt2 and llama:
#  - bit-exact resume: 20 steps straight == 10 steps, then a NEW process with --resume, 10 more
#    (identical losses, identical final weights and optimizer state);
#  - kill -9 in the middle of a checkpoint write (test hook): the previous checkpoint is intact,
#    `latest` never moved, and --resume continues from it to the same result;
#  - a flipped byte in the newest checkpoint: reported by file and dataset, the previous one is
#    used; a truncated newest: the same;
#  - `saturn ckpt inspect` (exit 1 on a corrupt file) and `saturn ckpt export`.
# Usage: test_resume_cli.sh SATURN_EXE CKPT_TOOL
set -uo pipefail
saturn="$1"
tool="$2"
source "$(dirname "$0")/../lib.sh"

prepare_data "$saturn" 40 --val-fraction 0.1 || { echo "FAIL: data prepare"; exit 1; }
cat >"$work/w.yaml" <<YAML
name: resume
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 16
  steps: 20
  eval_every: 0
  eval_batches: 1
  checkpoint_every: 5
  optimizer: {lr: 3e-3, weight_decay: 0.1}
  schedule: {warmup: 3, decay: cosine}
  seed: 11
models:
  g: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
  l: {arch: llama, n_layer: 1, n_head: 2, d_model: 16, d_ff: 32}
jobs:
  - sweep: {model: [g, l], lr: [3e-3], batch_size: [4]}
YAML

losses() { /usr/bin/python3 -c 'import json,sys; [print(r["step"], r["loss"].hex()) for r in map(json.loads, open(sys.argv[1]))]' "$1"; }
datasets() { "$saturn" ckpt inspect "$1" | grep '^  /'; }  # every dataset's checksum and status
train() { "$saturn" train "$work/w.yaml" --quiet "$@"; }

for job in g-lr3e-3-bs4 l-lr3e-3-bs4; do
  A="$work/A-$job"; B="$work/B-$job"; C="$work/C-$job"
  jA="$A/jobs/$job"; jB="$B/jobs/$job"; jC="$C/jobs/$job"
  train --job "$job" --run-dir "$A" 2>/dev/null && ok "$job: 20 steps straight" || bad "$job: straight run"

  # Bit-exact resume in a new process.
  train --job "$job" --run-dir "$B" --max-steps 10 2>/dev/null
  [ "$(cat "$jB/checkpoints/latest")" = "step-00000010.h5" ] && ok "$job: latest = step-00000010.h5 after 10 steps" \
    || bad "$job: latest after 10 steps"
  out=$(train --job "$job" --run-dir "$B" --resume 2>&1)
  grep -q "resuming from .*step-00000010.h5 (step 10" <<<"$out" && ok "$job: resumed from step 10" || bad "$job: resume: $out"
  [ "$(wc -l <"$jB/metrics.jsonl")" -eq 20 ] && diff <(losses "$jA/metrics.jsonl") <(losses "$jB/metrics.jsonl") >/dev/null \
    && ok "$job: 10 + resume + 10 gives bit-identical losses to 20 straight" || bad "$job: losses differ after resume"
  diff <(datasets "$jA/final.h5") <(datasets "$jB/final.h5") >/dev/null \
    && ok "$job: final weights, m and v bit-identical (all $(datasets "$jA/final.h5" | wc -l) checksums equal)" \
    || bad "$job: final state differs after resume"

  # kill -9 in the middle of writing step 15 (after 7 datasets).
  train --job "$job" --run-dir "$C" --max-steps 10 2>/dev/null
  SATURN_CKPT_TEST_KILL="0:7:step-00000015" train --job "$job" --run-dir "$C" --resume >/dev/null 2>&1
  rc=$?
  [ "$rc" -eq 137 ] && ok "$job: process killed mid-write (exit 137)" || bad "$job: kill hook exit $rc"
  [ ! -e "$jC/checkpoints/step-00000015.h5" ] && [ -e "$jC/checkpoints/step-00000015.h5.tmp" ] \
    && [ "$(cat "$jC/checkpoints/latest")" = "step-00000010.h5" ] \
    && ok "$job: interrupted write left only a .tmp; latest still step-00000010.h5" || bad "$job: state after kill"
  out=$(train --job "$job" --run-dir "$C" --resume 2>&1)
  grep -q "resuming from .*step-00000010.h5" <<<"$out" && diff <(losses "$jA/metrics.jsonl") <(losses "$jC/metrics.jsonl") >/dev/null \
    && diff <(datasets "$jA/final.h5") <(datasets "$jC/final.h5") >/dev/null \
    && ok "$job: resume after the crash reaches the same losses and final state" || bad "$job: resume after crash: $out"

  # Corruption of the newest checkpoint (run A keeps 10, 15, 20): a flipped bit in a dataset.
  ds=/optimizer/m/$( [ "${job%%-*}" = g ] && echo transformer.h.0.mlp.c_fc.weight || echo model.layers.0.mlp.up_proj.weight)
  "$tool" corrupt "$jA/checkpoints/step-00000020.h5" "$ds"
  if "$saturn" ckpt inspect "$jA/checkpoints/step-00000020.h5" >"$work/inspect.txt" 2>&1; then
    bad "$job: inspect of a corrupt file exited 0"
  else
    grep -q "$ds .*MISMATCH" "$work/inspect.txt" && grep -q "checksums:     FAILED (1 of" "$work/inspect.txt" \
      && ok "$job: ckpt inspect names the corrupt dataset and exits 1" || bad "$job: inspect output: $(cat "$work/inspect.txt")"
  fi
  cp "$jA/metrics.jsonl" "$work/metrics-A.jsonl"
  out=$(train --job "$job" --run-dir "$A" --resume 2>&1)
  grep -q "warning: checkpoint .*step-00000020.h5: dataset $ds: checksum mismatch" <<<"$out" \
    && grep -q "resuming from .*step-00000015.h5" <<<"$out" \
    && ok "$job: corrupt newest reported by file and dataset, previous (step 15) used" || bad "$job: corrupt fallback: $out"
  diff <(losses "$work/metrics-A.jsonl") <(losses "$jA/metrics.jsonl") >/dev/null \
    && ok "$job: steps 16-20 retrained to the same losses" || bad "$job: retrained losses differ"

  # Truncation of the newest (step 20 again, rewritten by the run above).
  truncate -s -4096 "$jA/checkpoints/step-00000020.h5"
  out=$(train --job "$job" --run-dir "$A" --resume 2>&1)
  grep -q "warning: checkpoint .*step-00000020.h5: .*truncated" <<<"$out" && grep -q "resuming from .*step-00000015.h5" <<<"$out" \
    && ok "$job: truncated newest reported, previous used" || bad "$job: truncated fallback: $out"
done

# Export: the safetensors file of a good checkpoint; no output from a corrupt one.
job=g-lr3e-3-bs4
"$saturn" ckpt export "$work/B-$job/jobs/$job/final.h5" --format safetensors -o "$work/out.safetensors" 2>/dev/null \
  && [ -s "$work/out.safetensors" ] && ok "ckpt export writes safetensors" || bad "ckpt export"
"$saturn" ckpt inspect --json "$work/B-$job/jobs/$job/final.h5" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
assert j["format"] == "saturn-checkpoint" and j["step"] == 20 and j["checksums_ok"], j
assert len(j["datasets"]) == 48 and all(d["ok"] for d in j["datasets"])' \
  && ok "ckpt inspect --json" || bad "ckpt inspect --json"
cp "$work/B-$job/jobs/$job/final.h5" "$work/bad.h5"
"$tool" corrupt "$work/bad.h5" /model/transformer.wte.weight
if "$saturn" ckpt export "$work/bad.h5" -o "$work/bad.safetensors" 2>"$work/err.txt"; then
  bad "export of a corrupt file succeeded"
else
  grep -q "/model/transformer.wte.weight: checksum mismatch" "$work/err.txt" && [ ! -e "$work/bad.safetensors" ] \
    && ok "export refuses a corrupt file, naming the dataset" || bad "export error: $(cat "$work/err.txt")"
fi

finish
