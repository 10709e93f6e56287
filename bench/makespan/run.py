#!/usr/bin/python3
"""bench/makespan: the same workload on the same ranks under Saturn's plan and the baselines.

Prepares the data once, fills one profile store once (profiling is shared and excluded from
every makespan), then runs `saturn run --policy P` for each policy one after another on the
same local ranks, and prints per policy the predicted makespan (the policy's plan from the
profiles), the measured makespan (summary.json), the prediction error and the ratio to
current practice. With --repeat N the policies are run N times in rotating order and medians
are printed. Prints tables; never passes or fails on time.

    bench/makespan/run.py --saturn build/saturn [--np CORES] [--repeat 1] [--work DIR]
"""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# current-practice: the paper's baseline, every job on the whole node with the hand-picked
# strategy (FSDP), one after another. current-practice-fastest: the same queue, but each job on
# its fastest whole-node configuration (a stronger baseline than the paper's).
# saturn-static: Saturn's first plan executed as made (--no-replan), which shows how good the
# plan's prediction is without re-planning's reactions to what it measures.
POLICIES = ["current-practice", "current-practice-fastest", "optimus-greedy", "min", "saturn",
            "saturn-static"]
RUN_FLAGS = {
    "current-practice": ["--policy", "current-practice", "--current-practice", "fsdp"],
    "current-practice-fastest": ["--policy", "current-practice", "--current-practice", "fastest"],
    "optimus-greedy": ["--policy", "optimus-greedy", "--current-practice", "fsdp"],
    "min": ["--policy", "min", "--current-practice", "fsdp"],
    "saturn": ["--policy", "saturn", "--current-practice", "fsdp"],
    "saturn-static": ["--policy", "saturn", "--no-replan", "--current-practice", "fsdp"],
}


