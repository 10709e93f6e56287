#!/usr/bin/env bash
# `saturn submit RUN_DIR MORE.yaml` on a batch of 2 jobs on 2 local ranks:
#  - mistakes (an id of the batch or of an earlier submission, bad YAML, an unknown key, an
#    unknown model, missing data, a model name of the batch) are
#    exit 2 with FILE:LINE and the field, and write nothing (no request, workload unchanged);
#  - a valid submission of 3 jobs (one of a model of its own) is taken by rank 0 while the run
#    goes on, and one with data of its own (a periodic text, which a model learns to a val loss
#    near 0, where the batch's data leaves it above 1.5) trains and evaluates on that data; a racing request reusing an id it took is rejected by rank 0 (spool/rejected,
#    timeline submit_rejected); `saturn cancel` of one of the new jobs ends it cancelled;
#  - SIGUSR1 interrupts the batch, a submission made while no run goes waits in the spool, and
#    `saturn run --resume` keeps the submitted jobs and takes the waiting one: every job ends
#    as it should (summary.json, metrics.jsonl), `saturn status` and `saturn report` list them;
#    a resume naming the user's workload file, edited meanwhile, is refused (exit 2, both files
#    named): the run continues from its run directory's copy.
# Usage: test_run_submit.sh SATURN_EXE
set -uo pipefail
saturn="$1"
py=/usr/bin/python3
source "$(dirname "$0")/../lib.sh"
export OMP_NUM_THREADS=1

prepare_data "$saturn" 20 || bad "data prepare"
# Data of a submission's own: a 16-byte period, whose next token its current one determines.
$py -c 'import sys; open(sys.argv[1], "w").write("0123456789abcdef" * 1250)' "$work/periodic.txt"
"$saturn" data prepare --input "$work/periodic.txt" --output "$work/periodic" >/dev/null ||
  bad "data prepare (periodic)"
cat > "$work/base.yaml" <<YAML
name: e2e-submit
data: {train: data/train.bin, val: data/val.bin}
defaults: {seq_len: 64, steps: 600, eval_every: 50, eval_batches: 1, batch_size: 4, seed: 3}
models:
  a: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 64}
jobs:
  - {name: first, model: a, lr: 1e-3}
  - {name: second, model: a, lr: 2e-3}
strategies: [ddp]
solver: {time_limit: 1, introspection: {interval: 600}}
YAML
run="$work/run"
"$saturn" run "$work/base.yaml" --np 2 --run-dir "$run" --progress-interval 30 \
  > "$work/run1.log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  grep -q '"job_start"' "$run/timeline.jsonl" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
grep -q '"job_start"' "$run/timeline.jsonl" 2>/dev/null || bad "the batch did not start"
sum_before=$(md5sum < "$run/workload.yaml")

# The valid submission: two jobs of the batch's model, one of a model of its own.
cat > "$work/more.yaml" <<YAML
models:
  b: {arch: llama, n_layer: 2, n_head: 2, d_model: 64}
defaults: {steps: 150}
jobs:
  - {name: sub1, model: a, lr: 3e-3}
  - {name: sub2, model: a, lr: 4e-3}
  - {name: sub3, model: b, lr: 2e-3}
YAML
if out=$("$saturn" submit "$run" "$work/more.yaml" 2>&1) &&
   grep -q "submitted 3 job(s) to $run: sub1, sub2, sub3" <<<"$out"; then
  ok "saturn submit: exit 0, 3 jobs"
else
  bad "saturn submit: $out"
fi
# A racing request (another `saturn submit` that checked before this one was taken) reusing
# sub1: rank 0 rejects it.
$py - "$run" "$work" <<'PY'
import json, os, sys, time
run, work = sys.argv[1:]
spool = os.path.join(run, "spool")
os.makedirs(spool, exist_ok=True)
req = {"kind": "submit", "jobs": ["sub1"], "source": os.path.join(work, "race.yaml"),
       "yaml": "jobs:\n  - {name: sub1, model: a, lr: 9e-3}\n"}
name = "%020d-1-submit.json" % time.time_ns()
open(os.path.join(spool, name + ".tmp"), "w").write(json.dumps(req))
os.rename(os.path.join(spool, name + ".tmp"), os.path.join(spool, name))
PY
for _ in $(seq 1 300); do
  grep -q '"submit_rejected"' "$run/timeline.jsonl" 2>/dev/null && break
  sleep 0.1
