#!/usr/bin/env bash
# `saturn run` end to end on 4 local ranks (issue acceptance):
#  1. a sweep of 8 jobs (2 models x 2 learning rates x 2 batch sizes) runs to completion
#     with the strategies the solver chooses; val losses fall; the run directory is
#     complete;
#  2. SIGUSR1 mid-run -> exit 99 -> `--resume` on another rank count -> the same final weights
#     as the uninterrupted run (1e-5 where the configuration did not change, 5e-5 otherwise);
#  3. a job forced to fail (divergent learning rate) fails alone, with its reason in summary.json.
# Usage: test_run.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0
ok() { echo "ok: $1"; passed=$((passed + 1)); }
bad() { echo "FAIL: $1"; failed=$((failed + 1)); }

for i in $(seq 1 60); do cat /usr/share/common-licenses/BSD; done > "$work/text.txt"
"$saturn" data prepare --input "$work/text.txt" --output "$work/data" >/dev/null || bad "data prepare"

cat > "$work/sweep.yaml" <<YAML
name: e2e-sweep
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 32
  steps: 24
  eval_every: 8
  eval_batches: 2
  checkpoint_every: 8
  # eps 1e-6: Adam's first update of an element with a near-zero gradient is lr*g/(|g|+eps),
  # which turns last-bit differences between strategies into lr-sized steps at eps 1e-8.
  optimizer: {weight_decay: 0.0, eps: 1e-6}
  schedule: {warmup: 2, decay: cosine}
  seed: 11
models:
  small: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
  wide: {arch: llama, n_layer: 4, n_head: 4, d_model: 128, d_ff: 256}
jobs:
  - sweep: {model: [small, wide], lr: [1e-3, 3e-3], batch_size: [8, 16]}
solver: {time_limit: 3, introspection: {interval: 5, threshold: 0.05}}
YAML

run() { "$saturn" run "$@" --progress-interval 5; }

# 1. The whole sweep.
if run "$work/sweep.yaml" --np 4 --run-dir "$work/full" > "$work/full.log" 2>&1; then
  ok "saturn run --np 4 (8 jobs) exit 0"
else
  bad "saturn run --np 4: rc=$?"; tail -30 "$work/full.log"
fi
if $py - "$work/full" <<'PY'
import json, os, sys
d = sys.argv[1]
for f in ["workload.yaml", "cluster.json", "profiles.h5", "plans/plan-000.json", "timeline.jsonl", "summary.json"]:
    assert os.path.exists(os.path.join(d, f)), f"missing {f}"
s = json.load(open(os.path.join(d, "summary.json")))
assert len(s["jobs"]) == 8, len(s["jobs"])
strategies = set()
for j in s["jobs"]:
    assert j["status"] == "finished", (j["id"], j["status"], j.get("reason"))
    jd = os.path.join(d, "jobs", j["id"])
    assert os.path.exists(os.path.join(jd, "final.h5")), jd
    rows = [json.loads(l) for l in open(os.path.join(jd, "metrics.jsonl"))]
    assert [r["step"] for r in rows] == list(range(1, 25)), (j["id"], [r["step"] for r in rows])
    vals = [r["val_loss"] for r in rows if "val_loss" in r]
    assert vals[-1] < vals[0], (j["id"], vals)
    assert os.listdir(os.path.join(jd, "checkpoints")), jd
    strategies |= {seg["strategy"] for seg in j["segments"]}
    assert j["actual_s"] > 0 and j["predicted_s"] > 0
assert "best_job" in s and s["makespan_s"] > 0 and s["predicted_makespan_s"] > 0
print("strategies used:", sorted(strategies), "makespan", round(s["makespan_s"], 1),
      "predicted", round(s["predicted_makespan_s"], 1))
# Which strategies the solver picks depends on measured speeds (on an idle machine it chose ddp
# for every job); each executed segment must run a real strategy the plan offered.
known = {"ddp", "fsdp", "pipeline", "tensor", "offload", "ddp+pipeline", "ddp+tensor"}
assert strategies and strategies <= known, sorted(strategies)
plan = json.load(open(os.path.join(d, "plans", "plan-000.json")))
assert {j["strategy"].split("[")[0] for j in plan["jobs"]} <= known, plan["jobs"]
events = [json.loads(l)["event"] for l in open(os.path.join(d, "timeline.jsonl"))]
assert events.count("job_start") >= 8 and events.count("job_end") == 8, events
PY
then ok "run directory complete, every job reached its steps, val losses fall, planned strategies ran"
else bad "run directory / strategies"; fi

