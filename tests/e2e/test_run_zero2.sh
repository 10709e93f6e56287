#!/usr/bin/env bash
# The planner chooses ZeRO-2 where it is the right strategy (issue 29): a job on 2 ranks whose
# memory rules out DDP (its whole AdamW state does not fit 48 MiB per rank) and where FSDP,
# which fits, is slower (it gathers every layer for each of 16 micro-batches per rank; ZeRO-2
# communicates once per step). `saturn run` plans zero2 and trains the job to the end; the
# profile table shows ddp out of memory and fsdp's step slower than zero2's, numbers printed.
# Usage: test_run_zero2.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none

prepare_data "$saturn" 20 || bad "data prepare"
cat >"$work/w.yaml" <<YAML
name: zero2-choice
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults: {seq_len: 8, steps: 4, eval_batches: 1, batch_size: 32, micro_batch_size: 1, seed: 1}
models:
  m: {arch: gpt2, n_layer: 4, n_head: 4, d_model: 256}
jobs:
  - {name: j, model: m, lr: 1e-3}
strategies: [ddp, fsdp, zero2]
YAML
R="$work/run"
if "$saturn" run "$work/w.yaml" --np 2 --device-memory 48MiB --run-dir "$R" --quick-calibration \
  >"$work/run.log" 2>&1; then
  ok "saturn run with 48 MiB per rank: exit 0"
else
  bad "saturn run: exit $?"; tail -5 "$work/run.log"
fi
$py - "$R" <<'PY' && ok "the plan runs j under zero2 on 2 ranks, and it finished" || bad "plan or summary"
import json, sys
plan = json.load(open(sys.argv[1] + "/plans/plan-000.json"))
job = plan["jobs"][0]
assert job["strategy"] == "zero2" and job["devices"] == 2, job
summary = json.load(open(sys.argv[1] + "/summary.json"))
assert [j["status"] for j in summary["jobs"]] == ["finished"], summary["jobs"]
PY
# The estimates behind the choice, from the run's own calibration and store.
"$saturn" profile "$work/w.yaml" --cluster 1x2 --device-memory 48MiB --no-trials --all \
  --store "$R/profiles.h5" >"$work/profile.txt" 2>&1 || bad "saturn profile: exit $?"
$py - "$work/profile.txt" <<'PY' && ok "ddp is out of memory, fsdp fits but is slower than zero2" || bad "profile table"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s+(ddp|fsdp|zero2)\s+2\s+(\S+)\s+(\S+)\s+(?:\S+%\s+)?(\S+)\s+(.*)", line)
    if m:
        rows[m.group(1)] = line.strip()
        print(line.rstrip())
assert "out of memory" in rows["ddp"], rows["ddp"]
est = {k: float(rows[k].split()[2]) for k in ("fsdp", "zero2")}
print(f"estimated step: fsdp {est['fsdp']:.4f} s, zero2 {est['zero2']:.4f} s "
      f"(fsdp {est['fsdp'] / est['zero2']:.2f}x)")
assert est["fsdp"] > est["zero2"], est
PY
finish