done
if grep -q '"event":"submit"' "$run/timeline.jsonl" &&
   grep '"submit_rejected"' "$run/timeline.jsonl" | grep -q "job id 'sub1' is already in the batch" &&
   ls "$run/spool/rejected/"*-submit.json.reason >/dev/null 2>&1 &&
   [ "$(ls "$run/submitted" | wc -l)" -eq 1 ]; then
  ok "rank 0 took the submission and rejected the racing one (spool/rejected, timeline)"
else
  bad "submission or race rejection not seen"; tail -5 "$run/timeline.jsonl"; ls -R "$run/spool"
fi
# A job with data of its own (relative to its file), otherwise sub1's twin (model, lr, steps,
# seed): only the data differs.
cat > "$work/own.yaml" <<YAML
data: {train: periodic/train.bin, val: periodic/val.bin}
defaults: {steps: 150}
jobs:
  - {name: owndata, model: a, lr: 3e-3}
YAML
"$saturn" submit "$run" "$work/own.yaml" > "$work/own.log" 2>&1 ||
  { bad "saturn submit own.yaml: rc=$?"; cat "$work/own.log"; }
"$saturn" cancel "$run" sub2 > "$work/cancel.log" 2>&1 || bad "saturn cancel sub2: rc=$?"
# Taken (spool/ stays as it is while the refusals below are checked).
for _ in $(seq 1 300); do
  grep -q '"event":"cancel","job":"sub2"' "$run/timeline.jsonl" &&
    grep -q '"event":"submit","jobs":\["owndata"\]' "$run/timeline.jsonl" && break
  sleep 0.1
done
# refused NAME LINE PATTERN: submitting $work/NAME.yaml is exit 2 naming NAME.yaml:LINE and
# PATTERN, and nothing is written (no file in spool/ or submitted/, the workload unchanged).
files() { find "$run/spool" "$run/submitted" -type f 2>/dev/null | sort | md5sum; }
refused() {
  local out rc
  local before
  before=$(files)
  out=$("$saturn" submit "$run" "$work/$1.yaml" 2>&1)
  rc=$?
  if [ $rc -eq 2 ] && grep -q "$1.yaml:$2:" <<<"$out" && grep -q -- "$3" <<<"$out" &&
     [ "$(files)" = "$before" ] &&
     [ "$(md5sum < "$run/workload.yaml")" = "$sum_before" ]; then
    ok "$1: exit 2 at line $2 ($3), nothing written"
  else
    bad "$1: rc=$rc"; echo "$out" | tail -3; ls -R "$run/spool" "$run/submitted" 2>/dev/null
  fi
}
printf 'jobs:\n  - {name: third, model: a, lr: 3e-3}\n  - {name: first, model: a, lr: 4e-3}\n' \
  > "$work/dup.yaml"
refused dup 3 "jobs\[1\]: job id 'first' is already in the batch"
printf 'jobs:\n  - {name: third, model: a, lr: 3e-3}\n  - {name: sub3, model: a, lr: 4e-3}\n' \
  > "$work/dupsub.yaml"
refused dupsub 3 "jobs\[1\]: job id 'sub3' is already in the batch (jobs\[2\] at 7:5 of .*more.yaml)"
printf 'jobs:\n  - {name: third, model: a, lr: 3e-3\n  - {name: fourth}\n' > "$work/badyaml.yaml"
refused badyaml 3 "malformed YAML"
printf 'jobs:\n  - {name: third, model: a, lr: 3e-3}\n  - {name: fourth, model: a, lrate: 1}\n' \
  > "$work/badkey.yaml"
refused badkey 3 "unknown key 'lrate'"
printf 'jobs:\n  - {name: third, model: zz, lr: 3e-3}\n' > "$work/badmodel.yaml"
refused badmodel 2 "unknown model 'zz'"
printf 'data: {train: nope/train.bin, val: data/val.bin}\njobs:\n  - {name: third, model: a}\n' \
  > "$work/nodata.yaml"
