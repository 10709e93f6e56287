#!/usr/bin/env bash
# saturn profile and saturn plan WORKLOAD end to end: a first run calibrates and tries, a second
# run with the same store tries nothing, a full calibration is shared with later runs through the
# calibration cache, plan reads the store (also for a bigger cluster than the one profiled), and
# bad input is exit code 2.
#   test_profile_cli.sh SATURN MPIEXEC SOURCE_DIR
set -euo pipefail
saturn=$1
mpiexec=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run2() { "$mpiexec" -n 2 --oversubscribe --allow-run-as-root "$saturn" "$@"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

cat > "$dir/w.yaml" <<'YAML'
name: cli-profile
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 50, eval_every: 25, eval_batches: 1}
models:
  tiny: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}
  tinyl: {arch: llama, n_layer: 2, n_head: 2, d_model: 32, d_ff: 64}
jobs:
  - sweep: {model: [tiny, tinyl], lr: [1e-3, 3e-3], batch_size: [8]}
strategies: [ddp, fsdp, pipeline]
YAML

flags=(--store "$dir/p.h5" --trials 1 --trial-steps 1 --quick-calibration)
run2 profile "$dir/w.yaml" "${flags[@]}" -o "$dir/inst.json" > "$dir/out1" 2>&1 ||
  { cat "$dir/out1"; fail "first profile run"; }
grep -q "4 jobs, 2 shapes" "$dir/out1" || { cat "$dir/out1"; fail "jobs/shapes line"; }
tried=$(sed -n 's/.*; \([0-9]*\) tried (.*/\1/p' "$dir/out1")
[ "${tried:-0}" -gt 0 ] || { cat "$dir/out1"; fail "no trial in the first run"; }
[ -s "$dir/p.h5" ] || fail "no store written"
[ -s "$dir/inst.json" ] || fail "no instance written"

run2 profile "$dir/w.yaml" "${flags[@]}" > "$dir/out2" 2>&1 || { cat "$dir/out2"; fail "second run"; }
grep -q "; 0 tried (" "$dir/out2" || { cat "$dir/out2"; fail "the second run tried again"; }
grep -q "calibration .* (stored)" "$dir/out2" || { cat "$dir/out2"; fail "recalibrated"; }

# The shared calibration cache: a full calibration lands in it, and a run with a new store takes
# it from there instead of calibrating again (quick calibrations, like the ones above, are
# never cached: the cache file does not exist until now).
[ ! -e "$dir/cal.h5" ] || fail "a quick calibration was cached"
cache=(--calibration-cache "$dir/cal.h5" --no-trials)
run2 profile "$dir/w.yaml" --store "$dir/c1.h5" "${cache[@]}" > "$dir/out3" 2>&1 ||
  { cat "$dir/out3"; fail "full calibration"; }
[ -s "$dir/cal.h5" ] || { cat "$dir/out3"; fail "calibration not cached"; }
run2 profile "$dir/w.yaml" --store "$dir/c2.h5" "${cache[@]}" > "$dir/out4" 2>&1 ||
  { cat "$dir/out4"; fail "run with the cache"; }
grep -q "from the shared cache" "$dir/out4" || { cat "$dir/out4"; fail "cache not used"; }
grep -q "calibration .* (stored)" "$dir/out4" || { cat "$dir/out4"; fail "calibrated again"; }

"$saturn" plan "$dir/w.yaml" --store "$dir/p.h5" --time-limit 2 > "$dir/plan" 2>&1 ||
  { cat "$dir/plan"; fail "plan from the store"; }
grep -q "from trials" "$dir/plan" || { cat "$dir/plan"; fail "plan sources line"; }
grep -q "tiny-lr1e-3-bs8" "$dir/plan" || { cat "$dir/plan"; fail "plan lists the jobs"; }
"$saturn" plan "$dir/w.yaml" --store "$dir/p.h5" --cluster 2x4 --time-limit 2 --json \
  > "$dir/plan.json" 2>&1 || { cat "$dir/plan.json"; fail "plan for a bigger cluster"; }
grep -q '"makespan_s"' "$dir/plan.json" || fail "plan json"
"$saturn" plan --instance "$dir/inst.json" --time-limit 2 > /dev/null 2>&1 || fail "instance"

set +e
run2 profile "$dir/missing.yaml" --store "$dir/p.h5" > "$dir/bad" 2>&1
rc=$?
set -e
[ "$rc" -eq 2 ] || { cat "$dir/bad"; fail "bad workload: exit $rc, want 2"; }
"$saturn" plan "$dir/w.yaml" --store "$dir/nope.h5" > "$dir/bad2" 2>&1 && fail "missing store"
echo "ok"
