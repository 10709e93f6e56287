#!/usr/bin/env python3
"""The sweep half of the device check (tests/gpu/device-check.sh): `saturn run --device cuda` of
a sweep of GPT-2-124M-class jobs on several ranks sharing the machine's GPUs, then one table of
what each job ran as (strategy, devices), its tokens/s and its peak device memory.

Several ranks on one GPU: NCCL refuses two ranks of one communicator on the same GPU, so a job
whose ranks share a GPU gets the MPI data communicator staged through host memory (the run log
says which, per job); jobs of one rank need none. `--oversubscribe-devices` is what lets ranks
share the GPU at all.

Also runs here on the CPU emulator, at a tiny scale, to check this script itself:
  device_check_sweep.py --saturn build/saturn_emu --scale tiny --np 2 --out /tmp/sweep
Exit 0 when every job finished, 1 otherwise (the table is written either way).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

SCALES = {
    # GPT-2 124M's width and depth (byte tokens: a 256-word vocabulary, so 85M parameters in
    # the blocks and a small embedding), T = 1024, as the issue asks.
    "124m": dict(seq_len=1024, steps=24, batch=8, eval_every=24,
                 models={"gpt2-124m": "{arch: gpt2, n_layer: 12, n_head: 12, d_model: 768}",
                         "llama-124m": "{arch: llama, n_layer: 12, n_head: 12, d_model: 768, d_ff: 2048}"}),
    # For checking this script on the emulator.
    "tiny": dict(seq_len=32, steps=6, batch=4, eval_every=6,
                 models={"gpt2-tiny": "{arch: gpt2, n_layer: 2, n_head: 2, d_model: 32}",
                         "llama-tiny": "{arch: llama, n_layer: 2, n_head: 2, d_model: 32, d_ff: 64}"}),
}


def write_workload(path: Path, data: Path, scale: dict) -> None:
    models = "\n".join(f"  {name}: {spec}" for name, spec in scale["models"].items())
    names = ", ".join(scale["models"])
    path.write_text(f"""name: device-check
data: {{train: {data}/train.bin, val: {data}/val.bin}}
defaults:
  seq_len: {scale['seq_len']}
  steps: {scale['steps']}
  eval_every: {scale['eval_every']}
  eval_batches: 2
  checkpoint_every: {scale['steps']}
  optimizer: {{type: adamw, lr: 3e-4, weight_decay: 0.1, grad_clip: 1.0}}
  schedule: {{warmup: 2, decay: cosine, min_lr_ratio: 0.1}}
  seed: 1234
models:
{models}
jobs:
  - sweep: {{model: [{names}], lr: [3e-4, 1e-3, 3e-3], batch_size: [{scale['batch']}]}}
strategies: [ddp, fsdp, pipeline, tensor, offload]
cluster: auto
solver: {{time_limit: 10}}
""")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--saturn", required=True, help="the saturn (or saturn_emu) executable")
    ap.add_argument("--np", type=int, default=4, help="ranks (default 4)")
    ap.add_argument("--scale", choices=sorted(SCALES), default="124m")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--out", required=True, help="folder for data, run directory, log, table")
    ap.add_argument("--timeout", type=float, default=240, help="seconds for the whole run")
    ap.add_argument("--text", nargs="*", help="text files to tokenize (default: the repo's docs and sources)")
    args = ap.parse_args()

    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    texts = args.text or sorted(str(p) for p in list(root.glob("docs/*.md")) +
                                list(root.glob("runtime/**/*.cpp")) + list(root.glob("runtime/**/*.hpp")))
    data = out / "data"
    subprocess.run([args.saturn, "data", "prepare", "--input", *texts, "--output", str(data)],
                   check=True, stdout=subprocess.DEVNULL)
    scale = SCALES[args.scale]
    workload = out / "sweep.yaml"
    write_workload(workload, data, scale)
    run_dir = out / "run"
    log_path = out / "sweep.log"
    cmd = [args.saturn, "run", str(workload), "--np", str(args.np), "--device", args.device,
           "--oversubscribe-devices", "--run-dir", str(run_dir), "--progress-interval", "30"]
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        log.write(" ".join(cmd) + "\n")
        log.flush()
        try:
            rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.monotonic() - t0
    log_text = log_path.read_text(errors="replace")

    # Per job: the device-memory peak of its last segment (timeline.jsonl's job_end), and the
    # median tokens/s of its steps after the first.
    peak = {}
    timeline = run_dir / "timeline.jsonl"
    if timeline.exists():
        for line in timeline.read_text().splitlines():
            e = json.loads(line) if line.strip() else {}
            if e.get("event") in ("job_end", "job_stop", "failure") and "peak_device_bytes" in e:
                peak[e["job"]] = f"{e['peak_device_bytes'] / 2**20:.1f} MiB"
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    rows = []
    for job in summary.get("jobs", []):
        jid = job["id"]
        seg = job["segments"][-1] if job.get("segments") else {}
        rates = []
        metrics = run_dir / "jobs" / jid / "metrics.jsonl"
        if metrics.exists():
            lines = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()]
            rates = [l["tokens_per_s"] for l in lines[1:]] or [l["tokens_per_s"] for l in lines]
        rows.append((jid, seg.get("strategy", "?"), seg.get("devices", "?"), job["status"],
                     f"{statistics.median(rates):.0f}" if rates else "-", peak.get(jid, "-")))

    table = [f"saturn run --device {args.device} --np {args.np}, scale {args.scale}: exit {rc}, "
             f"{wall:.0f} s wall, makespan {summary.get('makespan_s', float('nan')):.1f} s",
             "", "| job | strategy | devices | status | tokens/s (median) | peak device memory |",
             "|---|---|---|---|---|---|"]
    table += [f"| {' | '.join(str(c) for c in r)} |" for r in rows]
    # The data communicators the segments got (logged once per segment by its rank 0; 1-rank
    # CUDA segments get one too).
    comms = re.findall(r"data communicator of (\d+ rank\(s\): [^\n]*)", log_text)
    table += ["", "Data communicators chosen (one per job segment):"]
    table += [f"- {n} x {c}" for c, n in sorted({c: comms.count(c) for c in comms}.items())] or ["- none"]
    text = "\n".join(table) + "\n"
    (out / "sweep-table.md").write_text(text)
    print(text)
    ok = rc == 0 and rows and all(r[3] == "finished" for r in rows)
    if not ok:
        print("\n".join(log_text.splitlines()[-30:]), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
