#!/usr/bin/env bash
# Fault injection in a parallel write: rank 1 of 2 is killed (SIGKILL, as by kill -9) in the
# middle of writing a checkpoint. The job dies, the half-written file never becomes a
# checkpoint, `latest` still names the previous one, and a new job loads the previous one
# intact (resharded: written as row blocks, read as column blocks). Also on 4 ranks, with the
# kill on rank 0 (the rank that renames).
# Usage: test_fault_mpi.sh CKPT_TOOL MPIEXEC
set -uo pipefail
tool="$1"
mpiexec="$2"
source "$(dirname "$0")/../lib.sh"
run() { timeout 120 "$mpiexec" -n "$1" --oversubscribe --allow-run-as-root "${@:2}"; }

for case in "2 1" "4 0"; do
  set -- $case
  np=$1
  victim=$2
  job="$work/job-np$np"
  ck="$job/checkpoints"
  run "$np" "$tool" save "$job" 10 && ok "np $np: step 10 saved" || bad "np $np: step 10 save"
  SATURN_CKPT_TEST_KILL="$victim:20:step-00000020" run "$np" "$tool" save "$job" 20 >"$work/kill.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]; then
    ok "np $np: rank $victim killed mid-write, the job stopped (exit $rc, no hang)"
  else
    bad "np $np: killed write exited $rc"
    cat "$work/kill.log"
  fi
  [ ! -e "$ck/step-00000020.h5" ] && ok "np $np: interrupted write did not become a checkpoint" \
    || bad "np $np: step-00000020.h5 exists"
  [ "$(cat "$ck/latest" 2>/dev/null)" = "step-00000010.h5" ] && ok "np $np: latest still names step 10" \
    || bad "np $np: latest is '$(cat "$ck/latest" 2>/dev/null)'"
  ls "$ck" | grep -q 'step-00000020.h5.tmp' && ok "np $np: the partial file is only a .tmp" \
    || echo "note: no partial .tmp left (the kill came before any data reached the file)"
  if out=$(run "$np" "$tool" load "$job" 10 2>&1); then
    ok "np $np: previous checkpoint intact and used ($(tail -n1 <<<"$out"))"
  else
    bad "np $np: load after crash: $out"
  fi
  # The next successful save replaces the leftover.
  run "$np" "$tool" save "$job" 30 && [ ! -e "$ck/step-00000020.h5.tmp" ] \
    && [ "$(cat "$ck/latest")" = "step-00000030.h5" ] && ok "np $np: next save cleans up and moves latest" \
    || bad "np $np: save after crash"
done

finish
