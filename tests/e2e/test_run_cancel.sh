#!/usr/bin/env bash
# `saturn cancel RUN_DIR JOB_ID...` on a batch of 3 jobs on 2 local ranks: an unknown id is
# exit 2 with the valid ids and writes no request; cancelling a running job stops it at a step
# boundary (status cancelled, steps_done below its steps, a checkpoint), a job still waiting
# for a rank never starts (cancelled at step 0), the third finishes, and the batch exits 0.
# Usage: test_run_cancel.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1

prepare_data "$saturn" 20 || bad "data prepare"
# Long enough (about 15 s per job here) that the running job is still running when the cancel
# arrives (a poll every half second, two CLI starts): at 2000 steps it finished first under load.
steps=20000
cat > "$work/three.yaml" <<YAML
name: e2e-cancel
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 32, steps: $steps, eval_every: 100, eval_batches: 1, batch_size: 4, seed: 3}
models:
  a: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 16}
jobs:
  - {name: first, model: a, lr: 1e-3}
  - {name: second, model: a, lr: 2e-3}
  - {name: third, model: a, lr: 3e-3}
strategies: [ddp]
solver: {time_limit: 1}
YAML
"$saturn" run "$work/three.yaml" --np 2 --run-dir "$work/run" --progress-interval 30 \
  > "$work/run.log" 2>&1 &
pid=$!
# A running job (after its first evaluation) and one still waiting for a rank: 2 ranks, 3 jobs.
pick() {
  $py - "$work/run" <<'PY' 2>/dev/null
import json, os, sys
run = sys.argv[1]
ev = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
started = {e["job"] for e in ev if e.get("event") == "job_start"}
ended = {e["job"] for e in ev if e.get("event") in ("job_end", "failure", "job_stop")}
def evaluated(j):
    f = os.path.join(run, "jobs", j, "metrics.jsonl")
    return os.path.exists(f) and '"val_loss"' in open(f).read()
running = [j for j in sorted(started - ended) if evaluated(j)]
waiting = [j for j in ("first", "second", "third") if j not in started]
if running and waiting:
    print(running[0], waiting[0])
PY
}
running="" pending=""
for _ in $(seq 1 600); do
  read -r running pending <<<"$(pick)"
  [ -n "$running" ] && break
  if ! kill -0 $pid 2>/dev/null; then break; fi
  sleep 0.1
done
[ -n "$running" ] || bad "no job running while another waits"
if out=$("$saturn" cancel "$work/run" nosuchjob 2>&1); then
  bad "cancel of an unknown job: exit 0"
else
  rc=$?
  if [ $rc -eq 2 ] && grep -q "unknown job 'nosuchjob'" <<<"$out" &&
     [ -z "$(ls "$work/run/spool" 2>/dev/null)" ]; then
    ok "cancel of an unknown job: exit 2, nothing written"
  else
    bad "cancel of an unknown job: rc=$rc"; echo "$out" | tail -3
  fi
fi
if "$saturn" cancel "$work/run" "$running" "$pending" > "$work/cancel.log" 2>&1; then
  ok "saturn cancel $running $pending: exit 0"
else
  bad "saturn cancel: rc=$?"; cat "$work/cancel.log"
fi
wait $pid
rc=$?
[ $rc -eq 0 ] && ok "batch exit 0 with cancelled jobs" || { bad "batch rc=$rc"; tail -20 "$work/run.log"; }
if $py - "$work/run" "$running" "$pending" "$steps" <<'PY'
import json, os, sys
run, running, pending, steps = sys.argv[1:]
s = json.load(open(os.path.join(run, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
r, p = jobs[running], jobs[pending]
assert r["status"] == "cancelled" and 0 < r["steps_done"] < int(steps), (r["status"], r["steps_done"])
assert "cancelled" in r["reason"], r
ck = os.listdir(os.path.join(run, "jobs", running, "checkpoints"))
assert any(f.startswith("step-") for f in ck), ck
assert p["status"] == "cancelled" and p["steps_done"] == 0 and not p["segments"], p
other = next(j for j in jobs if j not in (running, pending))
assert jobs[other]["status"] == "finished", jobs[other]["status"]
ev = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
assert sorted(e["job"] for e in ev if e.get("event") == "cancel") == sorted([running, pending])
assert os.listdir(os.path.join(run, "spool", "done")), "request not retired"
print(f"cancelled {running} at step {r['steps_done']} (running) and {pending} (waiting)")
PY
then ok "summary.json: cancelled jobs, the other finished"
else bad "summary.json after cancel"; fi
finish
