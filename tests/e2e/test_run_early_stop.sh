#!/usr/bin/env bash
# `early_stop:` under saturn run (docs/workload.md, "early_stop") on 2 local ranks, 3 jobs:
# `div` (lr 10, `diverged: true` from defaults) diverges, `pat` (patience 1) stops at its first
# evaluation that does not improve, `ok` finishes. The test recomputes both rules from the jobs'
# metrics.jsonl and checks summary.json (status stopped, stopped_by early_stop, rule, step,
# metric), the checkpoint at the stop, the timeline's early_stop events, exit 0, and that
# `--resume` keeps both stopped.
# Usage: test_run_early_stop.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1

prepare_data "$saturn" 20 || bad "data prepare"
cat > "$work/es.yaml" <<YAML
name: e2e-early-stop
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 32
  batch_size: 4
  eval_batches: 1
  reproducible: true
  seed: 3
  schedule: {decay: constant}
  early_stop: {diverged: true}
models:
  a: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
jobs:
  - {name: div, model: a, lr: 10, steps: 200, eval_every: 10, checkpoint_every: 5}
  - {name: pat, model: a, lr: 3e-2, steps: 400, eval_every: 2, early_stop: {patience: 1}}
  - {name: ok, model: a, lr: 1e-3, steps: 30, eval_every: 10}
strategies: [ddp]
solver: {time_limit: 1}
YAML
start=$(date +%s)
if "$saturn" run "$work/es.yaml" --np 2 --run-dir "$work/run" --progress-interval 30 \
  > "$work/run.log" 2>&1; then
  ok "batch with early_stop: exit 0 ($(($(date +%s) - start)) s)"
else
  bad "batch with early_stop: rc=$?"; tail -20 "$work/run.log"
fi

check() {  # check RUN_DIR: the rules recomputed from metrics.jsonl against summary.json
  $py - "$1" <<'PY'
import json, math, os, sys
run = sys.argv[1]
s = json.load(open(os.path.join(run, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
def metrics(job):
    rows = {}
    for line in open(os.path.join(run, "jobs", job, "metrics.jsonl")):
        r = json.loads(line)
        rows[r["step"]] = r
    return [rows[k] for k in sorted(rows)]
# diverged: the first step whose loss (or val_loss) is not finite or above 2x step 1's loss;
# a non-finite training step is not in metrics.jsonl (the trainer stops before writing it).
m = metrics("div")
first = m[0]["loss"]
expect = None
for r in m:
    vals = [("loss", r["loss"])] + ([("val_loss", r["val_loss"])] if "val_loss" in r else [])
    for name, v in vals:
        if not math.isfinite(v) or v > 2 * first:
            expect = (r["step"], name)
            break
    if expect:
        break
d = jobs["div"]
assert d["status"] == "stopped" and d.get("stopped_by") == "early_stop", d
es = d["early_stop"]
assert es["rule"] == "diverged", es
if expect is None:  # non-finite at the step after the last line
    expect = (m[-1]["step"] + 1, es["metric"])
    assert es["metric"] in ("loss", "grad_norm") and es["value"] in ("nan", "inf", "-inf"), es
assert (es["step"], es["metric"]) == expect, (es, expect)
assert es["step"] < 200 and "diverged" in d["reason"], d
# patience 1: the first evaluation whose val_loss is not below the best before it.
m = metrics("pat")
best, expect = None, None
for r in m:
    if "val_loss" not in r:
        continue
    if best is not None and not r["val_loss"] < best:
        expect = r["step"]
        break
    best = r["val_loss"] if best is None else min(best, r["val_loss"])
p = jobs["pat"]
assert expect is not None, "pat: val_loss improved at every evaluation"
assert p["status"] == "stopped" and p.get("stopped_by") == "early_stop", p
es = p["early_stop"]
assert es["rule"] == "patience" and es["metric"] == "val_loss", es
assert es["step"] == expect and p["steps_done"] == expect, (es, p["steps_done"], expect)
assert abs(es["reference"] - best) < 1e-12, (es, best)
ck = os.path.join(run, "jobs", "pat", "checkpoints", f"step-{expect:08}.h5")
assert os.path.exists(ck), f"no checkpoint at the stop: {ck}"
assert jobs["ok"]["status"] == "finished", jobs["ok"]
assert s["exit_code"] == 0, s["exit_code"]
ev = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
stops = {e["job"]: e for e in ev if e.get("event") == "early_stop"}
assert set(stops) == {"div", "pat"}, stops
print(f"div: diverged at step {jobs['div']['early_stop']['step']} "
      f"({jobs['div']['early_stop']['metric']}); pat: patience at step {expect}")
PY
}
if check "$work/run"; then ok "early_stop: rules, summary.json, checkpoint, timeline"
else bad "early_stop: the run does not match the rules"; fi

# --resume keeps both stopped: nothing starts again. They are not profiled or planned either:
# with a device memory no model fits, a resume that priced them would fail (exit 2).
before=$(grep -c '"job_start"' "$work/run/timeline.jsonl")
if "$saturn" run --resume "$work/run" --np 1 --device-memory 4KiB --progress-interval 30 \
  > "$work/resume.log" 2>&1; then
  after=$(grep -c '"job_start"' "$work/run/timeline.jsonl")
  if [ "$before" -eq "$after" ] && check "$work/run" > /dev/null; then
    ok "--resume keeps the early-stopped jobs stopped"
  else
    bad "--resume: jobs started again ($before -> $after job_start events) or summary changed"
  fi
else
  bad "--resume: rc=$?"; tail -20 "$work/resume.log"
fi
finish