refused nodata 1 "data.train: data file .*nope/train.bin does not exist"
printf 'models:\n  a: {arch: gpt2, n_layer: 2, n_head: 2, d_model: 16}\njobs:\n  - {model: a}\n' \
  > "$work/samemodel.yaml"
refused samemodel 2 "model 'a' is already the batch's"

# Interrupt once a submitted job has started, then submit while no run goes.
for _ in $(seq 1 600); do
  grep -q '"job_start","job":"sub' "$run/timeline.jsonl" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
kill -USR1 $pid 2>/dev/null
wait $pid
rc=$?
[ $rc -eq 99 ] && ok "SIGUSR1 -> exit 99" || { bad "first run rc=$rc (99 expected)"; tail -20 "$work/run1.log"; }
printf 'jobs:\n  - {name: late, model: b, lr: 1e-3, steps: 100}\n' > "$work/late.yaml"
"$saturn" submit "$run" "$work/late.yaml" > "$work/late.log" 2>&1 ||
  { bad "submit while no run goes: rc=$?"; cat "$work/late.log"; }
# The user's workload file edited while the run was stopped (a job added in front, other
# defaults): a resume naming it (as a `saturn sbatch` requeue does) is refused, naming both
# files, and changes nothing; the run directory's copy stays the batch (its jobs, then the
# submitted ones), which the resume below continues.
sed -i -e 's/^jobs:$/jobs:\n  - {name: edited, model: a, lr: 5e-3}/' -e 's/steps: 600/steps: 300/' \
  "$work/base.yaml"
events=$(wc -l <"$run/timeline.jsonl")
out=$("$saturn" run "$work/base.yaml" --np 2 --run-dir "$run" --resume 2>&1)
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--resume: $work/base.yaml differs from $run/workload.yaml" <<<"$out" &&
   [ "$(wc -l <"$run/timeline.jsonl")" -eq "$events" ] &&
   [ "$(md5sum < "$run/workload.yaml")" = "$sum_before" ] &&
   ls "$run/spool/"*-submit.json >/dev/null 2>&1; then
  ok "--resume with the edited original: exit 2 naming both files, nothing changed"
else
  bad "--resume with the edited original: rc=$rc"; echo "$out" | tail -5
fi
"$saturn" run --resume "$run" --np 2 --progress-interval 30 > "$work/run2.log" 2>&1
rc=$?
[ $rc -eq 0 ] && ok "--resume: exit 0" || { bad "resume rc=$rc"; tail -30 "$work/run2.log"; }

if $py - "$run" <<'PY'
import json, os, sys
run = sys.argv[1]
s = json.load(open(os.path.join(run, "summary.json")))
jobs = {j["id"]: j for j in s["jobs"]}
assert sorted(jobs) == ["first", "late", "owndata", "second", "sub1", "sub2", "sub3"], sorted(jobs)
for j in ("first", "second", "sub1", "sub3", "late", "owndata"):
    assert jobs[j]["status"] == "finished", (j, jobs[j]["status"], jobs[j].get("reason"))
    assert jobs[j]["steps_done"] == jobs[j]["steps"], (j, jobs[j]["steps_done"])
    m = [json.loads(l) for l in open(os.path.join(run, "jobs", j, "metrics.jsonl"))]
    assert any("val_loss" in r for r in m), j
    assert os.path.exists(os.path.join(run, "jobs", j, "final.h5")), j
assert jobs["sub1"]["steps"] == 150 and jobs["late"]["steps"] == 100
assert jobs["sub2"]["status"] == "cancelled", jobs["sub2"]
# The job with data of its own trained and evaluated on it: summary.json names its files (the
# others have none), and its losses are the periodic data's (near 0), where its twin sub1, on
# the batch's text, stays above 1.5.
work = os.path.dirname(run)
assert jobs["owndata"]["data"] == {"train": os.path.join(work, "periodic", "train.bin"),
                                   "val": os.path.join(work, "periodic", "val.bin")}, jobs["owndata"]
assert not [j for j in jobs if j != "owndata" and "data" in jobs[j]]
def last(j, key):
    m = [json.loads(l) for l in open(os.path.join(run, "jobs", j, "metrics.jsonl"))]
    return [r[key] for r in m if key in r][-1]
for key in ("loss", "val_loss"):
    assert last("owndata", key) < 0.5 and last("sub1", key) > 1.5, \
        (key, last("owndata", key), last("sub1", key))
