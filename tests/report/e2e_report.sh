#!/usr/bin/env bash
# `saturn status` and `saturn report` on a real small run (issue 10 acceptance).
#   e2e_report.sh run  SATURN_EXE RUN_DIR   a 3-job sweep on 2 ranks, one job made to fail;
#                                            `saturn status` polled while it runs must show live
#                                            progress; after the end it shows the outcome.
#   e2e_report.sh html SATURN_EXE RUN_DIR   `saturn report` of that run rendered by headless
#                                            Chromium: screenshot, no console errors, Gantt bars
#                                            and loss curves for every job in the DOM.
set -uo pipefail
mode="$1"
saturn="$2"
dir="$3"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
# Each mode ends where it reports.
end_mode() {
  finish
  exit
}

if [ "$mode" = run ]; then
  rm -rf "$dir"
  prepare_data "$saturn" 40 || bad "data prepare"
  cat > "$work/sweep.yaml" <<YAML
name: report-e2e
data: {train: data/train.bin, val: data/val.bin}
defaults:
  seq_len: 64
  steps: 200
  eval_every: 25
  eval_batches: 2
  checkpoint_every: 100
  schedule: {warmup: 2, decay: cosine}
  seed: 5
models:
  small: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 64}
jobs:
  - sweep: {model: [small], lr: [1e-3, 3e-3, 5e-3], batch_size: [8]}
