#!/usr/bin/env bash
# End-to-end checks of `saturn data prepare` and `saturn train` through the real executable:
# training runs and val loss falls; same seed gives bit-identical losses; bad input and
# out-of-memory exit 2 with a located message and write nothing.
# Usage: test_train_cli.sh SATURN_EXE
set -uo pipefail
saturn="$1"
source "$(dirname "$0")/../lib.sh"

# Data: a few KB of text, repeated so a tiny model can learn it.
prepare_data "$saturn" 40 --val-fraction 0.1 && ok "data prepare" || bad "data prepare"

cat > "$work/w.yaml" <<YAML
name: e2e
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 32
  steps: 30
  eval_every: 10
  eval_batches: 2
  optimizer: {lr: 3e-3, weight_decay: 0.0}
  schedule: {warmup: 3, decay: cosine}
  seed: 7
models:
  m: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}
  l: {arch: llama, n_layer: 1, n_head: 2, d_model: 32, d_ff: 64}
jobs:
  - sweep: {model: [m, l], lr: [3e-3], batch_size: [8]}
YAML

for job in m-lr3e-3-bs8 l-lr3e-3-bs8; do
  if "$saturn" train "$work/w.yaml" --job "$job" --run-dir "$work/run1" --quiet; then
    ok "train $job"
  else
    bad "train $job"
  fi
  metrics="$work/run1/jobs/$job/metrics.jsonl"
  if /usr/bin/python3 - "$metrics" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(rows) == 30, len(rows)
assert all(k in rows[0] for k in ("step", "loss", "lr", "tokens_per_s", "time_s")), rows[0]
assert len(vals) == 3 and vals[-1] < vals[0] - 0.3, vals
PY
  then ok "$job metrics complete and val loss falls"; else bad "$job metrics/val loss"; fi
done
[ -f "$work/run1/workload.yaml" ] && ok "workload copied" || bad "workload copy"

# Determinism: a second run with the same seed gives bit-identical losses.
"$saturn" train "$work/w.yaml" --job m-lr3e-3-bs8 --run-dir "$work/run2" --quiet
strip() { /usr/bin/python3 -c 'import json,sys; [print(json.dumps({k: r[k] for k in ("step","loss","val_loss") if k in r})) for r in map(json.loads, open(sys.argv[1]))]' "$1"; }
if diff <(strip "$work/run1/jobs/m-lr3e-3-bs8/metrics.jsonl") <(strip "$work/run2/jobs/m-lr3e-3-bs8/metrics.jsonl") >/dev/null; then
  ok "same seed: identical losses"
else
  bad "same seed: losses differ"
fi

# Bad input: exit 2, the message locates the problem, nothing is written.
expect_bad() {  # name, expected message fragment, then the command
  local name="$1" frag="$2"; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ "$rc" -eq 2 ] && grep -qF -- "$frag" <<<"$out" && [ ! -e "$work/nothing" ]; then
    ok "$name (exit 2: $(head -n1 <<<"$out" | cut -c1-110))"
  else
    bad "$name: rc=$rc, output: $out"
  fi
}
sed 's/n_head: 2, d_model: 32}/n_head: 3, d_model: 32}/' "$work/w.yaml" > "$work/heads.yaml"
expect_bad "n_head not dividing d_model" "heads.yaml:" "$saturn" train "$work/heads.yaml" --job m-lr3e-3-bs8 --run-dir "$work/nothing"
sed 's/  steps: 30/  stpes: 30/' "$work/w.yaml" > "$work/typo.yaml"
expect_bad "unknown key" "typo.yaml:5:3: defaults.stpes" "$saturn" train "$work/typo.yaml" --job m-lr3e-3-bs8 --run-dir "$work/nothing"
printf 'name: x\njobs: [\n' > "$work/broken.yaml"
expect_bad "malformed YAML" "broken.yaml:" "$saturn" train "$work/broken.yaml" --run-dir "$work/nothing"
sed 's|train: data/train.bin|train: data/missing.bin|' "$work/w.yaml" > "$work/missing.yaml"
expect_bad "missing data file" "missing.bin" "$saturn" train "$work/missing.yaml" --job m-lr3e-3-bs8 --run-dir "$work/nothing"
head -c 1100 "$work/data/val.bin" > "$work/data/short.bin"
sed 's|val: data/val.bin|val: data/short.bin|' "$work/w.yaml" > "$work/short.yaml"
expect_bad "too-short data file" "short.bin" "$saturn" train "$work/short.yaml" --job m-lr3e-3-bs8 --run-dir "$work/nothing"
expect_bad "unknown job id" "m-lr3e-3-bs8" "$saturn" train "$work/w.yaml" --job nope --run-dir "$work/nothing"
expect_bad "out of memory" "peak" "$saturn" train "$work/w.yaml" --job m-lr3e-3-bs8 --memory 200KiB --run-dir "$work/nothing"

finish
