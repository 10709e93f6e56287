# Helpers of the tests that start `saturn run --np 2` in the background and signal it. Sourced
# after tests/lib.sh, with $saturn (the executable) and $py (a Python) set; start() adds each
# launcher to the array `started` (declare it, and kill what it holds on exit).

# Largest step any job of run directory $1 has written to its metrics (0 when none).
max_step() {
  $py - "$1" <<'PY' 2>/dev/null || echo 0
import glob, json, sys
steps = [0]
for f in glob.glob(sys.argv[1] + "/jobs/*/metrics.jsonl"):
    for line in open(f):
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass
print(max(steps))
PY
}
wait_past() {  # wait_past DIR STEP
  for _ in $(seq 1 900); do
    [ "$(max_step "$1")" -gt "$2" ] && return 0
    sleep 0.1
  done
  return 1
}
# start DIR [saturn run args]: a launcher in the background ($launcher), with SIGINT at its
# default (a non-interactive shell starts background commands with SIGINT ignored).
start() {
  local dir=$1
  shift
  env --default-signal=INT "$saturn" run "$@" --np 2 --no-trials >"$dir.log" 2>&1 &
  launcher=$!
  started+=("$launcher")
}
# wait_launcher SECONDS: waits for the launcher and returns its exit status; one still running
# after SECONDS is killed (kill -9 of the launcher ends mpirun and the ranks) and gives 124, so a
# lost signal fails the test instead of hanging it on a run that never ends.
wait_launcher() {
  local _
  for _ in $(seq 1 $(($1 * 10))); do
    kill -0 "$launcher" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$launcher" 2>/dev/null; then
    echo "launcher $launcher still running after $1 s: killed"
    kill -9 "$launcher"
    wait "$launcher" 2>/dev/null
    return 124
  fi
  wait "$launcher"
}
# rank N: the pid of rank N of the launcher's mpirun (its child with OMPI_COMM_WORLD_RANK=N).
rank() {
  for p in $(pgrep -P "$(pgrep -P "$launcher")"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$p"
  done | head -1
}
