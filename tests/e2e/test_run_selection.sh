#!/usr/bin/env bash
# Selection inside the batch (workload `selection:`, docs/workload.md "Selection") on 4 local
# ranks, a 16-job sweep (2 models x 4 learning rates x 2 batch sizes, reproducible):
#  1. the sweep without selection, for its makespan and every job's final val loss;
#  2. successive-halving, reduction factor 2, 3 rungs (steps 32, 64, 128 of 256): the test
#     recomputes the rule from the jobs' metrics.jsonl (val loss at each rung's step; ties by
#     workload order) and checks that exactly the jobs it stops are stopped, at their rung, with
#     status, reason, rung and metric in summary.json; the survivors finish; the best job by
#     final val loss is the full run's best; the makespan ratio is printed (and must be < 1:
#     the sweep does 1280 of its 4096 job-steps; with 64 steps per job, each segment's start
#     and evaluation weighed so much that the ratio went from 0.6 to 1.6 with the load);
#  3. asha, interrupted by SIGUSR1 once some decisions are made and resumed on 2 ranks: every
#     decision made before the signal stands after the resume, and each decision follows the
#     rule at its time (a promoted job was among the best floor(n / 2) of the n jobs at its rung
#     then; a stopped one was not among the best max(1, floor(n / 2)) when the rung completed);
#  4. a job failing under selection stays withdrawn (and failed) across --resume; a corrupt
#     saved selection state is exit 2 naming run_state.json and the field.
# Usage: test_run_selection.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1

prepare_data "$saturn" 40 || bad "data prepare"

write_sweep() {  # write_sweep FILE STEPS EVAL_EVERY [SELECTION-LINE]
  cat > "$1" <<YAML
name: e2e-select
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 32
  steps: $2
  eval_every: $3
  eval_batches: 2
  reproducible: true
  optimizer: {weight_decay: 0.0}
  schedule: {warmup: 2, decay: cosine}
  seed: 5
models:
  a: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 48}
  b: {arch: llama, n_layer: 2, n_head: 2, d_model: 48, d_ff: 96}
jobs:
  - sweep: {model: [a, b], lr: [3e-4, 1e-3, 3e-3, 1e-2], batch_size: [4, 8]}
strategies: [ddp]
solver: {time_limit: 2, introspection: {interval: 60, threshold: 0.05}}
${4:-}
YAML
}
write_sweep "$work/full.yaml" 256 32
write_sweep "$work/sha.yaml" 256 32 \
  "selection: {method: successive-halving, metric: val_loss, min_steps: 32, reduction_factor: 2, max_rungs: 3}"
write_sweep "$work/asha.yaml" 64 8 \
  "selection: {method: asha, min_steps: 8, reduction_factor: 2, max_rungs: 3}"
run() { "$saturn" run "$@" --progress-interval 30; }

start=$(date +%s)
if run "$work/full.yaml" --np 4 --run-dir "$work/full" > "$work/full.log" 2>&1; then
  ok "sweep without selection: exit 0 ($(($(date +%s) - start)) s)"
else
  bad "sweep without selection: rc=$?"; tail -20 "$work/full.log"
fi
start=$(date +%s)
if run "$work/sha.yaml" --np 4 --run-dir "$work/sha" > "$work/sha.log" 2>&1; then
  ok "successive-halving sweep: exit 0 ($(($(date +%s) - start)) s)"
else
  bad "successive-halving sweep: rc=$?"; tail -20 "$work/sha.log"
fi

# The rule, recomputed from metrics.jsonl, against summary.json.
if $py - "$work/sha" "$work/full" <<'PY'
import json, math, os, sys
run, full = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(run, "summary.json")))
f = json.load(open(os.path.join(full, "summary.json")))
order = [j["id"] for j in s["jobs"]]  # workload order: the tie rule's
rungs, eta = [32, 64, 128], 2
assert s["selection"]["rung_steps"] == rungs, s["selection"]
def val_at(job, step):
    v = None
    for line in open(os.path.join(run, "jobs", job, "metrics.jsonl")):
        r = json.loads(line)
        if r.get("step") == step and "val_loss" in r:
            v = r["val_loss"]
    return v
