#!/usr/bin/env bash
# `early_stop:` under saturn run (docs/workload.md, "early_stop") on 2 local ranks, 5 jobs:
# `div` (lr 10, `diverged: true` from defaults) diverges, `pat` (patience 1) stops at its first
# evaluation that does not improve, `ok` finishes. The test recomputes both rules from the jobs'
# metrics.jsonl and checks summary.json (status stopped, stopped_by early_stop, rule, step,
# metric), the checkpoint at the stop, the timeline's early_stop events, exit 0, and that
# `--resume` keeps them stopped.
# Non-finite values: AdamW with beta2 = 0 and eps 1e-44 divides a step's first moment by that
# step's |gradient|; an embedding row (llama's input embedding is not tied to the head) that
# step 1's batch used and step 2's did not gets 0.9·g1 / 1e-44: its weights overflow to ±Inf in
# step 2's update while steps 1 and 2 have ordinary losses (about 5.5), and step 3's forward
# through such a row is NaN (every seed tried). `nanloss` (checkpoint every 5) stops diverged
# at step 3 on its NaN loss, `nanstate` (checkpoint every step) at step 2, before its checkpoint
# would save the overflowed weights: neither writes a checkpoint after the blow-up, and
# `nanstate`'s newest checkpoint (step 1) holds finite weights and moments only.
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
  l: {arch: llama, n_layer: 1, n_head: 2, d_model: 16}
jobs:
  - {name: div, model: a, lr: 10, steps: 200, eval_every: 10, checkpoint_every: 5}
  - {name: pat, model: a, lr: 3e-2, steps: 400, eval_every: 2, early_stop: {patience: 1}}
  - {name: ok, model: a, lr: 1e-3, steps: 30, eval_every: 10}
  - {name: nanloss, model: l, steps: 200, eval_every: 10, checkpoint_every: 5,
     optimizer: {lr: 0.1, betas: [0.9, 0.0], eps: 1e-44}}
  - {name: nanstate, model: l, steps: 200, eval_every: 10, checkpoint_every: 1,
     optimizer: {lr: 0.1, betas: [0.9, 0.0], eps: 1e-44}}
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
# Non-finite: stopped diverged at the blow-up; metrics.jsonl has the good steps only, with
# ordinary losses (below the 2x rule, so it is the non-finite check that stopped them); no
# checkpoint from the blow-up on, no final.h5.
import h5py, numpy as np
for job, step, metric, every in (("nanloss", 3, "loss", 5), ("nanstate", 2, "weights", 1)):
    j = jobs[job]
    es = j.get("early_stop", {})
    assert j["status"] == "stopped" and j.get("stopped_by") == "early_stop", j
    assert (es.get("rule"), es.get("step"), es.get("metric")) == ("diverged", step, metric), es
    assert es["value"] in ("nan", "inf", "-inf") and es["reference"] == "nan", es
    m = metrics(job)
    recorded = step - 1 if metric == "loss" else step
    assert [r["step"] for r in m] == list(range(1, recorded + 1)), (job, m)
    assert all(math.isfinite(r["loss"]) and r["loss"] < 2 * m[0]["loss"] for r in m), (job, m)
    d = os.path.join(run, "jobs", job)
    assert not os.path.exists(os.path.join(d, "final.h5")), job
    ck = os.path.join(d, "checkpoints")
    kept = sorted(f for f in os.listdir(ck) if f.endswith(".h5")) if os.path.isdir(ck) else []
    good = [f"step-{k:08}.h5" for k in range(every, step, every)]
    assert kept == good, (job, kept, good)
    for f in kept:  # the last good state: every weight and AdamW moment finite
        bad = []
        with h5py.File(os.path.join(ck, f), "r") as h:
            h.visititems(lambda n, o: bad.append(n) if isinstance(o, h5py.Dataset) and
                         o.dtype.kind == "f" and not np.all(np.isfinite(o[()])) else None)
        assert not bad, (job, f, bad)
    if kept:
        assert open(os.path.join(ck, "latest")).read().strip() == kept[-1], job
ev = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
stops = {e["job"]: e for e in ev if e.get("event") == "early_stop"}
assert set(stops) == {"div", "pat", "nanloss", "nanstate"}, stops
print(f"div: diverged at step {jobs['div']['early_stop']['step']} "
      f"({jobs['div']['early_stop']['metric']}); pat: patience at step {expect}; "
      f"nanloss: {jobs['nanloss']['early_stop']['metric']} "
      f"{jobs['nanloss']['early_stop']['value']} at step {jobs['nanloss']['early_stop']['step']}; "
      f"nanstate: {jobs['nanstate']['early_stop']['metric']} "
      f"{jobs['nanstate']['early_stop']['value']} at step {jobs['nanstate']['early_stop']['step']}")
PY
}
if check "$work/run"; then
  ok "early_stop: rules, summary.json, checkpoints (none of poisoned weights), timeline"
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
