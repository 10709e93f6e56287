#!/usr/bin/env bash
# Signals and what summary.json says about them (issue 15, item 8):
#  1. SIGINT to `saturn run --np 2`: every job checkpoints, exit 99 (it used to exit 1: mpirun
#     itself killed the ranks a second after SIGINT); --resume finishes; no segment is marked
#     "interrupted", and each job's segments chain (a segment ends where the next starts);
#  2. SIGTERM to rank 1, then to rank 0: exit 99, named "signal 15 (SIGTERM)" in the log, the
#     timeline and the stop reasons (it could be logged as "signal 10");
#  3. kill -9 of a rank in two successive runs, then a resume to the end: the killed segments
#     are "interrupted", each ending at the step its job's next segment started from (they all
#     used to get the same end_step);
#  4. --resume of a start stopped before its first plan starts the batch afresh; --resume of a
#     directory that never held a run is still refused.
#  5. The exit code is the run's, however it is stopped (issue 28, item 8): SIGTERM to mpirun
#     alone, and to every process of the tree at once (as a batch system sends it), exit 99 (it
#     was 1: mpirun's own status); kill -9 of rank 0 exits 1 (it was 137, outside 0/1/2/99).
# Usage: test_run_signals.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/run_helpers.sh"
export OMP_NUM_THREADS=1 SATURN_CALIBRATION_CACHE=none
started=()  # launchers this test started, killed on exit if still there
trap 'for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$work"' EXIT

prepare_data "$saturn" 20 || bad "data prepare"
cat >"$work/w.yaml" <<YAML
name: signals
data: {train: $work/data/train.bin, val: $work/data/val.bin}
defaults:
  seq_len: 32
  steps: 2000
  eval_every: 100
  eval_batches: 1
  checkpoint_every: 10
  seed: 3
models:
  small: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
jobs:
  - sweep: {model: [small], lr: [1e-3, 3e-3], batch_size: [8]}
solver: {time_limit: 1}
YAML
# Jobs of 2000 steps are still training when sections 1 and 3 signal them (at 400 steps a
# loaded machine could finish them first); section 2 resumes nothing, so its jobs never end.
sed 's/^  steps: 2000$/  steps: 1000000/' "$work/w.yaml" >"$work/long.yaml"

# The job of run directory $1 that has written the fewest steps, and its largest step.
slowest_job() {
  $py - "$1" <<'PY'
import glob, json, os, sys
best = None
for f in sorted(glob.glob(sys.argv[1] + "/jobs/*/metrics.jsonl")):
    steps = [0]
    for line in open(f):
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass
    job = os.path.basename(os.path.dirname(f))
    if best is None or max(steps) < best[1]:
        best = (job, max(steps))
print(*best)
PY
}
job_past() {  # job_past DIR JOB STEP: wait until JOB has written a step past STEP
  for _ in $(seq 1 900); do
    [ "$($py -c 'import json,sys; print(max([0]+[json.loads(l)["step"] for l in open(sys.argv[1]) if l.strip()]))' "$1/jobs/$2/metrics.jsonl" 2>/dev/null || echo 0)" -gt "$3" ] && return 0
    sleep 0.1
  done
  return 1
}

# summary_check DIR EXIT_CODE [MIN_INTERRUPTED]: every job's segments chain from step 0;
# "interrupted" appears at least MIN_INTERRUPTED times, and never when MIN_INTERRUPTED is 0.
summary_check() {
  $py - "$@" <<'PY'
import json, os, sys
d, code = sys.argv[1], int(sys.argv[2])
least = int(sys.argv[3]) if len(sys.argv) > 3 else 0
s = json.load(open(os.path.join(d, "summary.json")))
assert s["exit_code"] == code, s["exit_code"]
interrupted = 0
for j in s["jobs"]:
    segs = j["segments"]
    assert segs[0]["start_step"] == 0, (j["id"], segs)
    for a, b in zip(segs, segs[1:]):
        assert a["end_step"] == b["start_step"], (j["id"], "segments do not chain", segs)
        assert a["status"] in ("stopped", "interrupted"), (j["id"], segs)
    interrupted += sum(seg["status"] == "interrupted" for seg in segs)
    if code == 0:
        assert j["status"] == "finished" and segs[-1]["end_step"] == j["steps"], (j["id"], segs)
assert interrupted >= least and (least > 0 or interrupted == 0), (interrupted, least)
print("segments:", {j["id"]: [(g["start_step"], g["end_step"], g["status"]) for g in j["segments"]] for j in s["jobs"]})
PY
}

# 1. SIGINT to the launcher.
A="$work/sigint"
start "$A" "$work/w.yaml" --run-dir "$A"
wait_past "$A" 20 || bad "sigint: no training"
kill -INT "$launcher"
wait "$launcher"
rc=$?
[ $rc -eq 99 ] && grep -q "SIGINT: asking every rank to checkpoint and stop" "$A.log" &&
  summary_check "$A" 99 >/dev/null && ok "SIGINT: every job checkpointed, exit 99, summary.json says 99" ||
  { bad "SIGINT: exit $rc"; tail -5 "$A.log"; }
"$saturn" run --resume "$A" --np 2 --no-trials >"$A.resume.log" 2>&1 && summary_check "$A" 0 &&
  ok "SIGINT: --resume finished; segments chain, none 'interrupted'" || { bad "SIGINT: resume"; tail -5 "$A.resume.log"; }

