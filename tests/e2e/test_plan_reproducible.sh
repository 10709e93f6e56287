#!/usr/bin/env bash
# Plans you can reproduce (issue 33): `saturn plan --instance X` run twice, and once more beside a
# busy loop on every core, writes byte-identical plan files, with one and two search threads, on
# instances of the solver's reference set (bench_solver --write-instances).
# Usage: test_plan_reproducible.sh SATURN_EXE BENCH_SOLVER_EXE
set -uo pipefail
saturn="$1"
bench="$2"
source "$(dirname "$0")/../lib.sh"

"$bench" --write-instances "$work/inst" >/dev/null || bad "bench_solver --write-instances"
# Instances whose search runs to the end of its budget (no early proof of optimality): one node
# of 14 jobs, two nodes of 24.
instances=$(ls "$work"/inst/1x8-01-j14.json "$work"/inst/2x8-06-j24.json "$work"/inst/2x8-13-j24.json)
[ -n "$instances" ] || bad "no instances written"
cores=$(nproc)
for f in $instances; do
  name=$(basename "$f" .json)
  for threads in 1 2; do
    plan() { "$saturn" plan --instance "$f" --time-limit 1 --threads "$threads" --json -o "$1" >/dev/null; }
    plan "$work/$name-t$threads-a.json" || bad "$name: saturn plan exit $?"
    plan "$work/$name-t$threads-b.json" || bad "$name: saturn plan (again) exit $?"
    pids=()
    for _ in $(seq "$cores"); do (while :; do :; done) & pids+=($!); done
    plan "$work/$name-t$threads-busy.json" || bad "$name: saturn plan (busy) exit $?"
    kill "${pids[@]}" 2>/dev/null; wait "${pids[@]}" 2>/dev/null
    if cmp -s "$work/$name-t$threads-a.json" "$work/$name-t$threads-b.json" &&
      cmp -s "$work/$name-t$threads-a.json" "$work/$name-t$threads-busy.json"; then
      ok "$name, $threads thread(s): the same plan file three times, once beside $cores busy loops ($(grep -o '"makespan_s": [0-9.]*' "$work/$name-t$threads-a.json" | head -1))"
    else
      bad "$name, $threads thread(s): plan files differ"
      diff "$work/$name-t$threads-a.json" "$work/$name-t$threads-busy.json" | head -10
    fi
    grep -q '"wall_capped": false' "$work/$name-t$threads-busy.json" ||
      bad "$name: the busy run was cut by the wall cap"
  done
done
# --clock wall keeps the old behaviour, and says so in the plan.
"$saturn" plan --instance "$(echo "$instances" | head -1)" --time-limit 0.2 --clock wall --json \
  >"$work/wall.json" || bad "--clock wall: exit $?"
grep -q '"clock": "wall"' "$work/wall.json" && ok "--clock wall: the plan says its clock" ||
  bad "--clock wall: the plan does not say its clock"
"$saturn" plan --instance "$(echo "$instances" | head -1)" --clock gpu >/dev/null 2>&1
[ $? -eq 2 ] && ok "--clock gpu: exit 2" || bad "--clock gpu is not refused"
finish
