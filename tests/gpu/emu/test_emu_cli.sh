#!/usr/bin/env bash
# The whole program on the emulated CUDA backend (saturn_emu): `train --device cuda` of one job
# and `run --device cuda --np 2` of a 4-job sweep finish with falling validation losses; a
# checkpoint it writes resumes on the CPU backend and one the CPU writes resumes on it (same
# file format), each continuing as the writing backend itself continues. The plain `saturn`
# without a usable GPU refuses --device cuda with exit 2 and the reason, before writing anything.
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

# 2. Checkpoints cross backends both ways. The step-4 checkpoint of a job is the newest left (a
# resume takes the newest valid one), and the other backend trains steps 5-8 from it.
# continues DIR REF JOB LOG: DIR's job resumed at step 4 (LOG says so), holds every step 1-8
# once, and its losses (and step-8 validation loss) after step 4 are within 2^-8 relative of
# REF's, the writing backend's own continuation. Why 2^-8: the CUDA backend keeps the fp32
# master weights and Adam state of the checkpoint but computes in bf16, whose unit roundoff is
# 2^-8; the loss, a mean over 64 tokens, moves far less than one rounding of itself (measured
# here: at most 1.6e-4 relative over the 4 steps), while the training moves it by 2-5 % over
# those steps and a restart from step 0 would put it 5-8 % higher.
continues() {
  /usr/bin/python3 - "$@" <<'PY'
import json, re, sys
d, ref, job, log = sys.argv[1:]
m = re.search(r"job %s: resuming from \S+step-00000004\.h5 \(step 4," % re.escape(job), open(log).read())
assert m, "no resume from step 4 in " + log
rows = lambda p: [json.loads(l) for l in open(p + "/jobs/" + job + "/metrics.jsonl")]
a, b = rows(d), rows(ref)
assert [r["step"] for r in a] == list(range(1, 9)), [r["step"] for r in a]
pairs = [(x["loss"], y["loss"]) for x, y in zip(a, b) if x["step"] > 4]
pairs += [(x["val_loss"], y["val_loss"]) for x, y in zip(a, b) if x["step"] == 8]
worst = max(abs(x - y) / y for x, y in pairs)
print(f"{job}: steps 5-8 within {worst:.1e} of the writing backend's continuation")
assert worst <= 2 ** -8, pairs
PY
}
# from_step4 SRC DST JOB: DST is SRC with JOB's step-8 checkpoint and final weights removed.
from_step4() {
  cp -r "$1" "$2"
  rm -f "$2/jobs/$3/final.h5" "$2/jobs/$3/checkpoints/step-00000008.h5"
  echo "step-00000004.h5" >"$2/jobs/$3/checkpoints/latest"
}
# 2a. The CUDA run's step-4 checkpoint continues on the CPU backend.
from_step4 "$work/train" "$work/oncpu" g-lr3e-3-bs4
if "$saturn" train "$work/w.yaml" --job g-lr3e-3-bs4 --device cpu --run-dir "$work/oncpu" --resume \
    --quiet >"$work/oncpu.log" 2>&1 && [ -f "$work/oncpu/jobs/g-lr3e-3-bs4/final.h5" ] &&
  continues "$work/oncpu" "$work/train" g-lr3e-3-bs4 "$work/oncpu.log"; then
  ok "a CUDA checkpoint resumes on the CPU backend and continues as CUDA does"
else
  bad "CUDA checkpoint on the CPU: $(tail -5 "$work/oncpu.log")"
fi
# 2b. A CPU run's step-4 checkpoint continues on the (emulated) CUDA backend.
"$saturn" train "$work/w.yaml" --job l-lr3e-3-bs4 --device cpu --run-dir "$work/cpu" --quiet \
  >"$work/cpu.log" 2>&1 || bad "saturn train --device cpu: $(tail -5 "$work/cpu.log")"
from_step4 "$work/cpu" "$work/oncuda" l-lr3e-3-bs4
if "$emu" train "$work/w.yaml" --job l-lr3e-3-bs4 --device cuda --run-dir "$work/oncuda" --resume \
    --quiet >"$work/oncuda.log" 2>&1 && [ -f "$work/oncuda/jobs/l-lr3e-3-bs4/final.h5" ] &&
  continues "$work/oncuda" "$work/cpu" l-lr3e-3-bs4 "$work/oncuda.log"; then
  ok "a CPU checkpoint resumes on the emulated CUDA backend and continues as the CPU does"
else
  bad "CPU checkpoint on CUDA: $(tail -5 "$work/oncuda.log")"
fi

# 3. The whole batch on two ranks with emulated GPUs.
if "$emu" run "$work/w.yaml" --np 2 --device cuda --quick-calibration --run-dir "$work/run" >"$work/run.log" 2>&1; then
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

# 5. --device auto, the default: saturn_emu's ranks all have (emulated) GPUs, so CUDA; the plain
# saturn here has none, so the CPU, saying why.
if "$emu" train "$work/w.yaml" --job g-lr3e-3-bs4 --run-dir "$work/auto-emu" --max-steps 1 \
    >"$work/auto-emu.log" 2>&1 && grep -q "device auto -> cuda: every rank has a usable GPU" "$work/auto-emu.log"; then
  ok "saturn_emu train without --device: auto -> cuda"
else
  bad "saturn_emu auto: $(tail -3 "$work/auto-emu.log")"
fi
if nvidia-smi >/dev/null 2>&1; then
  ok "saturn train without --device: a GPU is present here (not the case this checks)"
elif "$saturn" train "$work/w.yaml" --job g-lr3e-3-bs4 --run-dir "$work/auto-cpu" --max-steps 1 \
    >"$work/auto-cpu.log" 2>&1 && grep -q "device auto -> cpu (no CUDA device: " "$work/auto-cpu.log"; then
  ok "saturn train without --device: auto -> cpu ($(grep -o 'no CUDA device: .*' "$work/auto-cpu.log" | cut -c1-80))"
else
  bad "saturn auto: $(tail -3 "$work/auto-cpu.log")"
fi

finish