# 2. Interrupt with SIGUSR1, resume on 2 ranks, compare final weights.
# The saturn process itself (it forwards the signal to mpirun, which forwards it to the ranks).
"$saturn" run "$work/sweep.yaml" --np 4 --run-dir "$work/cut" > "$work/cut.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  if grep -qs '"event":"checkpoint"\|"step":8' "$work"/cut/jobs/*/metrics.jsonl 2>/dev/null; then break; fi
  if ! kill -0 $pid 2>/dev/null; then break; fi
  sleep 0.2
done
kill -USR1 $pid 2>/dev/null
wait $pid; rc=$?
if [ $rc -eq 99 ]; then ok "SIGUSR1 mid-run -> exit 99"; else bad "SIGUSR1: rc=$rc"; tail -20 "$work/cut.log"; fi
if run --resume "$work/cut" --np 2 > "$work/resume.log" 2>&1; then
  ok "saturn run --resume on 2 ranks exit 0"
else
  bad "resume: rc=$?"; tail -30 "$work/resume.log"
fi
if $py - "$work/full" "$work/cut" <<'PY'
import json, os, sys
try:
    import h5py, numpy as np
except ImportError:
    print("h5py absent: final weights not compared"); sys.exit(0)
full, cut = sys.argv[1:]
s = json.load(open(os.path.join(cut, "summary.json")))
f = {j["id"]: j for j in json.load(open(os.path.join(full, "summary.json")))["jobs"]}
worst_same, worst_changed = 0.0, 0.0
for j in s["jobs"]:
    assert j["status"] == "finished", (j["id"], j["status"])
    # Same strategy and degree in every segment of both runs: within 1e-5 (bit-exact is the
    # goal; differences up to 7.9e-7 were seen and are not explained yet). Otherwise reductions
    # ran in another order: fp32
    # round-off, amplified by Adam over the remaining steps: within 5e-5 relative.
    configs = {(g["strategy"], g["devices"]) for g in j["segments"] + f[j["id"]]["segments"]}
    same = len(configs) == 1
    a = h5py.File(os.path.join(full, "jobs", j["id"], "final.h5"))
    b = h5py.File(os.path.join(cut, "jobs", j["id"], "final.h5"))
    for name, ds in a["model"].items():
        x, y = ds[()], b["model"][name][()]
        err = float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30))
        if same:
            worst_same = max(worst_same, err)
            assert err <= 1e-5, (j["id"], name, err, configs)
        else:
            worst_changed = max(worst_changed, err)
            assert err <= 5e-5, (j["id"], name, err, configs)
print(f"final weights vs uninterrupted run: same configuration worst {worst_same:.1e}, "
      f"changed configuration worst {worst_changed:.1e}")
PY
then ok "resumed run's final weights equal the uninterrupted run's"
else bad "final weights after resume"; fi

# 3. A job that diverges fails alone.
sed 's/lr: \[1e-3, 3e-3\]/lr: [1e-3, 1e4]/' "$work/sweep.yaml" > "$work/diverge.yaml"
run "$work/diverge.yaml" --np 4 --run-dir "$work/div" > "$work/div.log" 2>&1; rc=$?
if $py - "$work/div" <<'PY'
import json, os, sys
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
bad = [j for j in s["jobs"] if j["status"] == "failed"]
good = [j for j in s["jobs"] if j["status"] == "finished"]
assert bad and all(j["lr"] > 1e3 for j in bad), [(j["id"], j["status"]) for j in s["jobs"]]
assert all("loss" in j["reason"] for j in bad), [j.get("reason") for j in bad]
assert len(good) + len(bad) == 8, len(good)
print(f"{len(bad)} failed alone ({bad[0]['reason'][:60]}...), {len(good)} finished")
PY
then ok "divergent jobs fail alone with their reason (exit $rc)"
else bad "failing job isolation"; tail -20 "$work/div.log"; fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