alive, expect_stop = list(order), {}
for k, step in enumerate(rungs):
    vals = {j: val_at(j, step) for j in alive}
    missing = [j for j, v in vals.items() if v is None]
    assert not missing, f"rung {k}: no val_loss at step {step} for {missing}"
    ranked = sorted(alive, key=lambda j: (vals[j], order.index(j)))
    keep = max(1, len(ranked) // eta)
    for j in ranked[keep:]:
        expect_stop[j] = (k, step, vals[j])
    alive = ranked[:keep]
assert len(expect_stop) == 14 and len(alive) == 2, (len(expect_stop), alive)
jobs = {j["id"]: j for j in s["jobs"]}
for j, (k, step, v) in expect_stop.items():
    x = jobs[j]
    assert x["status"] == "stopped" and x.get("stopped_by") == "selection", (j, x["status"])
    assert x["rung"] == k and x["rung_step"] == step and x["steps_done"] == step, (j, x)
    assert abs(x["metric"]["val_loss"] - v) < 1e-12, (j, x["metric"], v)
    assert f"rung {k} (step {step})" in x["reason"], x["reason"]
for j in alive:
    assert jobs[j]["status"] == "finished" and jobs[j]["steps_done"] == 256, (j, jobs[j]["status"])
stopped = sorted(j for j in jobs if jobs[j]["status"] == "stopped")
assert stopped == sorted(expect_stop), (stopped, sorted(expect_stop))
assert s["exit_code"] == 0, s["exit_code"]
# The survivors trained exactly as in the full run (reproducible, paused and resumed at rungs).
full_best = min((j for j in f["jobs"] if j["status"] == "finished"), key=lambda j: j["final_val_loss"])
assert s["best_job"]["id"] == full_best["id"], (s["best_job"], full_best["id"])
assert abs(s["best_job"]["val_loss"] - full_best["final_val_loss"]) < 1e-12
# A promoted job goes on only where a plan adopted after its promotion placed it: never on the
# devices of the plan made before its rung.
events = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
plans = {}
for name in os.listdir(os.path.join(run, "plans")):
    p = json.load(open(os.path.join(run, "plans", name)))
    plans[int(name[5:8])] = {j["id"]: sorted(j["ranks"]) for j in p["jobs"]}
checked = 0
for i, e in enumerate(events):
    if e.get("event") != "promote":
        continue
    later = events[i + 1:]
    start = next(x for x in later if x.get("event") == "job_start" and x["job"] == e["job"])
    placing = [x for x in later[:later.index(start)] if x.get("event") == "replan"]
    assert placing, f"{e['job']} restarted after its rung {e['rung']} without a plan placing it"
    assert plans[placing[-1]["plan"]][e["job"]] == sorted(start["ranks"]), (e, start, placing[-1])
    checked += 1
assert checked > 0
ratio = s["makespan_s"] / f["makespan_s"]
print(f"successive-halving: stopped {len(stopped)} of 16 as the rule says; best {full_best['id']} "
      f"(the full run's best); makespan {s['makespan_s']:.2f} s vs {f['makespan_s']:.2f} s "
      f"without selection: ratio {ratio:.2f}")
assert ratio < 1, f"selection made the batch slower: ratio {ratio:.2f}"
PY
then ok "successive-halving: stopped set, rungs, metrics, best job, makespan"
else bad "successive-halving: the run does not match the rule"; fi

# 3. asha, SIGUSR1 after the first decisions, resumed on 2 ranks.
# The saturn process itself (it forwards the signal to mpirun, which forwards it to the ranks).
"$saturn" run "$work/asha.yaml" --np 4 --run-dir "$work/asha" --progress-interval 30 \
  > "$work/asha1.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  if grep -qs '"event":"selection_stop"' "$work/asha/timeline.jsonl"; then break; fi
  if ! kill -0 $pid 2>/dev/null; then break; fi
  sleep 0.1
done
cp "$work/asha/timeline.jsonl" "$work/asha-before.jsonl" 2>/dev/null
kill -USR1 $pid 2>/dev/null
wait $pid
rc=$?
if [ $rc -eq 99 ]; then
  ok "asha: SIGUSR1 -> exit 99"
elif [ $rc -eq 0 ]; then
  bad "asha: the sweep ended before SIGUSR1 (no resume tested)"
else
  bad "asha: rc=$rc after SIGUSR1"; tail -20 "$work/asha1.log"
fi
if run --resume "$work/asha" --np 2 > "$work/asha2.log" 2>&1; then
  ok "asha: --resume on 2 ranks exit 0"
else
  bad "asha: --resume rc=$?"; tail -20 "$work/asha2.log"
fi
if $py - "$work/asha" "$work/asha-before.jsonl" <<'PY'
import json, os, sys
run, before = sys.argv[1], sys.argv[2]
s = json.load(open(os.path.join(run, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
events = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
early = [json.loads(l) for l in open(before)]
decided = {}
for e in events:
    if e.get("event") in ("promote", "selection_stop"):
        key = (e["job"], e["rung"])
        assert key not in decided, f"decided twice: {key}"
        decided[key] = e["event"]
n_before = 0
for e in early:
    if e.get("event") in ("promote", "selection_stop"):
        n_before += 1
        assert decided[(e["job"], e["rung"])] == e["event"], e
        if e["event"] == "selection_stop":
            assert jobs[e["job"]]["status"] == "stopped", (e["job"], jobs[e["job"]]["status"])
assert n_before > 0, "no decision before the signal"
# Each decision against the rule at its time: the jobs that had reached the rung by then (the
# timeline's rung events before it), ranked by val loss (missing last, ties by workload order).
order = [j["id"] for j in s["jobs"]]
reached = {}
for e in events:
    if e.get("event") == "rung":
        reached.setdefault(e["rung"], {})[e["job"]] = e.get("val_loss")
    elif e.get("event") in ("promote", "selection_stop"):
        there = reached.get(e["rung"], {})
        ranked = sorted(there, key=lambda j: (there[j] is None, there[j] or 0, order.index(j)))
        place = ranked.index(e["job"]) + 1
        quota = len(ranked) // 2
        if e["event"] == "promote":
            assert place <= max(1, quota), ("promoted outside the top", e, place, len(ranked))
        else:
            assert place > max(1, quota), ("stopped inside the top", e, place, len(ranked))
assert all((j, k) in decided for k, js in reached.items() for j in js), "undecided jobs"
finished = [j for j in jobs.values() if j["status"] == "finished"]
stopped = [j for j in jobs.values() if j["status"] == "stopped"]
assert len(finished) + len(stopped) == 16 and s["exit_code"] == 0, (len(finished), len(stopped))
assert all(j.get("stopped_by") == "selection" for j in stopped)
print(f"asha: {n_before} decisions before SIGUSR1 kept after --resume on 2 ranks; "
      f"{len(finished)} finished, {len(stopped)} stopped; rungs reached: "
      f"{ {k: len(v) for k, v in sorted(reached.items())} }")
PY
then ok "asha: decisions kept across SIGUSR1 and --resume, each by the rule at its time"
else bad "asha: decisions not kept or rule broken"; fi

# A job that fails under selection is withdrawn from it, and --resume keeps it out: it stays
# failed (its rungs were decided without it) and nothing of it runs again.
cat > "$work/fail.yaml" <<YAML
name: e2e-select-fail
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 32, steps: 16, eval_every: 4, eval_batches: 1, batch_size: 4, seed: 5}
models:
  a: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
jobs:
  - sweep: {model: a, lr: [1e-3, 3e-3, 1e-2]}
strategies: [ddp]
solver: {time_limit: 1}
selection: {method: successive-halving, min_steps: 4, reduction_factor: 2, max_rungs: 2}
YAML
SATURN_FAIL_JOB=a-lr3e-3-bs4:2 "$saturn" run "$work/fail.yaml" --np 2 --run-dir "$work/fail" \
  --progress-interval 30 > "$work/fail1.log" 2>&1
rc1=$?
"$saturn" run --resume "$work/fail" --np 2 --progress-interval 30 > "$work/fail2.log" 2>&1
rc2=$?
if [ $rc1 -eq 1 ] && [ $rc2 -eq 1 ] && $py - "$work/fail" <<'PY'
import json, os, sys
run = sys.argv[1]
s = json.load(open(os.path.join(run, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
f = jobs["a-lr3e-3-bs4"]
assert f["status"] == "failed" and "withdrawn from selection" in f["reason"], f
starts = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
starts = [e for e in starts if e.get("event") == "job_start" and e["job"] == "a-lr3e-3-bs4"]
assert len(starts) == 1, starts  # not run again by --resume
state = json.load(open(os.path.join(run, "run_state.json")))
assert state["selection"]["jobs"]["a-lr3e-3-bs4"]["withdrawn"] is True, state["selection"]
others = [j for i, j in jobs.items() if i != "a-lr3e-3-bs4"]
assert sorted(j["status"] for j in others) == ["finished", "stopped"], others
PY
then ok "a failed job stays withdrawn from selection across --resume (exit 1 both times)"
else bad "failed job under selection: rc=$rc1/$rc2"; tail -5 "$work/fail2.log"; fi

# A corrupt saved selection state is an input error (exit 2) naming the file and the field,
# found before any rank trains.
cp -r "$work/asha" "$work/asha-corrupt"
$py - "$work/asha-corrupt/run_state.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
job = sorted(s["selection"]["jobs"])[0]
s["selection"]["jobs"][job]["level"] = "two"
json.dump(s, open(sys.argv[1], "w"))
print(job)
PY
out=$("$saturn" run --resume "$work/asha-corrupt" --np 1 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q "asha-corrupt/run_state.json: selection.jobs.*level must be" <<<"$out"; then
  ok "corrupt selection state in run_state.json: exit 2 naming the file and the field"
else
  bad "corrupt selection state: rc=$rc"; echo "$out" | tail -5
fi

# Selection needs re-planning: a baseline policy is refused with the reason.
if out=$("$saturn" run "$work/sha.yaml" --np 1 --run-dir "$work/nope" --policy min 2>&1); then
  bad "selection with --policy min: exit 0"
else
  rc=$?
  if [ $rc -eq 2 ] && grep -q "needs re-planning" <<<"$out"; then
    ok "selection with --policy min: exit 2 with the reason"
  else
    bad "selection with --policy min: rc=$rc"; echo "$out" | tail -5
  fi
fi
finish
