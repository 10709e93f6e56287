#!/usr/bin/python3
"""bench/makespan/predictions.py: how well Saturn predicts a batch before it runs it.

Runs `saturn run` (policy saturn, each run profiling with its own store and the shared warm
calibration) on each workload at each rank count, --repeat times, and prints from each run's
summary.json: the first plan's predicted makespan against the measured one, every job's
actual / predicted time, the profiling time against the makespan, and the time by cost kind
(segment starts, optimizer steps, evaluations, checkpoint writes) predicted against measured.
Medians over the repeats. Prints tables; never passes or fails on time.

    bench/makespan/predictions.py --saturn build/saturn [--np 2,4] [--repeat 3]
        [--workloads bench/makespan/sweep12.yaml,examples/sweep.yaml] [--work DIR]
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

from run import load, sh  # bench/makespan/run.py: the load average, a logged command

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KINDS = ["start", "steps", "evals", "checkpoints"]


def one_run(saturn, workload, np_, run_dir, env):
    shutil.rmtree(run_dir, ignore_errors=True)
    sh([saturn, "run", workload, "--np", str(np_), "--run-dir", run_dir, "--progress-interval",
        "30"], run_dir + ".log", env)
    s = json.load(open(os.path.join(run_dir, "summary.json")))
    bad = [j["id"] for j in s["jobs"] if j["status"] != "finished"]
    if bad:
        sys.exit(f"predictions: jobs not finished in {run_dir}: {bad}")
    ratios = {j["id"]: j["actual_s"] / j["predicted_s"] for j in s["jobs"] if j["predicted_s"] > 0}
    # Against each segment's prediction at its launch: a job a re-plan moved did other work
    # than its first plan predicted.
    at_launch = {j["id"]: j["actual_s"] / j["predicted_at_launch_s"] for j in s["jobs"]
                 if j.get("predicted_at_launch_s", 0) > 0}
    return {"error": s["prediction_error"], "predicted_s": s["predicted_makespan_s"],
            "measured_s": s["makespan_s"], "profiling_s": s["profiling_s"], "ratios": ratios,
            "at_launch": at_launch,
            "by_kind": s["prediction_by_kind"], "plans": s["plans"],
            "replans_solved": s.get("replans_solved", 0),
            "replan_solve_s": s.get("replan_solve_s", 0.0)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--saturn", default="build/saturn")
    ap.add_argument("--workloads", default=",".join([os.path.join(HERE, "sweep12.yaml"),
                                                     os.path.join(ROOT, "examples", "sweep.yaml")]))
    ap.add_argument("--np", default="2,4", help="rank counts (comma-separated)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", default="runs/bench-predictions")
    a = ap.parse_args()
    saturn = os.path.abspath(a.saturn)
    if not os.access(saturn, os.X_OK):
        sys.exit(f"predictions: no saturn executable at {saturn} (--saturn)")
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "data")
    if not os.path.exists(os.path.join(data, "train.bin")):
        sh([saturn, "data", "prepare", "--input", *sorted(glob.glob("/usr/share/common-licenses/*")),
            "--output", data], os.path.join(work, "data.log"), env)
    workloads = []
    for w in a.workloads.split(","):
        copy = os.path.join(work, os.path.basename(w))
        shutil.copyfile(w, copy)  # beside data/, which its `data:` names
        workloads.append(copy)
    rank_counts = [int(n) for n in a.np.split(",")]
    t0 = time.time()
    results = {}
    for rep in range(a.repeat):
        for w in workloads:
            for np_ in rank_counts:
                name = os.path.splitext(os.path.basename(w))[0]
                run_dir = os.path.join(work, f"{name}-np{np_}-run{rep}")
                l0 = load()
                r = one_run(saturn, w, np_, run_dir, env)
                results.setdefault((name, np_), []).append(r)
                rs = sorted(r["ratios"].values())
                print(f"  {name} np {np_} run {rep}: predicted {r['predicted_s']:.1f} s, measured "
                      f"{r['measured_s']:.1f} s, error {100 * r['error']:+.1f} %; jobs actual/"
                      f"predicted {rs[0]:.2f}-{rs[-1]:.2f}; profiling {r['profiling_s']:.1f} s; "
                      f"{r['plans']} plans, {r['replans_solved']} re-plans solved in "
                      f"{r['replan_solve_s']:.1f} s (load {l0:.1f})", flush=True)
    print()
    print(f"bench/makespan/predictions: {a.repeat} run(s) each, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores")
    print("| workload | ranks | batch error (median; runs) | jobs actual/predicted (all runs) "
          "| jobs outside 0.85-1.15 | jobs actual/predicted at launch (outside) "
          "| profiling / makespan (median) | re-plans solved (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for (name, np_), rs in results.items():
        errs = [r["error"] for r in rs]
        ratios = [x for r in rs for x in r["ratios"].values()]
        outside = sum(1 for x in ratios if not 0.85 <= x <= 1.15)
        launch = [x for r in rs for x in r["at_launch"].values()]
        launch_out = sum(1 for x in launch if not 0.85 <= x <= 1.15)
        prof = statistics.median(r["profiling_s"] / r["measured_s"] for r in rs)
        print(f"| {name} | {np_} | {100 * statistics.median(errs):+.1f} % "
              f"({', '.join(f'{100 * e:+.1f}' for e in errs)}) | {min(ratios):.2f}-"
              f"{max(ratios):.2f} (median {statistics.median(ratios):.2f}) | {outside} of "
              f"{len(ratios)} | {min(launch):.2f}-{max(launch):.2f} ({launch_out} of "
              f"{len(launch)}) | {100 * prof:.1f} % | "
              f"{statistics.median(r['replans_solved'] for r in rs):.0f} |")
    print()
    print("By cost kind, every job's first prediction against its segments (sums over the jobs, "
          "median over the runs):")
    print("| workload | ranks | " + " | ".join(f"{k} predicted / measured s (error)" for k in KINDS)
          + " |")
    print("|---|---|" + "---|" * len(KINDS))
    for (name, np_), rs in results.items():
        cells = []
        for k in KINDS:
            p = statistics.median(r["by_kind"][k]["predicted_s"] for r in rs)
            m = statistics.median(r["by_kind"][k]["actual_s"] for r in rs)
            cells.append(f"{p:.2f} / {m:.2f} ({100 * (m - p) / p:+.0f} %)" if p > 0 else
                         f"0 / {m:.2f}")
        print(f"| {name} | {np_} | " + " | ".join(cells) + " |")
    print(f"total {time.time() - t0:.0f} s; run directories under {work}")


if __name__ == "__main__":
    main()
