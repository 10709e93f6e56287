#!/usr/bin/env bash
# The whole program on the emulated CUDA backend (saturn_emu): `train --device cuda` of one job
# and `run --device cuda --np 2` of a 4-job sweep finish with falling validation losses, and a
# checkpoint it writes resumes on the CPU backend (same file format). The plain `saturn` without
# a usable GPU refuses --device cuda with exit 2 and the reason, before writing anything.
# Usage: test_emu_cli.sh SATURN_EMU SATURN
set -uo pipefail
emu="$1"
saturn="$2"
source "$(dirname "$0")/../../lib.sh"

prepare_data "$emu" 20 --val-fraction 0.1 && ok "data prepare" || bad "data prepare"
cat > "$work/w.yaml" <<YAML
name: emu
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 16
  steps: 8
  eval_every: 4
  eval_batches: 1
  checkpoint_every: 4
  optimizer: {lr: 3e-3, weight_decay: 0.0}
  schedule: {warmup: 1, decay: cosine}
  seed: 3
models:
  g: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
  l: {arch: llama, n_layer: 2, n_head: 2, d_model: 32, d_ff: 64}
jobs:
  - sweep: {model: [g, l], lr: [3e-3, 1e-3], batch_size: [4]}
YAML

falls() {  # metrics.jsonl: validation losses present and falling
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
vals = [r["val_loss"] for r in map(json.loads, open(sys.argv[1])) if "val_loss" in r]
assert len(vals) >= 2 and vals[-1] < vals[0], vals
PY
}

# 1. One job, one emulated GPU.
if "$emu" train "$work/w.yaml" --job g-lr3e-3-bs4 --device cuda --run-dir "$work/train" --quiet \
    >"$work/train.log" 2>&1; then
  ok "saturn_emu train --device cuda"
else
  bad "saturn_emu train --device cuda: $(tail -5 "$work/train.log")"
fi
falls "$work/train/jobs/g-lr3e-3-bs4/metrics.jsonl" && ok "train: val loss falls" ||
  bad "train: val loss"

# 2. Its step-4 checkpoint continues on the CPU backend: same format, any backend.
cp -r "$work/train" "$work/oncpu"
rm -f "$work/oncpu/jobs/g-lr3e-3-bs4/final.h5"
echo "step-00000004.h5" > "$work/oncpu/jobs/g-lr3e-3-bs4/checkpoints/latest"
if "$saturn" train "$work/w.yaml" --job g-lr3e-3-bs4 --device cpu --run-dir "$work/oncpu" --resume \
    --quiet >"$work/oncpu.log" 2>&1 && [ -f "$work/oncpu/jobs/g-lr3e-3-bs4/final.h5" ]; then
  ok "a CUDA checkpoint resumes on the CPU backend"
else
  bad "CUDA checkpoint on the CPU: $(tail -5 "$work/oncpu.log")"
fi

# 3. The whole batch on two ranks with emulated GPUs.
if "$emu" run "$work/w.yaml" --np 2 --device cuda --run-dir "$work/run" >"$work/run.log" 2>&1; then
  ok "saturn_emu run --device cuda --np 2"
else
  bad "saturn_emu run: $(tail -20 "$work/run.log")"
fi
if /usr/bin/python3 - "$work/run" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert len(s["jobs"]) == 4 and all(j["status"] == "finished" for j in s["jobs"]), s["jobs"]
PY
then ok "run: 4 jobs finished"; else bad "run: summary"; fi
for m in "$work"/run/jobs/*/metrics.jsonl; do
  falls "$m" && ok "run: $(basename "$(dirname "$m")") val loss falls" || bad "run: $m"
done
grep -q "emulated on the CPU" "$work/run.log" && ok "run: the hardware says emulated" ||
  bad "run: hardware line"

# 4. The real program on a machine without a usable GPU: exit 2 with the reason, nothing written.
out=$("$saturn" train "$work/w.yaml" --job g-lr3e-3-bs4 --device cuda --run-dir "$work/none" 2>&1)
rc=$?
if [ "$rc" -eq 2 ] && grep -q "cuda" <<<"$out" && [ ! -e "$work/none" ]; then
  ok "saturn --device cuda without a GPU: exit 2 ($(head -n1 <<<"$out" | cut -c1-100))"
elif nvidia-smi >/dev/null 2>&1; then
  ok "saturn --device cuda: a GPU is present here (not the case this checks)"
else
  bad "saturn --device cuda without a GPU: rc=$rc: $out"
fi

finish
