#!/usr/bin/env bash
# Bounded inputs (issue 15, items 5 and 6), through the real executable: each input that used to
# pass validation and then fail with an internal error (bad_alloc, a JSON type error, an MPI
# abort, ENAMETOOLONG), or that wrote its run outside runs/, is now refused by `saturn plan` and
# `saturn run --np 2` with exit 2 and a FILE:LINE:COL message, and nothing is written.
# Usage: test_inputs.sh SATURN_EXE
set -uo pipefail
saturn=$(realpath "$1")
source "$(dirname "$0")/../lib.sh"

prepare_data "$saturn" 20 >/dev/null && ok "data prepare" || bad "data prepare"

# A tiny valid workload; each case below changes one thing in it.
cat > "$work/base.yaml" <<'YAML'
name: inputs
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 16, steps: 2, eval_batches: 1}
models:
  m: {arch: gpt2, n_layer: 1, n_head: 2, d_model: 32}
jobs:
  - {name: j, model: m, lr: 1e-3, batch_size: 4}
cluster: auto
YAML

# Commands run from an empty directory three levels below $work, so that a run directory written
# anywhere (runs/NAME, or a NAME that escapes it) shows up as a new file under $work.
cwd="$work/a/b/cwd"
mkdir -p "$cwd"
snapshot() { (cd "$work" && find . -path ./text.txt -prune -o -print | sort); }

# expect_refused NAME FILE FRAGMENT COMMAND...: exit 2, "FILE:LINE:COL:" and FRAGMENT in the
# output, and no file written anywhere under $work.
expect_refused() {
  local name=$1 file=$2 frag=$3
  shift 3
  local before after out rc
  before=$(snapshot)
  out=$(cd "$cwd" && timeout 120 "$@" 2>&1)
  rc=$?
  last_rc=$rc
  after=$(snapshot)
  if [ "$rc" -ne 2 ]; then
    bad "$name: exit $rc (expected 2): $(tail -n 3 <<<"$out")"
  elif ! grep -qE "$(basename "$file"):[0-9]+:[0-9]+: " <<<"$out"; then
    bad "$name: no FILE:LINE:COL in: $(tail -n 3 <<<"$out")"
  elif ! grep -qF -- "$frag" <<<"$out"; then
    bad "$name: '$frag' not in: $(tail -n 3 <<<"$out")"
  elif [ "$before" != "$after" ]; then
    bad "$name: wrote $(diff <(echo "$before") <(echo "$after") | grep '^>' | head -n 3 | tr '\n' ' ')"
  else
    ok "$name (exit 2: $(grep -m1 -oE "$(basename "$file"):[0-9]+:[0-9]+: .{0,90}" <<<"$out"))"
  fi
}

# variant NAME SED_EXPR: $work/NAME.yaml, the base with one edit (the data is next to it).
variant() {
  sed -e "$2" "$work/base.yaml" >"$work/$1.yaml"
  echo "$work/$1.yaml"
}

# The base itself plans and runs (so the refusals below are about their one change).
if (cd "$cwd" && "$saturn" plan "$work/base.yaml" >/dev/null 2>&1); then ok "base plans"; else bad "base plans"; fi

# --- Numbers past their documented ranges: plan and run.
f=$(variant batch 's/batch_size: 4}/batch_size: 1000000000}/')
expect_refused "batch_size 1e9 (plan)" "$f" "valid: 1..1048576" "$saturn" plan "$f"
expect_refused "batch_size 1e9 (run)" "$f" "valid: 1..1048576" "$saturn" run "$f" --np 2
f=$(variant layers 's/n_layer: 1,/n_layer: 1000000,/')
expect_refused "n_layer 1e6 (plan)" "$f" "valid: 1..256" "$saturn" plan "$f"
f=$(variant evalb 's/eval_batches: 1}/eval_batches: 1000000000}/')
expect_refused "eval_batches 1e9 (run)" "$f" "valid: 1..100000" "$saturn" run "$f" --np 2
f=$(variant evalb62 's/eval_batches: 1}/eval_batches: 4611686018427387904}/')
expect_refused "eval_batches 2^62 (plan)" "$f" "valid: 1..100000" "$saturn" plan "$f"
expect_refused "eval_batches 2^62 (run)" "$f" "valid: 1..100000" "$saturn" run "$f" --np 2
f=$(variant c0x0 's/cluster: auto/cluster: 0x0/')
expect_refused "cluster: 0x0 (plan)" "$f" "node count must be positive" "$saturn" plan "$f"
expect_refused "cluster: 0x0 (run)" "$f" "node count must be positive" "$saturn" run "$f" --np 2
f=$(variant cinf 's/cluster: auto/cluster: .inf/')
expect_refused "cluster: .inf (plan)" "$f" "is not a device count" "$saturn" plan "$f"
f=$(variant c3x1 's/cluster: auto/cluster: 3x1/')
expect_refused "cluster: 3x1 on 2 ranks (run)" "$f" "has 3 devices but the run has 2 ranks" \
  "$saturn" run "$f" --np 2
