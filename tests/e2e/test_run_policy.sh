#!/usr/bin/env bash
# `saturn run --policy`: a baseline's plan runs on the same executor, never re-plans, and the
# policy is recorded in the plan and summary.json; Saturn's run records every baseline's
# predicted makespan; an unknown policy is a usage error.
# Usage: test_run_policy.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"

prepare_data "$saturn" 20 || bad "data prepare"
cat > "$work/sweep.yaml" <<YAML
name: policy-sweep
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 6, eval_every: 3, eval_batches: 1, checkpoint_every: 3, seed: 3}
models:
  a: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
  b: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
jobs:
  - sweep: {model: [a, b], lr: [1e-3, 3e-3], batch_size: [4]}
solver: {time_limit: 1}
YAML

# Current practice: every job on the whole node (4 ranks), one after another.
if "$saturn" run "$work/sweep.yaml" --np 4 --no-trials --policy current-practice --quiet \
    --run-dir "$work/cp" > "$work/cp.log" 2>&1; then ok "--policy current-practice exit 0"
else bad "--policy current-practice rc=$?"; tail -20 "$work/cp.log"; fi
if $py - "$work/cp" <<'PY'
import json, os, sys
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
plan = json.load(open(os.path.join(d, "plans", "plan-000.json")))
assert s["policy"] == "current-practice" and plan["policy"] == "current-practice", s["policy"]
assert s["replan"] is False and s["plans"] == 1, (s["replan"], s["plans"])
assert not os.path.exists(os.path.join(d, "plans", "plan-001.json"))
assert s["predicted_makespan_s"] > 0 and s["makespan_s"] > 0
segs = sorted((g["start_s"], g["end_s"], g["devices"]) for j in s["jobs"] for g in j["segments"])
assert len(segs) == 4 and all(g[2] == 4 for g in segs), segs
for (s0, e0, _), (s1, e1, _) in zip(segs, segs[1:]):
    assert s1 >= e0 - 1e-6, ("jobs overlap under current practice", segs)
assert all(j["status"] == "finished" for j in s["jobs"])
PY
then ok "current practice: recorded, no re-plan, whole node, one job at a time"
else bad "current-practice run directory"; fi

# Saturn (default policy, no re-planning): records the baselines' predictions.
if "$saturn" run "$work/sweep.yaml" --np 4 --no-trials --no-replan --quiet \
    --run-dir "$work/sat" > "$work/sat.log" 2>&1; then ok "--no-replan exit 0"
else bad "--no-replan rc=$?"; tail -20 "$work/sat.log"; fi
if $py - "$work/sat" <<'PY'
import json, os, sys
s = json.load(open(os.path.join(sys.argv[1], "summary.json")))
assert s["policy"] == "saturn" and s["replan"] is False and s["plans"] == 1, s
b = s["predicted_baselines_s"]
assert set(b) == {"current-practice", "optimus-greedy", "min"}, b
assert all(v > 0 for v in b.values()), b
# Saturn's plan is at least as good as every baseline's on the same problem (its solve starts
# from the same moment; the baselines' predictions do not include Saturn's solve time).
assert s["predicted_makespan_s"] <= min(b.values()) + s["solve_time_s"] + 1e-3, s
PY
then ok "saturn records every baseline's predicted makespan"
else bad "baseline predictions"; fi

"$saturn" run "$work/sweep.yaml" --np 4 --policy fastest --run-dir "$work/bad" > "$work/bad.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q "fastest" "$work/bad.log"; then ok "unknown policy: exit 2 naming it"
else bad "unknown policy rc=$rc"; cat "$work/bad.log"; fi

finish
