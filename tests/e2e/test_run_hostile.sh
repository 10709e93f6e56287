#!/usr/bin/env bash
# A run directory and the models it started from, changed behind the run's back (issue 28):
#  1. the `from:` model rewritten between a stop (SIGUSR1, exit 99) and `--resume`: exit 2 at
#     once naming the directory and the file, nothing dispatched (it used to fail the
#     checkpointed job at dispatch, and to train the new model silently in a job not yet
#     started); restored as it was, the resume is accepted;
#  2. run_state.json a directory, metrics.jsonl a FIFO: `saturn status` and `saturn report`
#     exit 2 naming the file, in bounded time (a FIFO used to block them forever); report -o a
#     FIFO is refused and left as it was.
# Usage: test_run_hostile.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/run_helpers.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none
started=()
trap 'for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT

expect2() {  # expect2 NAME PATTERN CMD...: exit 2 within 60 s, PATTERN in the output
  local name=$1 pattern=$2
  shift 2
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -qF -- "$pattern" <<<"$out"; then
    ok "$name"
  else
    bad "$name: exit $rc, expected 2 with '$pattern'"
    tail -3 <<<"$out"
  fi
}

prepare_data "$saturn" 20 || bad "data prepare"
# Two tiny GPT-2 models of one shape (seeds 1 and 2), exported: the model the batch fine-tunes
# and the one that replaces it behind the run's back.
for seed in 1 2; do
  cat >"$work/base$seed.yaml" <<YAML
name: base
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults: {seq_len: 32, steps: 2, eval_batches: 1, batch_size: 4, seed: $seed}
models:
  g: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}
jobs:
  - {name: g, model: g, lr: 1e-3}
YAML
  "$saturn" train "$work/base$seed.yaml" --run-dir "$work/base$seed" --quiet || bad "train base $seed"
  "$saturn" ckpt export "$work/base$seed/jobs/g/final.h5" --format hf -o "$work/hf$seed" \
    >/dev/null 2>&1 || bad "export base $seed"
done
cp -r "$work/hf1" "$work/model"
cat >"$work/w.yaml" <<YAML
name: hostile-run
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults:
  seq_len: 32
  steps: 1000000
  eval_every: 100
  eval_batches: 1
  checkpoint_every: 10
  seed: 3
models:
  g: {from: $work/model}
jobs:
  - sweep: {model: [g], lr: [1e-3, 3e-3, 1e-2], batch_size: [8]}
solver: {time_limit: 1}
YAML

# 1. The model changed before --resume. Three jobs on two ranks: one waits, never started.
R="$work/run"
start "$R" "$work/w.yaml" --run-dir "$R"
wait_past "$R" 20 || bad "no training"
kill -USR1 "$launcher"
wait_launcher 120
rc=$?
[ $rc -eq 99 ] && $py - "$R/run_state.json" <<'PY' && ok "stopped with exit 99; run_state.json records the model's checksums" ||
import json, sys
s = json.load(open(sys.argv[1]))
files = s["model_checksums"]["g"]
assert set(files) == {"config.json", "model.safetensors"}, files
assert all(v.startswith("0x") and len(v) == 18 for v in files.values()), files
PY
  bad "stop before the change: exit $rc"
starts() { grep -c '"event":"job_start"' "$R/timeline.jsonl"; }
before=$(starts)
"$saturn" ckpt export "$work/base2/jobs/g/final.h5" --format hf -o "$work/model" >/dev/null 2>&1 ||
  bad "re-export over the model"
expect2 "--resume after the model changed: exit 2 naming the file" \
  "models.g.from $work/model changed since the run started: model.safetensors has checksum" \
  "$saturn" run --resume "$R" --np 2 --no-trials
[ "$(starts)" == "$before" ] && ok "... before any job was dispatched" ||
  bad "jobs were dispatched: $before -> $(starts) job_start events"
rm -rf "$work/model"
cp -r "$work/hf1" "$work/model"
start "$R.resume" --resume "$R"
for _ in $(seq 1 600); do [ "$(starts)" -gt "$before" ] && break; sleep 0.1; done
kill -USR1 "$launcher"
wait_launcher 120
rc=$?
[ $rc -eq 99 ] && [ "$(starts)" -gt "$before" ] && ok "restored as it was: the resume runs (stopped again, exit 99)" ||
  { bad "resume after restoring: exit $rc"; tail -5 "$R.resume.log"; }

# 2. Files of the run directory that are not regular files.
S="$work/copy"
cp -r "$R" "$S"
rm "$S/run_state.json"
mkdir "$S/run_state.json"
expect2 "status: run_state.json a directory: exit 2 naming it" "run_state.json: is a directory" \
  "$saturn" status "$S"
expect2 "report: run_state.json a directory: exit 2 naming it" "run_state.json: is a directory" \
  "$saturn" report "$S" -o "$work/r.html"
rmdir "$S/run_state.json"
cp "$R/run_state.json" "$S/"
job=$(ls "$S/jobs" | head -1)
rm "$S/jobs/$job/metrics.jsonl"
mkfifo "$S/jobs/$job/metrics.jsonl"
expect2 "status: metrics.jsonl a FIFO: exit 2 at once" "metrics.jsonl: is a FIFO" "$saturn" status "$S"
expect2 "report: metrics.jsonl a FIFO: exit 2 at once" "metrics.jsonl: is a FIFO" \
  "$saturn" report "$S" -o "$work/r.html"
mkfifo "$work/out.fifo"
expect2 "report -o a FIFO: refused" "is a FIFO" "$saturn" report "$R" -o "$work/out.fifo"
[ -p "$work/out.fifo" ] && ok "... and left a FIFO" || bad "report replaced the FIFO"
finish