# --- Numeric flags: out of range (nan included) is exit 2 naming the flag, and nothing runs.
# expect_flag NAME FRAGMENT COMMAND...
expect_flag() {
  local name=$1 frag=$2
  shift 2
  local before after out rc
  before=$(snapshot)
  out=$(cd "$cwd" && timeout 60 "$@" 2>&1)
  rc=$?
  after=$(snapshot)
  if [ "$rc" -eq 2 ] && grep -qF -- "$frag" <<<"$out" && [ "$before" = "$after" ]; then
    ok "$name (exit 2: $(grep -m1 -F -- "$frag" <<<"$out"))"
  else
    bad "$name: exit $rc: $(tail -n 3 <<<"$out")"
  fi
}
b="$work/base.yaml"
expect_flag "--cluster 0x0" "--cluster: cluster spec '0x0'" "$saturn" plan "$b" --cluster 0x0
expect_flag "--cluster 1x100000" "--cluster: cluster spec '1x100000'" "$saturn" plan "$b" --cluster 1x100000
expect_flag "--time-limit nan" "--time-limit: 'nan' is out of range" "$saturn" plan "$b" --time-limit nan
expect_flag "--np -1" "--np: Value -1 not in range" "$saturn" run "$b" --np -1
expect_flag "--np 100000" "--np: Value 100000 not in range" "$saturn" run "$b" --np 100000
expect_flag "--progress-interval nan" "--progress-interval: 'nan' is out of range" \
  "$saturn" run "$b" --np 2 --progress-interval nan
expect_flag "--device-memory 10^20 GiB" "--device-memory: '99999999999999999999GiB' must be a non-negative size of at most 1 EiB" \
  "$saturn" run "$b" --np 2 --device-memory 99999999999999999999GiB
expect_flag "--watch nan" "--watch: 'nan' is out of range" "$saturn" status "$work" --watch nan

# --- Valid but large: a 256-layer model with a million-sequence batch (gpipe keeps 131072
# micro-batches in flight) is estimated and planned in seconds and a bounded amount of memory
# (its activation estimate took tens of GB).
f=$(variant large 's/n_layer: 1, n_head: 2, d_model: 32}/n_layer: 256, n_head: 2, d_model: 32}/; s/batch_size: 4}/batch_size: 1048576}/')
start=$(date +%s)
out=$(cd "$cwd" && (ulimit -v 4000000; timeout 120 "$saturn" plan "$f" --cluster 4x8) 2>&1)
rc=$?
elapsed=$(($(date +%s) - start))
if [ "$rc" -eq 0 ]; then ok "large valid workload planned in $elapsed s"; else bad "large valid workload: exit $rc after $elapsed s: $(tail -n 3 <<<"$out")"; fi

# --- A sweep of a million jobs: refused from its list sizes, in well under a second of work.
lrs=$(seq -s, 1 1000 | sed 's/,/e-6, /g')e-6
sizes=$(seq -s, 1 1000 | sed 's/,/, /g')
f=$(variant million "s/  - {name: j, model: m, lr: 1e-3, batch_size: 4}/  - sweep: {model: m, lr: [$lrs], batch_size: [$sizes]}/")
start=$(date +%s)
expect_refused "sweep of 10^6 jobs (plan)" "$f" "more than 10000 jobs (this sweep: 1000 x 1000)" \
  "$saturn" plan "$f"
elapsed=$(($(date +%s) - start))
if [ "$last_rc" -eq 2 ] && [ "$elapsed" -lt 20 ]; then ok "sweep refused in $elapsed s"; else bad "sweep: exit $last_rc after $elapsed s"; fi

# --- Strings: length and UTF-8.
f=$(variant longname "s/name: j,/name: $(printf 'j%.0s' $(seq 300)),/")
expect_refused "300-character job name (plan)" "$f" "is not a plain name (valid: at most 100" \
  "$saturn" plan "$f"
expect_refused "300-character job name (run)" "$f" "is not a plain name (valid: at most 100" \
  "$saturn" run "$f" --np 2
f=$(variant utf8 "s/^name: inputs/name: in$(printf '\xc3\x28')puts/")
expect_refused "invalid UTF-8 in name: (plan)" "$f" "is not valid UTF-8" "$saturn" plan "$f"
expect_refused "invalid UTF-8 in name: (run)" "$f" "is not valid UTF-8" "$saturn" run "$f" --np 2

# --- Item 6: the workload name is a plain name, never a path out of runs/.
f=$(variant escape 's|^name: inputs|name: ../../x|')
expect_refused "name: ../../x (run)" "$f" "it names the run directory" "$saturn" run "$f" --np 2
f=$(variant abs "s|^name: inputs|name: $work/abs|")
expect_refused "name: /abs/path (run)" "$f" "it names the run directory" "$saturn" run "$f" --np 2
expect_refused "name: /abs/path (plan)" "$f" "it names the run directory" "$saturn" plan "$f"

# --- A job that fits no configuration of the cluster: found after the trials (which write the
# profile store into the run directory), named with its location, and the directory goes again.
f=$(variant nofit 's/seq_len: 16,/seq_len: 2000,/')
expect_refused "job that fits no configuration (run)" "$f" "fits no configuration on the cluster" \
  "$saturn" run "$f" --np 2 --device-memory 16MiB

# --- Data checked when the workload is loaded, before any rank trains.
f=$(variant passwd 's|train: data/train.bin|train: /etc/passwd|')
expect_refused "/etc/passwd as data (run)" "$f" "data file /etc/passwd is not a token file" \
  "$saturn" run "$f" --np 2
expect_refused "/etc/passwd as data (train)" "$f" "data file /etc/passwd is not a token file" \
  "$saturn" train "$f"
f=$(variant vocab 's/d_model: 32}/d_model: 32, vocab_size: 64}/')
expect_refused "vocabulary smaller than the data's tokens (run)" "$f" \
  "outside the vocabulary of job 'j', whose model 'm' has vocab_size 64" "$saturn" run "$f" --np 2
f=$(variant seqlen 's/seq_len: 16,/seq_len: 60000,/')
expect_refused "data shorter than seq_len (run)" "$f" "needs at least 60001" "$saturn" run "$f" --np 2

finish
