#!/usr/bin/python3
"""GPU engine benchmark: Saturn's CUDA backend (bench_engine --device cuda) beside PyTorch eager
and torch.compile on the same GPU, for GPT-2-124M- and 350M-shaped models: training tokens/s
(forward, backward, AdamW, global-norm clipping; median step time after warm-up) and MFU =
(6·N + 12·L·C·T) FLOPs per token × tokens/s over the GPU's dense bf16 peak. Prints one table;
never passes or fails on time. PyTorch runs in bf16 autocast with fp32 master weights,
scaled_dot_product_attention (causal) and fused AdamW, the usual way to train these models.

Usage: bench/engine/run_cuda.py [--exe build/bench/engine/bench_engine] [--steps 5]
         [--shapes 124M,350M] [--batch 16] [--no-compile]"""
import argparse
import datetime
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roofline  # noqa: E402  (the prediction printed beside the measurement)

SHAPES = {  # name: (layers, d_model, heads)
    "124M": (12, 768, 12),
    "350M": (24, 1024, 16),
}
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128, as llm.c does
SEQ = 1024
PEAKS = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}


def peak_for(name, override):
    if override:
        return override * 1e12
    return next((v for k, v in PEAKS.items() if k in name), 0.0)


def torch_run(layers, d, heads, batch, steps, compile_model):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, d)
            self.wpe = nn.Embedding(SEQ, d)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, idx, tgt):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for b in self.h:
                x = b(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.float().view(-1, VOCAB), tgt.view(-1))

    torch.manual_seed(0)
    model = GPT().cuda()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if compile_model else model
    idx = torch.randint(0, VOCAB, (batch, SEQ), device="cuda")
    tgt = torch.randint(0, VOCAB, (batch, SEQ), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(3 if compile_model else 1):  # compilation and autotuning happen here
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    del model, opt, fwd
    torch.cuda.empty_cache()
    return batch * SEQ / statistics.median(times), params


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join("build", "bench", "engine", "bench_engine"))
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--shapes", default="124M,350M")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--json", help="also write the rows here")
    args = ap.parse_args()
    try:
        import torch
        torch_version = torch.__version__ if torch.cuda.is_available() else None
    except ImportError:
        torch_version = None
    rows = []
    gpu = "?"
    for shape in args.shapes.split(","):
        layers, d, heads = SHAPES[shape]
        cmd = [args.exe, "--device", "cuda", "--arch", "gpt2", "--layers", str(layers),
               "--d-model", str(d), "--heads", str(heads), "--seq", str(SEQ), "--vocab", str(VOCAB),
               "--batch", str(args.batch), "--steps", str(args.steps), "--ops"]
        if args.peak_tflops:
            cmd += ["--peak-tflops", str(args.peak_tflops)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"# Saturn {shape}: bench_engine failed ({proc.returncode}): {proc.stderr.strip()}",
                  file=sys.stderr)
            ours = None
        else:
            lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
            ours = next(l for l in lines if l["kind"] == "train")
            gpu = ours["gpu"]
        row = {"shape": shape, "saturn": ours,
               "ops": [l for l in lines if l["kind"] == "op"] if ours else [],
               "breakdown": next((l for l in lines if l["kind"] == "breakdown"), None) if ours else None}
        peak = ours["peak_flops"] if ours else peak_for(gpu, args.peak_tflops)
        for mode in ("eager", "compile"):
            if torch_version is None or (mode == "compile" and args.no_compile):
                row[mode] = None
                continue
            try:
                tps, n = torch_run(layers, d, heads, args.batch, args.steps, mode == "compile")
                fpt = 6.0 * n + 12.0 * layers * d * SEQ
                row[mode] = {"tokens_per_s": tps, "params": n,
                             "mfu": fpt * tps / peak if peak else 0.0}
                if gpu == "?":
                    gpu = torch.cuda.get_device_name()
            except Exception as e:  # report and carry on: one failure must not hide the rest
                print(f"# PyTorch {mode} {shape} failed: {e}", file=sys.stderr)
                row[mode] = None
        rows.append(row)

    print(f"\n# GPU engine benchmark, {datetime.date.today()}, {gpu}, PyTorch {torch_version or 'absent'}, "
          f"batch {args.batch} x seq {SEQ}, vocab {VOCAB}, median of {args.steps} steps after warm-up\n")
    print("| model | params | Saturn tok/s | Saturn MFU | roofline MFU | eager tok/s | eager MFU | "
          "compile tok/s | compile MFU | Saturn / eager |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    roof_gpu = next((g for g in roofline.GPUS if g in gpu), None)

    def cell(r, key, fmt):
        return fmt.format(r[key]) if r else "n/a"

    for r in rows:
        s, e, c = r["saturn"], r["eager"], r["compile"]
        n = (s or e or c or {}).get("params")
        params = f"{n / 1e6:.0f}M" if n else "n/a"
        ratio = f"{s['tokens_per_s'] / e['tokens_per_s']:.2f}" if s and e else "n/a"
        # bench/engine/roofline.py's prediction for this GPU at its default efficiencies
        roof = "n/a"
        if roof_gpu:
            _, _, mfu, _ = roofline.estimate(r["shape"], roof_gpu, args.batch, SEQ)
            roof = f"{mfu:.0%}"
        print(f"| gpt2-{r['shape']} | {params} | {cell(s, 'tokens_per_s', '{:,.0f}')} | "
              f"{cell(s, 'mfu', '{:.1%}')} | {roof} | {cell(e, 'tokens_per_s', '{:,.0f}')} | "
              f"{cell(e, 'mfu', '{:.1%}')} | "
              f"{cell(c, 'tokens_per_s', '{:,.0f}')} | {cell(c, 'mfu', '{:.1%}')} | {ratio} |")
    print("\nWhere Saturn's step goes: every GEMM and attention call of the step timed alone at its "
          "shape (median of 10 after warm-up, times the calls per step); the rest = the measured "
          "step less those (norms, elementwise, loss, embedding, AdamW, gradient norm, gaps):\n")
    print("| model | step ms | attention | GEMMs | the rest |")
    print("|---|---|---|---|---|")
    for r in rows:
        b = r.get("breakdown")
        if not b:
            continue
        step = b["step_ms"]
        print(f"| gpt2-{r['shape']} | {step:.1f} | {b['attention_ms']:.1f} ms ({b['attention_ms'] / step:.0%}) | "
              f"{b['gemm_ms']:.1f} ms ({b['gemm_ms'] / step:.0%}) | "
              f"{b['rest_ms']:.1f} ms ({b['rest_ms'] / step:.0%}) |")
    print("\n| model | op | calls per step | ms per call | TFLOP/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        for o in r["ops"]:
            tf = f"{o['tflops']:.1f}" if o["tflops"] else "-"
            print(f"| gpt2-{r['shape']} | {o['op']} | {o.get('count', 1)} | {o['ms']:.3f} | {tf} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    # A Saturn run that did not happen is a failure of the check, not a missing number.
    return 0 if all(r["saturn"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
