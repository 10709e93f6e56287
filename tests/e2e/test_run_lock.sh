#!/usr/bin/env bash
# One run per run directory, and no orphaned ranks (issue 15, item 2):
#  1. while a run is live in DIR, `saturn run --resume DIR` and a new run in DIR are refused
#     with exit 2, naming the holder's host and pid (run.lock); the live run is undisturbed;
#  2. kill -9 of the `saturn run --np` launcher ends mpirun and the ranks (they used to train
#     on, unowned, into the directory);
#  3. the lock that kill left behind is stale: `--resume` takes it over, saying whose it was,
#     and finishes the batch.
# Usage: test_run_lock.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none
started=()  # launchers this test started, killed on exit if still there
trap 'for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT

prepare_data "$saturn" 20 || bad "data prepare"
cat >"$work/w.yaml" <<YAML
name: lock
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults:
  seq_len: 32
  steps: 400
  eval_every: 100
  eval_batches: 1
  checkpoint_every: 20
  seed: 3
models:
  small: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
jobs:
  - sweep: {model: [small], lr: [1e-3, 3e-3], batch_size: [8]}
solver: {time_limit: 1}
YAML
# A run that outlasts the refused attempts; it is stopped with SIGUSR1 after them.
sed 's/steps: 400/steps: 1000000/' "$work/w.yaml" >"$work/long.yaml"
# A run still training when its rank 0 is killed at step 5 (at 400 steps a loaded machine could
# finish it first, and leave no lock to read).
sed 's/steps: 400/steps: 2000/' "$work/w.yaml" >"$work/mid.yaml"

# Waits until some job of run directory $1 has written step $2 to its metrics.
wait_for_step() {
  for _ in $(seq 1 600); do
    grep -qs "\"step\":$2," "$1"/jobs/*/metrics.jsonl && return 0
    sleep 0.1
  done
  return 1
}
# Processes (other than this shell's) whose command line names run directory $1.
users_of() { pgrep -f -- "--run-dir $1|--resume $1" || true; }

# 1. A live run refuses a second one.
D="$work/live"
"$saturn" run "$work/long.yaml" --np 2 --run-dir "$D" --no-trials --quiet >"$work/live.log" 2>&1 &
live=$!
started+=("$live")
wait_for_step "$D" 5 || bad "the live run did not start training"
holder=$($py -c 'import json, sys; h = json.load(open(sys.argv[1])); print(h["host"], h["pid"])' \
  "$D/run.lock" 2>/dev/null)
read -r host pid <<<"$holder"
[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && ok "run.lock names a live holder: pid $pid on $host" \
  || bad "run.lock: '$holder'"
for second in "--resume $D --np 1" "$work/long.yaml --run-dir $D --np 1"; do
  out=$(timeout 60 "$saturn" run $second --no-trials --quiet 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -q "run directory $D is in use by saturn pid $pid on host $host" <<<"$out"; then
    ok "saturn run $second: refused with exit 2, naming the holder"
  else
    bad "saturn run $second: exit $rc"; tail -3 <<<"$out"
  fi
done
kill -0 "$live" 2>/dev/null && ok "the live run is still running" || bad "the live run ended early"
kill -USR1 "$live"
wait "$live"
rc=$?
# Undisturbed: stopped by the signal alone, each job's metrics one line per step, in order.
if [ $rc -eq 99 ] && $py - "$D" <<'PY'
import json, os, sys
d = sys.argv[1]
s = json.load(open(os.path.join(d, "summary.json")))
for j in s["jobs"]:
    assert j["status"] == "stopped", j
    raw = open(os.path.join(d, "jobs", j["id"], "metrics.jsonl"), "rb").read()
    assert b"\0" not in raw
    steps = [json.loads(l)["step"] for l in raw.decode().splitlines()]
    assert steps == list(range(1, len(steps) + 1)), steps
PY
then
  [ ! -e "$D/run.lock" ] && ok "the live run went on undisturbed, stopped on SIGUSR1 (99), released its lock" \
    || bad "run.lock left after a clean end"
else
  bad "the live run: exit $rc"; tail -5 "$work/live.log"
fi

# 2. kill -9 of the launcher ends mpirun and the ranks.
E="$work/orphans"
"$saturn" run "$work/long.yaml" --np 2 --run-dir "$E" --no-trials --quiet >"$work/orphans.log" 2>&1 &
launcher=$!
started+=("$launcher")
wait_for_step "$E" 5 || bad "the run did not start training"
[ -n "$(users_of "$E")" ] || bad "no process of the run found"
kill -9 "$launcher"
wait "$launcher" 2>/dev/null
gone=0
for _ in $(seq 1 600); do  # up to 60 s: mpirun's teardown is slow on a loaded machine
  if [ -z "$(users_of "$E")" ]; then gone=1; break; fi
  sleep 0.1
done
if [ $gone -eq 1 ]; then
  ok "kill -9 of the launcher: mpirun and every rank ended"
else
  bad "kill -9 of the launcher: still running: $(users_of "$E" | tr '\n' ' ')"
  for p in $(users_of "$E"); do kill -9 "$p" 2>/dev/null; done
fi

# 3. A holder killed outright (kill -9 of rank 0, mpirun ends the rest) leaves a stale lock:
# the next run takes it over, naming whose it was, and finishes the batch.
F="$work/stale"
"$saturn" run "$work/mid.yaml" --np 2 --run-dir "$F" --no-trials --quiet >"$work/stale.log" 2>&1 &
launcher=$!
started+=("$launcher")
wait_for_step "$F" 5 || bad "the run did not start training"
read -r host pid <<<"$($py -c 'import json, sys; h = json.load(open(sys.argv[1])); print(h["host"], h["pid"])' "$F/run.lock")"
kill -9 "$pid"
wait "$launcher" 2>/dev/null
[ -s "$F/run.lock" ] && ok "the killed holder's run.lock is left behind" || bad "no run.lock after kill -9 of rank 0"
if "$saturn" run --resume "$F" --np 2 --no-trials >"$work/resume.log" 2>&1; then
  ok "--resume after the kill: exit 0"
else
  bad "--resume after the kill: exit $?"; tail -5 "$work/resume.log"
fi
grep -q "warning: run directory $F: taking over the lock of saturn pid $pid on host $host (since .*), which is gone" "$work/resume.log" &&
  ok "--resume took the stale lock over, naming its holder (pid $pid)" || { bad "no takeover warning"; grep -i lock "$work/resume.log"; }
[ ! -e "$F/run.lock" ] && ok "the resumed run released the lock" || bad "run.lock left after a clean end"
finish
