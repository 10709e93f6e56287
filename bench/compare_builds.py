#!/usr/bin/python3
"""Before/after: CPU training tokens/s of two builds of Saturn, side by side in one run.

Runs bench_engine (one device: GPT-2 and LLaMA shapes) and bench_strategies (every strategy at
degree 2 on local ranks) from both builds, alternating before/after for each repeat so that
load drifts hit both alike, and prints the median tokens/s of each and their ratio
(after / before). Prints a table; never passes or fails on time: a ratio within the spread of
the repeats is noise.

Usage: bench/compare_builds.py --before BUILD_A --after BUILD_B [--repeats 5] [--degree 2]
                               [--steps 5] [--cases REGEX]
Run with Debian's /usr/bin/python3.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ENGINE = [  # bench_engine shapes: (label, arguments)
    ("gpt2 L4 d256 8x128", ["--arch", "gpt2", "--layers", "4", "--d-model", "256", "--heads", "4",
                            "--seq", "128", "--batch", "8"]),
    ("llama L4 d256 8x128", ["--arch", "llama", "--layers", "4", "--d-model", "256", "--heads",
                             "4", "--seq", "128", "--batch", "8"]),
]
STRATEGIES = [  # (strategy, knobs)
    ("ddp", []), ("fsdp", []), ("pipeline", ["schedule=1f1b"]), ("pipeline", ["schedule=gpipe"]),
    ("tensor", []), ("offload", []), ("ddp", ["recompute=true"]),
]
STRATEGY_MODEL = ["--arch", "gpt2", "--layers", "8", "--d-model", "256", "--heads", "8",
                  "--seq", "64", "--batch", "16"]


def last_json(stdout, kind=None):
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            r = json.loads(line)
            if kind is None or r.get("kind") == kind:
                return r
    return None


def run(cmd, env, kind=None):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    r = last_json(p.stdout, kind)
    if p.returncode != 0 or r is None:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{(p.stderr or p.stdout)[-400:]}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="build directory of the old version")
    ap.add_argument("--after", required=True, help="build directory of the new version")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--degree", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--cases", default="", help="only the cases whose name matches this regex")
    args = ap.parse_args()
    builds = {"before": args.before, "after": args.after}
    for b in builds.values():
        for sub in ("engine/bench_engine", "strategies/bench_strategies"):
            if not os.path.exists(os.path.join(b, "bench", sub)):
                sys.exit(f"{b}/bench/{sub} not found: build bench_engine and bench_strategies")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    cases = []
    for label, a in ENGINE:
        cases.append((f"engine {label}", lambda b, a=a: run(
            [os.path.join(b, "bench/engine/bench_engine"), "--steps", str(args.steps)] + a, env,
            "train")))
    for strategy, knobs in STRATEGIES:
        name = strategy + ("" if not knobs else " " + ",".join(knobs))
        cmd_tail = ["--strategy", strategy] + STRATEGY_MODEL + ["--steps", str(args.steps)]
        for k in knobs:
            cmd_tail += ["--knob", k]
        cases.append((f"{name} x{args.degree}", lambda b, t=cmd_tail: run(
            [args.mpirun, "-np", str(args.degree), "--oversubscribe", "--allow-run-as-root",
             os.path.join(b, "bench/strategies/bench_strategies")] + t, env)))
    print(f"{os.cpu_count()} cores, OMP_NUM_THREADS=1 per rank, {args.repeats} repeats alternating "
          f"before/after; strategies: gpt2 8x8 d256, batch 16 x 64 tokens, degree {args.degree}")
    head = f"{'case':<32} {'before tok/s':>12} {'after tok/s':>12} {'after/before':>12} {'spread':>8}"
    print(head)
    print("-" * len(head))
    for name, fn in cases:
        if args.cases and not re.search(args.cases, name):
            continue
        tps = {"before": [], "after": []}
        for _ in range(args.repeats):
            for which, b in builds.items():
                r = fn(b)
                if "infeasible" in r:
                    sys.exit(f"{name}: infeasible in {which}: {r['infeasible']}")
                tps[which].append(r["tokens_per_s"])
        mb, ma = statistics.median(tps["before"]), statistics.median(tps["after"])
        # The repeats' own spread (max/min of the ratios of paired runs) says what noise is.
        ratios = [a / b for a, b in zip(tps["after"], tps["before"])]
        print(f"{name:<32} {mb:12.0f} {ma:12.0f} {ma / mb:12.3f} "
              f"{min(ratios):.2f}-{max(ratios):.2f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