def load():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def sh(cmd, log, env):
    with open(log, "w") as out:
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        tail = open(log).read()[-3000:]
        sys.exit(f"bench/makespan: {' '.join(cmd)} exited {rc} (log {log}):\n{tail}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--saturn", default="build/saturn", help="the saturn executable")
    ap.add_argument("--workload", default=os.path.join(HERE, "sweep.yaml"))
    ap.add_argument("--np", type=int, default=os.cpu_count(),
                    help="local ranks (every policy gets the same; default one per core, as a "
                         "GPU node gives each rank its own device)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per policy (medians printed)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated subset of " + ",".join(POLICIES))
    ap.add_argument("--work", default="runs/bench-makespan",
                    help="work directory (data, profile store, one run directory per run)")
    ap.add_argument("--keep", action="store_true", help="reuse WORK's data and profile store")
    ap.add_argument("--json", help="also write every run's numbers to this file")
    a = ap.parse_args()
    policies = [p for p in a.policies.split(",") if p]
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"bench/makespan: unknown policy {p!r}; valid: {', '.join(POLICIES)}")
    saturn = os.path.abspath(a.saturn)
    if not os.access(saturn, os.X_OK):
        sys.exit(f"bench/makespan: no saturn executable at {saturn} (--saturn)")

    env = dict(os.environ)
    # One BLAS thread per rank in the profile and in every run: the hardware fingerprint (and so
    # the stored calibration and trials) depends on it.
    env.setdefault("OMP_NUM_THREADS", "1")
    work = os.path.abspath(a.work)
    if not a.keep and os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work, exist_ok=True)
    workload = os.path.join(work, "workload.yaml")
    shutil.copyfile(a.workload, workload)
    store = os.path.join(work, "profiles.h5")
    t_start = time.time()

    if not os.path.exists(os.path.join(work, "data", "train.bin")):
        texts = sorted(glob.glob("/usr/share/common-licenses/*"))
        sh([saturn, "data", "prepare", "--input", *texts, "--output", os.path.join(work, "data")],
           os.path.join(work, "data.log"), env)
    t0 = time.time()
    # As `saturn run --np` launches its ranks (launch/self_launch): unbound, shared memory.
    mpirun = ["mpirun", "--oversubscribe", "-np", str(a.np), "--bind-to", "none", "--mca", "btl",
              "self,vader"]
    if os.geteuid() == 0:
        mpirun.insert(1, "--allow-run-as-root")
    sh(mpirun + [saturn, "profile", workload, "--store", store, "--current-practice", "fsdp"],
       os.path.join(work, "profile.log"), env)
    print(f"profile store {store} filled in {time.time() - t0:.1f} s (shared by every run)",
          flush=True)

    runs = []
    for rep in range(a.repeat):
        # Rotate the order so that a slow spell of a shared machine does not always hit the
        # same policy.
        order = policies[rep % len(policies):] + policies[:rep % len(policies)]
        for policy in order:
            run_dir = os.path.join(work, f"run{rep}-{policy}")
            shutil.rmtree(run_dir, ignore_errors=True)
            log = run_dir + ".log"
            cmd = [saturn, "run", workload, "--np", str(a.np), "--run-dir", run_dir, "--store",
                   store, "--progress-interval", "30"]
            cmd += RUN_FLAGS[policy]
            load0 = load()
            t0 = time.time()
            sh(cmd, log, env)
            wall = time.time() - t0
            s = json.load(open(os.path.join(run_dir, "summary.json")))
            text = open(log).read()
            m = re.search(r"(\d+) trials run", text)
            trials = int(m.group(1)) if m else -1
            bad = [j["id"] for j in s["jobs"] if j["status"] != "finished"]
            if bad:
                sys.exit(f"bench/makespan: {policy}: jobs not finished: {bad} (log {log})")
            plan = json.load(open(os.path.join(run_dir, "plans", "plan-000.json")))
            configs = sorted({f"{j['strategy']}x{j['devices']}" for j in plan["jobs"]})
            # Where the error comes from: each job's median measured step (metrics.jsonl,
            # evaluations and checkpoints included) against the first plan's step time.
            planned_step = {j["id"]: j["step_time_s"] for j in plan["jobs"]}
            step_err = []
            for j in s["jobs"]:
                rows = [json.loads(l) for l in open(os.path.join(run_dir, "jobs", j["id"],
                                                                 "metrics.jsonl"))]
                t = [row["time_s"] for row in rows]
                dt = [b - a for a, b in zip(t, t[1:])]
                if dt and planned_step.get(j["id"], 0) > 0:
                    step_err.append(statistics.median(dt) / planned_step[j["id"]] - 1)
            r = {"repeat": rep, "policy": policy, "predicted_s": s["predicted_makespan_s"],
                 "measured_s": s["makespan_s"], "error": s["prediction_error"],
                 "solve_s": s["solve_time_s"], "plans": s["plans"], "trials": trials,
                 "lower_bound_s": s.get("lower_bound_s", float("nan")),
                 "wall_s": wall, "load_before": load0, "load_after": load(),
                 "configs": configs,
                 "step_error": statistics.median(step_err) if step_err else float("nan")}
            runs.append(r)
            print(f"  run {rep} {policy:<16} predicted {r['predicted_s']:7.1f} s  measured "
                  f"{r['measured_s']:7.1f} s  error {100 * r['error']:+6.1f}% (steps "
                  f"{100 * r['step_error']:+.0f}%)  "
                  f"(load {load0:.1f}->{r['load_after']:.1f}, {', '.join(configs)})", flush=True)

    print()
    print(f"bench/makespan: {os.path.basename(a.workload)}, {a.np} ranks, {a.repeat} run(s) per "
          f"policy, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
          f"load average now {load():.1f}")
    for rep in range(a.repeat):
        for base, key in (("current-practice", "ratio"), ("current-practice-fastest", "ratio_f")):
            cp = [r for r in runs if r["repeat"] == rep and r["policy"] == base]
            for r in runs:
                if r["repeat"] == rep and cp:
                    r[key] = r["measured_s"] / cp[0]["measured_s"]
                    r["predicted_" + key] = r["predicted_s"] / cp[0]["predicted_s"]
    print(f"| policy | configurations | predicted s | measured s | prediction error "
          f"| job step error | measured / current practice (predicted) "
          f"| measured / current practice, fastest (predicted) | plans | solve s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for policy in policies:
        rs = [r for r in runs if r["policy"] == policy]
        med = lambda k: statistics.median(r[k] for r in rs)
        ratios = []
        for key in ("ratio", "ratio_f"):
            ratios.append(f"{med(key):.2f} ({med('predicted_' + key):.2f})"
                          if all(key in r for r in rs) else "-")
        configs = sorted({c for r in rs for c in r["configs"]})
        print(f"| {policy} | {', '.join(configs)} | {med('predicted_s'):.1f} | "
              f"{med('measured_s'):.1f} | {100 * med('error'):+.1f} % | "
              f"{100 * med('step_error'):+.0f} % | {ratios[0]} | {ratios[1]} | "
              f"{med('plans'):.0f} | {med('solve_s'):.2f} |")
    if a.repeat > 1:
        print("(medians over the repeats; ratios are taken within each repeat)")
    # What any plan could gain here at best: the solver's proven lower bound on the makespan
    # (from the same profiles) against current practice's predicted makespan.
    bounds = [(r["lower_bound_s"], c["predicted_s"], c2["predicted_s"])
              for r in runs if r["policy"] in ("saturn", "saturn-static")
              for c in runs if c["policy"] == "current-practice" and c["repeat"] == r["repeat"]
              for c2 in runs if c2["policy"] == "current-practice-fastest"
              and c2["repeat"] == r["repeat"]]
    if bounds:
        lb = statistics.median(b[0] for b in bounds)
        print(f"lower bound on any plan's makespan (from the profiles): {lb:.1f} s = "
              f"{statistics.median(b[0] / b[1] for b in bounds):.2f} x current practice's "
              f"predicted makespan, {statistics.median(b[0] / b[2] for b in bounds):.2f} x "
              f"the fastest-whole-node variant's")
    if any(r["trials"] != 0 for r in runs):
        print("note: some runs ran trials of their own:",
              [(r["policy"], r["trials"]) for r in runs if r["trials"] != 0])
    print(f"total {time.time() - t_start:.0f} s; run directories and logs under {work}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=2)


if __name__ == "__main__":
    main()
