#!/usr/bin/python3
"""Strategy benchmark: every parallel strategy at degree 1, 2 and 4 on local ranks (mpirun),
one table: step time, tokens/s, fraction of the step spent communicating (exposed time of the
busiest rank), peak device memory per rank beside the static estimate, and for pipelines the
measured bubble beside (p-1)/(m+p-1). Prints tables; never passes or fails on time.

On a machine with fewer cores than ranks the ranks share cores (--oversubscribe): step times
then measure contention as much as the strategy, and bubbles are diluted by the CPU the idle
stages give up. Compare strategies at the same degree.

With --lora R every configuration also runs as a LoRA job of rank R on every linear of the
same model, and the table gains its step time and peak device memory per rank beside the full
fine-tune's (and the LoRA estimate): what a LoRA job saves under each strategy.

Usage: bench/strategies/run.py [--build build] [--degrees 1,2,4] [--arch gpt2] [--layers 8]
                               [--d-model 256] [--heads 8] [--seq 64] [--batch 16] [--steps 5]
                               [--lora RANK]
"""
import argparse
import json
import os
import subprocess
import sys

def configs(exe):
    """(strategy, knobs, smallest degree) of every offered strategy and knob variant, from the
    strategy registry (bench_strategies --list): a strategy added to Saturn is benchmarked too."""
    p = subprocess.run([exe, "--list"], capture_output=True, text=True, timeout=60, check=True)
    out = []
    for line in p.stdout.splitlines():
        r = json.loads(line)
        for knobs in r["knob_variants"]:
            out.append((r["strategy"], knobs, r["min_degree"]))
    return out


def run(cmd, env):
    """One benchmark run: its JSON line, or {"failed": why}."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"failed": (p.stderr or p.stdout).strip()[-200:]}
    return json.loads(lines[-1])


def mib(b):
    return f"{b / 2**20:8.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--degrees", default="1,2,4")
    ap.add_argument("--arch", default="gpt2")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--lora", type=int, default=0,
                    help="also run each configuration as a LoRA job of this rank")
    args = ap.parse_args()
    exe = os.path.join(args.build, "bench", "strategies", "bench_strategies")
    if not os.path.exists(exe):
        sys.exit(f"{exe} not found: build the target bench_strategies first")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    model = ["--arch", args.arch, "--layers", str(args.layers), "--d-model", str(args.d_model),
             "--heads", str(args.heads), "--seq", str(args.seq), "--batch", str(args.batch),
             "--steps", str(args.steps)]
    print(f"model {args.arch} {args.layers}x{args.heads} d_model {args.d_model}, batch "
          f"{args.batch} x {args.seq} tokens, {os.cpu_count()} cores, OMP_NUM_THREADS=1 per rank")
    head = (f"{'strategy':<22} {'deg':>3} {'step s':>7} {'tok/s':>8} {'comm %':>6} "
            f"{'peak MiB/rank':>13} {'est MiB':>8} {'comm MB/step':>12} {'est MB':>7} {'bubble':>7} "
            f"{'(p-1)/(m+p-1)':>13}" +
            (f" {'LoRA step s':>11} {'LoRA MiB/rank':>13} {'LoRA est':>8} {'LoRA/full':>9}"
             if args.lora else "") + "  layout")
    print(head)
    print("-" * len(head))
    for degree in [int(d) for d in args.degrees.split(",")]:
        for strategy, knobs, smallest in configs(exe):
            if degree < smallest:
                continue
            cmd = [args.mpirun, "-np", str(degree), "--oversubscribe", "--allow-run-as-root", exe,
                   "--strategy", strategy] + model
            for k in knobs:
                cmd += ["--knob", k]
            name = strategy + ("" if not knobs else " " + ",".join(knobs))
            r = run(cmd, env)
            if "failed" in r or "infeasible" in r:
                print(f"{name:<22} {degree:>3} {'failed' if 'failed' in r else 'infeasible'}: "
                      f"{r.get('failed') or r.get('infeasible')}")
                continue
            lora = ""
            if args.lora:
                q = run(cmd + ["--lora-rank", str(args.lora)], env)
                lora = (f" {q['step_s']:11.3f} {mib(q['peak_bytes']):>13} "
                        f"{mib(q['estimate_bytes']):>8} {q['peak_bytes'] / r['peak_bytes']:9.2f}"
                        if "step_s" in q else f" {'-':>11} {q.get('failed') or q.get('infeasible')}")
            bubble = f"{r['bubble']:7.2f}" if "bubble" in r else f"{'':>7}"
            theory = f"{r['bubble_theory']:13.2f}" if "bubble_theory" in r else f"{'':>13}"
            print(f"{name:<22} {degree:>3} {r['step_s']:7.3f} {r['tokens_per_s']:8.0f} "
                  f"{100 * r['comm_fraction']:6.1f} {mib(r['peak_bytes']):>13} "
                  f"{mib(r['estimate_bytes']):>8} {r['comm_bytes_per_step'] / 1e6:12.2f} "
                  f"{r['comm_bytes_estimate'] / 1e6:7.2f} {bubble} {theory}{lora}  {r['layout']}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