print("own data: loss %.4f, val_loss %.4f; its twin sub1 on the batch's data: %.3f, %.3f" %
      (last("owndata", "loss"), last("owndata", "val_loss"), last("sub1", "loss"),
       last("sub1", "val_loss")))
# Each submitted job's prediction is the first plan that placed it.
for j in ("sub1", "sub3", "late"):
    assert jobs[j]["predicted_s"] > 0, (j, jobs[j]["predicted_s"])
ev = [json.loads(l) for l in open(os.path.join(run, "timeline.jsonl"))]
subs = [e for e in ev if e.get("event") == "submit"]
assert [e["jobs"] for e in subs] == [["sub1", "sub2", "sub3"], ["owndata"], ["late"]], subs
# Taken while the batch ran: before the batch's own jobs ended (they were running then).
ends = [e["t"] for e in ev if e.get("event") == "job_end" and e["job"] in ("first", "second")]
assert subs[0]["t"] < min(ends), (subs[0]["t"], ends)
# Each submission is planned at once: a plan naming its jobs follows it.
plans = sorted(os.listdir(os.path.join(run, "plans")))
named = set()
for p in plans:
    named |= {j["id"] for j in json.load(open(os.path.join(run, "plans", p)))["jobs"]}
assert {"sub1", "sub3", "late"} <= named, named
# The batch's predicted makespan is the first plan's that knew all of its work: in the resumed
# run, the plan that first placed 'late' (taken from the spool after that run's initial plan),
# not the initial plan, which knew nothing of it; prediction_error compares it with makespan_s.
initial = [e["plan"] for e in ev if e.get("event") == "plan"][-1]
index = lambda p: int(p[len("plan-"):-len(".json")])
mine = [(index(p), json.load(open(os.path.join(run, "plans", p)))) for p in plans
        if index(p) >= initial]
assert "late" not in {j["id"] for j in mine[0][1]["jobs"]}, "late in the resumed run's initial plan"
placing_index, placing = next((k, p) for k, p in mine if "late" in {j["id"] for j in p["jobs"]})
# `saturn status` and `saturn report` show this plan's prediction, labelled with its index.
open(os.path.join(run, "..", "placing-plan"), "w").write(str(placing_index))
assert abs(s["predicted_makespan_s"] - placing["makespan_s"]) <= 1e-6 * placing["makespan_s"], \
    (s["predicted_makespan_s"], placing["makespan_s"], mine[0][1]["makespan_s"])
assert abs(s["prediction_error"] - (s["makespan_s"] - s["predicted_makespan_s"]) /
           s["predicted_makespan_s"]) < 1e-9, s["prediction_error"]
print("predicted makespan: %.2f s (initial plan of the resumed run: %.2f s), measured %.2f s, "
      "prediction_error %.3f" % (s["predicted_makespan_s"], mine[0][1]["makespan_s"],
                                 s["makespan_s"], s["prediction_error"]))
assert not [f for f in os.listdir(os.path.join(run, "spool")) if f.endswith(".json")]
assert len(os.listdir(os.path.join(run, "submitted"))) == 3
print("statuses:", {j: jobs[j]["status"] for j in sorted(jobs)})
PY
then ok "summary.json: submitted jobs finished (sub2 cancelled), plans name them, predicted makespan covers them"
else bad "summary.json after submit"; fi
placing=$(cat "$work/placing-plan" 2>/dev/null)
if out=$("$saturn" status "$run" 2>&1) && grep -q "sub1" <<<"$out" && grep -q "sub3" <<<"$out" &&
   grep -q "late" <<<"$out" && [ -n "$placing" ] && grep -q "predicted (plan $placing) " <<<"$out"; then
  ok "saturn status lists the submitted jobs; its prediction is plan $placing's, which placed 'late'"
else
  bad "saturn status: $out"
fi
if "$saturn" report "$run" -o "$work/report.html" > "$work/report.log" 2>&1 &&
   grep -q "sub3" "$work/report.html" && grep -q "late" "$work/report.html" &&
   grep -q "plan $placing; actual" "$work/report.html"; then
  ok "saturn report renders the submitted jobs"
else
  bad "saturn report"; tail -5 "$work/report.log"
fi
finish