# 2. SIGTERM to one rank.
for who in 1 0; do
  B="$work/sigterm-rank$who"
  start "$B" "$work/long.yaml" --run-dir "$B"
  wait_past "$B" 20 || bad "sigterm $who: no training"
  victim=$(rank $who)
  if [ -n "$victim" ]; then
    kill -TERM "$victim"
  else
    echo "sigterm $who: no rank $who of launcher $launcher found"
  fi
  wait_launcher 120
  rc=$?
  if [ $rc -eq 99 ] && grep -q "warning: signal 15 (SIGTERM) received: checkpointing every running job" "$B.log" &&
    ! grep -q "signal 10" "$B.log" && $py - "$B" <<'PY'
import json, os, sys
events = [json.loads(l) for l in open(os.path.join(sys.argv[1], "timeline.jsonl"))]
assert [e["signal"] for e in events if e["event"] == "signal"] == [15], events
stops = [e["reason"] for e in events if e["event"] == "job_stop"]
assert stops and all(r == "signal 15 (SIGTERM)" for r in stops), stops
PY
  then
    ok "SIGTERM to rank $who (pid $victim): exit 99, named signal 15 (SIGTERM) in the log and the timeline"
  else
    bad "SIGTERM to rank $who (pid $victim): exit $rc"; grep -i signal "$B.log" | head -5
  fi
done

# 3. kill -9 of a rank, twice, then a resume to the end.
C="$work/killed"
start "$C" "$work/w.yaml" --run-dir "$C"
wait_past "$C" 40 || bad "kill -9: no training"
kill -9 "$(rank 1)"
wait "$launcher"
# The killed rank's job stopped there; the other rank's may train on until mpirun's SIGTERM
# reaches it (seconds, hundreds of steps). The second kill must land on the first while it
# trains: on the rank that resumed it.
read -r slow reached < <(slowest_job "$C")
start "$C.2" --resume "$C"
job_past "$C" "$slow" $((reached + 40)) || bad "kill -9: the first resume did not train $slow"
victim=$(sed -n "s/^\[saturn r\([0-9]*\)\] job $slow: resuming from.*/\1/p" "$C.2.log" | head -1)
kill -9 "$(rank "${victim:-1}")"
wait "$launcher"
"$saturn" run --resume "$C" --np 2 --no-trials >"$C.3.log" 2>&1 || { bad "kill -9: last resume: exit $?"; tail -5 "$C.3.log"; }
# The killed rank's job in each killed run is "interrupted" (the other rank's job may have
# checkpointed on mpirun's SIGTERM and stopped).
summary_check "$C" 0 2 && ok "kill -9 twice: the killed segments are 'interrupted', each ends where its job's next starts" ||
  bad "kill -9 twice: summary.json segments"

# 4. A start killed before its first plan (while profiling) leaves the run's copy of the
# workload and jobs/ but no timeline.jsonl; the --resume a requeued `saturn sbatch` job passes
# then starts the batch from the beginning (it used to be refused: "holds no run to resume").
E="$work/early"
sed 's/^  steps: 2000$/  steps: 20/; s/^name: signals$/name: early/' "$work/w.yaml" >"$work/w-early.yaml"
mkdir -p "$E/jobs"
cp "$work/w-early.yaml" "$E/workload.yaml"
if "$saturn" run "$work/w-early.yaml" --run-dir "$E" --resume --np 2 --no-trials >"$E.log" 2>&1 &&
  grep -q "never reached its first plan" "$E.log" &&
  $py - "$E" <<'PY'
import json, sys
s = json.load(open(sys.argv[1] + "/summary.json"))
assert [j["status"] for j in s["jobs"]] == ["finished", "finished"], s["jobs"]
PY
then
  ok "--resume of a start stopped before its first plan: the batch starts afresh and finishes"
else
  bad "--resume of a start stopped before its first plan"; tail -5 "$E.log"
fi
# A directory that never held this run is still refused.
mkdir -p "$work/empty"
"$saturn" run "$work/w-early.yaml" --run-dir "$work/empty" --resume --np 2 --no-trials >"$work/empty.log" 2>&1
rc=$?
[[ $rc == 2 ]] && grep -q "holds no run to resume" "$work/empty.log" &&
  ok "--resume of a directory with no run: exit 2" ||
  { bad "--resume of a directory with no run: exit $rc"; tail -3 "$work/empty.log"; }
# 5. The exit code is the one the run recorded, however the launcher's mpirun ends.
for how in mpirun tree; do
  T="$work/term-$how"
  start "$T" "$work/long.yaml" --run-dir "$T"
  wait_past "$T" 20 || bad "SIGTERM to $how: no training"
  mpirun_pid=$(pgrep -P "$launcher" | head -1)
  if [ $how == mpirun ]; then
    kill -TERM "$mpirun_pid"
  else
    kill -TERM "$launcher" "$mpirun_pid" $(pgrep -P "$mpirun_pid")
  fi
  wait_launcher 120
  rc=$?
  if [ $rc -eq 99 ] && grep -q '"event":"run_end".*"exit_code":99' "$T/timeline.jsonl"; then
    ok "SIGTERM to $how: exit 99, the code the timeline recorded"
  else
    bad "SIGTERM to $how: exit $rc"; tail -5 "$T.log"
  fi
done
K="$work/kill-rank0"
start "$K" "$work/long.yaml" --run-dir "$K"
wait_past "$K" 20 || bad "kill -9 of rank 0: no training"
kill -9 "$(rank 0)"
wait_launcher 120
rc=$?
[ $rc -eq 1 ] && grep -q "rank 0 recorded no exit code" "$K.log" &&
  ok "kill -9 of rank 0: exit 1 with the reason (not 137)" ||
  { bad "kill -9 of rank 0: exit $rc"; tail -5 "$K.log"; }
finish