solver: {time_limit: 2}
YAML
  # One job fails after its first evaluation (fault injection of the executor): the report must
  # show a failed job with curves and a failure mark.
  SATURN_FAIL_JOB="small-lr5e-3-bs8:60" "$saturn" run "$work/sweep.yaml" --np 2 --run-dir "$dir" \
    --progress-interval 5 > "$work/run.log" 2>&1 &
  pid=$!
  # Poll `saturn status` while the run goes: a job's row must show a step > 0 while it runs.
  live=""
  for _ in $(seq 1 900); do
    if ! kill -0 $pid 2>/dev/null; then break; fi
    if out=$("$saturn" status "$dir" 2>&1); then
      if kill -0 $pid 2>/dev/null &&
        echo "$out" | grep -Eq '^  small-lr\S+ +\S+ x[0-9]+ .* +[1-9][0-9]*/200 .* running'; then
        live="$out"
        break
      fi
    fi
    sleep 0.2
  done
  if [ -n "$live" ]; then
    ok "saturn status shows live progress while the run goes"
    echo "$live"
  else
    bad "saturn status never showed a running job past step 0"
    "$saturn" status "$dir"
  fi
  if echo "$live" | grep -q "running (last update" && echo "$live" | grep -q "| ETA "; then
    ok "live status: run state, batch elapsed and ETA"
  else bad "live status header"; fi
  wait $pid
  rc=$?
  if [ $rc -eq 1 ]; then ok "run ended with exit 1 (one job failed)"; else
    bad "run: rc=$rc (expected 1)"
    tail -30 "$work/run.log"
  fi
  out=$("$saturn" status "$dir")
  echo "$out"
  if echo "$out" | grep -q "ended with failed jobs (exit 1)" &&
    echo "$out" | grep -Eq '^  small-lr5e-3-bs8 .*failed: injected failure' &&
    [ "$(echo "$out" | grep -Ec ' 200/200 .* finished')" -eq 2 ] &&
    echo "$out" | grep -q "^makespan "; then
    ok "status after the end: 2 finished, 1 failed with its reason, makespan"
  else bad "status after the end"; fi
  # --watch stops by itself once the run has ended.
  if timeout 20 "$saturn" status "$dir" --watch 1 | grep -q "ended with failed jobs"; then
    ok "status --watch on an ended run prints once and returns"
  else bad "status --watch"; fi
  "$saturn" status --help | grep -q -- "--watch" && ok "status --help" || bad "status --help"
  err=$("$saturn" status "$work/nope" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && echo "$err" | grep -q "nope: no such run directory"; then
    ok "status of a missing directory: exit 2, names it"
  else bad "status of a missing directory: rc=$rc $err"; fi
  rm -rf "$work"
  end_mode
fi

[ "$mode" = html ] || { echo "usage: $0 run|html SATURN_EXE RUN_DIR" >&2; exit 2; }
[ -f "$dir/summary.json" ] || { bad "no run in $dir (the e2e_report_run test makes it)"; end_mode; }
chromium=$(command -v chromium || command -v chromium-browser)
if [ -z "$chromium" ]; then
  bad "chromium not found: install Debian's chromium package (scripts/install-deps.sh --tests)"
  end_mode
fi
"$saturn" report --help | grep -q -- "-o,--output" && ok "report --help" || bad "report --help"
err=$("$saturn" report "$dir/jobs" 2>&1)
rc=$?
if [ $rc -eq 2 ] && echo "$err" | grep -q "jobs/workload.yaml: missing"; then
  ok "report of a directory that is not a run: exit 2, names the missing file"
else bad "report of a non-run: rc=$rc $err"; fi
html="$dir/report.html"
rm -f "$html"
if "$saturn" report "$dir" && [ -s "$html" ]; then ok "saturn report wrote $html"; else
  bad "saturn report"
  end_mode
fi
# -o writes the same page elsewhere (the run has ended: nothing in it depends on the clock).
if "$saturn" report "$dir" -o "$dir/copy.html" >/dev/null && cmp -s "$html" "$dir/copy.html"; then
  ok "report -o FILE writes the same page"
else bad "report -o FILE"; fi
if grep -q -e "<script" -e "http" -e "<link" -e "<img" "$html"; then
  bad "report is not self-contained (script, link or URL found)"
else ok "report is self-contained (no script, no link, no URL)"; fi

shot="$dir/report.png"
rm -f "$shot"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
chrome() {
  timeout 120 "$chromium" --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
    --user-data-dir="$profile" --enable-logging=stderr --v=0 --window-size=1400,2000 "$@" \
    "file://$(realpath "$html")"
}
chrome --screenshot="$shot" 2> "$dir/chromium-shot.log" >/dev/null
chrome --dump-dom > "$dir/dom.html" 2> "$dir/chromium-dom.log"
# Console messages (script errors, failed loads the page asked for) are logged as CONSOLE.
if grep -h "CONSOLE" "$dir/chromium-shot.log" "$dir/chromium-dom.log"; then
  bad "the page logged console messages"
else ok "no console messages while loading"; fi
if $py - "$shot" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h, depth, ctype = struct.unpack(">IIBB", data[16:26])
assert (w, h) == (1400, 2000), (w, h)
idat, i = b"", 8
while i < len(data):
    n, kind = struct.unpack(">I4s", data[i:i + 8])
    if kind == b"IDAT":
        idat += data[i + 8:i + 8 + n]
    i += 12 + n
raw = zlib.decompress(idat)
assert len(raw) >= w * h * 3, "truncated image data"
# A page with bars, curves and tables compresses far worse than a blank or error page (a
# 1400x2000 page holding one heading is ~15 KB; the report of this run ~180 KB).
print(f"screenshot {w}x{h}, {len(data)} bytes")
assert len(data) > 60000, len(data)
PY
then ok "screenshot is a 1400x2000 PNG with real content (size)"; else bad "screenshot"; fi
if $py - "$dir" <<'PY'
import json, os, sys
from html.parser import HTMLParser
d = sys.argv[1]
class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.found = [], []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag in ("svg", "table", "main") and "id" in a:
            self.stack.append(a["id"])
        parent = next((s for s in reversed(self.stack)), None)
        self.found.append((tag, a.get("class", ""), a.get("data-job"), parent, a.get("id")))
    def handle_endtag(self, tag):
        if tag in ("svg", "table", "main") and self.stack:
            self.stack.pop()
dom = Dom()
dom.feed(open(os.path.join(d, "dom.html")).read())
ids = {f[4] for f in dom.found}
assert {"saturn-report", "gantt", "train-loss", "val-loss", "jobs"} <= ids, ids
s = json.load(open(os.path.join(d, "summary.json")))
def has(tag, cls, job, parent):
    return any(t == tag and (cls is None or cls in c.split()) and j == job and p == parent
               for t, c, j, p, _ in dom.found)
for j in s["jobs"]:
    jid = j["id"]
    assert has("rect", "planned", jid, "gantt"), ("planned bar", jid)
    assert has("rect", "actual", jid, "gantt"), ("actual bar", jid)
    assert has("polyline", "train", jid, "train-loss"), ("train curve", jid)
    assert has("polyline", "val", jid, "val-loss"), ("val curve", jid)
    assert has("tr", None, jid, "jobs"), ("table row", jid)
failed = [j["id"] for j in s["jobs"] if j["status"] == "failed"]
assert failed, "the run has a failed job"
for jid in failed:
    assert has("rect", "failed", jid, "gantt") and has("path", "fail-mark", jid, "gantt"), jid
    assert has("line", "failure", jid, "gantt"), ("failure marker", jid)
best = s["best_job"]["id"]
assert has("polyline", "best", best, "train-loss") and has("polyline", "best", best, "val-loss"), best
print(f"{len(s['jobs'])} jobs: planned and actual bars, train and val curves, rows; "
      f"failed {failed} marked; best {best} highlighted")
PY
then ok "DOM has Gantt bars and loss curves for every job, the failure and the best job marked"
else bad "DOM elements per job"; fi
finish
