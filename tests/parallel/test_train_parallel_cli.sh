#!/usr/bin/env bash
# `saturn train --strategy S --degree D` under mpiexec: metrics equal to the single-device run's,
# written once by rank 0; infeasible configurations, a degree that is not the number of ranks
# and bad knobs exit 2 on every rank with the reason, before training, without hanging.
# Usage: test_train_parallel_cli.sh SATURN_EXE MPIEXEC
set -uo pipefail
saturn="$1"
mpiexec="${2:-mpiexec}"
source "$(dirname "$0")/../lib.sh"
mpi() { local np="$1"; shift; timeout 120 "$mpiexec" -n "$np" --oversubscribe --allow-run-as-root "$@"; }

prepare_data "$saturn" 30 --val-fraction 0.1 && ok "data prepare" || bad "data prepare"
cat > "$work/w.yaml" <<YAML
name: par
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 16
  steps: 12
  eval_every: 6
  eval_batches: 2
  optimizer: {lr: 3e-3, grad_clip: 0.5}
  schedule: {warmup: 2}
  seed: 3
models:
  m: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
jobs:
  - {name: j, model: m, lr: 3e-3, batch_size: 8}
YAML

"$saturn" train "$work/w.yaml" --run-dir "$work/single" --quiet && ok "single" || bad "single"
compare() {  # name, metrics file: losses within 1e-5 relative of the single run
  /usr/bin/python3 - "$work/single/jobs/j/metrics.jsonl" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 12, (len(a), len(b))
for x, y in zip(a, b):
    assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x, y)
    assert ("val_loss" in x) == ("val_loss" in y)
    if "val_loss" in x:
        assert abs(x["val_loss"] - y["val_loss"]) <= 1e-5 * x["val_loss"], (x, y)
PY
}
for s in ddp fsdp pipeline tensor offload; do
  if mpi 2 "$saturn" train "$work/w.yaml" --strategy "$s" --degree 2 --run-dir "$work/$s" --quiet \
     && compare "$s" "$work/$s/jobs/j/metrics.jsonl"; then
    ok "$s on 2 ranks matches one device"
  else
    bad "$s on 2 ranks"
  fi
done
if mpi 2 "$saturn" train "$work/w.yaml" --strategy pipeline --run-dir "$work/gp" --quiet \
     --knob schedule=gpipe --knob micro_batches=4 && compare gp "$work/gp/jobs/j/metrics.jsonl"; then
  ok "pipeline gpipe, --degree defaulting to the number of ranks"
else
  bad "pipeline gpipe"
fi

expect_bad() {  # name, expected message fragment, np, then the saturn arguments
  local name="$1" frag="$2" np="$3"; shift 3
  local out rc
  out=$(mpi "$np" "$saturn" "$@" 2>&1); rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "$frag" <<<"$out" && [ ! -e "$work/nothing" ] \
     && [ "$(grep -c 'saturn: error' <<<"$out")" -eq 1 ]; then
    ok "$name (exit 2: $(grep 'saturn: error' <<<"$out" | head -n1 | cut -c1-120))"
  else
    bad "$name: rc=$rc, output: $out"
  fi
}
sed 's/n_layer: 2/n_layer: 1/' "$work/w.yaml" > "$work/one.yaml"
expect_bad "more stages than layers" "only 1 layers" 2 train "$work/one.yaml" --strategy pipeline --run-dir "$work/nothing"
sed 's/n_head: 2, d_model: 32/n_head: 1, d_model: 32/' "$work/w.yaml" > "$work/heads.yaml"
expect_bad "degree not dividing heads" "does not divide n_head 1" 2 train "$work/heads.yaml" --strategy tensor --run-dir "$work/nothing"
expect_bad "out of memory by the estimate" "out of memory" 2 train "$work/w.yaml" --strategy fsdp --memory 100KiB --run-dir "$work/nothing"
expect_bad "degree not the number of ranks" "must equal the number of ranks" 2 train "$work/w.yaml" --strategy ddp --degree 4 --run-dir "$work/nothing"
expect_bad "unknown strategy" "unknown strategy 'zero'" 2 train "$work/w.yaml" --strategy zero --run-dir "$work/nothing"
expect_bad "unknown knob" "unknown knob" 2 train "$work/w.yaml" --strategy ddp --knob wat=1 --run-dir "$work/nothing"
expect_bad "single under mpirun" "one device" 2 train "$work/w.yaml" --run-dir "$work/nothing"

finish
