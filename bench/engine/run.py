#!/usr/bin/python3
"""Engine benchmark: Saturn's CPU training tokens/s beside PyTorch's (same model shapes, same
batch, same thread count, median step time after warm-up), and our GEMM rate beside plain
OpenBLAS sgemm on the model's shapes. Prints tables; never passes or fails on time.

Usage: bench/engine/run.py [--build build] [--threads N] [--steps 5]
Run with Debian's /usr/bin/python3 (python3-torch)."""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "python"))

SHAPES = [  # arch, layers, d_model, heads, seq, batch
    ("gpt2", 4, 256, 4, 128, 8),
    ("gpt2", 8, 512, 8, 256, 4),
    ("llama", 4, 256, 4, 128, 8),
    ("llama", 8, 512, 8, 256, 4),
]


def torch_tokens_per_s(arch, layers, d_model, heads, seq, batch, steps, threads):
    import torch
    import torch.nn.functional as F
    from torch_reference import gpt2_forward, llama_forward

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    C, V = d_model, 256
    if arch == "gpt2":
        Fd = 4 * C
        shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (seq, C),
                  "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
        for l in range(layers):
            q = f"transformer.h.{l}."
            shapes.update({q + "ln_1.weight": (C,), q + "ln_1.bias": (C,),
                           q + "attn.c_attn.weight": (C, 3 * C), q + "attn.c_attn.bias": (3 * C,),
                           q + "attn.c_proj.weight": (C, C), q + "attn.c_proj.bias": (C,),
                           q + "ln_2.weight": (C,), q + "ln_2.bias": (C,),
                           q + "mlp.c_fc.weight": (C, Fd), q + "mlp.c_fc.bias": (Fd,),
                           q + "mlp.c_proj.weight": (Fd, C), q + "mlp.c_proj.bias": (C,)})
        fwd = gpt2_forward
    else:
        Fd = (8 * C // 3 + 7) // 8 * 8
        shapes = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,),
                  "lm_head.weight": (V, C)}
        for l in range(layers):
            q = f"model.layers.{l}."
            shapes.update({q + "input_layernorm.weight": (C,),
                           q + "self_attn.q_proj.weight": (C, C), q + "self_attn.k_proj.weight": (C, C),
                           q + "self_attn.v_proj.weight": (C, C), q + "self_attn.o_proj.weight": (C, C),
                           q + "post_attention_layernorm.weight": (C,),
                           q + "mlp.gate_proj.weight": (Fd, C), q + "mlp.up_proj.weight": (Fd, C),
                           q + "mlp.down_proj.weight": (C, Fd)})
        fwd = llama_forward
    params = {n: (torch.randn(s) * 0.02).requires_grad_(True) for n, s in shapes.items()}
    cfg = {"d_model": C, "n_head": heads, "n_layer": layers, "norm_eps": 1e-5, "rope_theta": 10000.0}
    opt = torch.optim.AdamW(list(params.values()), lr=1e-4)
    idx = torch.randint(0, V, (batch, seq))
    tgt = torch.randint(0, V, (batch, seq))

    def step():
        opt.zero_grad(set_to_none=True)
        logits = fwd(params, cfg, idx)
        loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1))
        loss.backward()
        opt.step()

    step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return batch * seq / statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--coretype", help="set OPENBLAS_CORETYPE for both Saturn and PyTorch (e.g. "
                    "SkylakeX where OpenBLAS 0.3.21 does not recognise the CPU and falls back to "
                    "its Prescott kernels)")
    args = ap.parse_args()
    if args.coretype:
        os.environ["OPENBLAS_CORETYPE"] = args.coretype
    exe = os.path.join(args.build, "bench", "engine", "bench_engine")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    print(f"# Engine benchmark, {datetime.date.today()}, {cpu}, {args.threads} threads, "
          f"PyTorch {torch_version or 'absent'}, median of {args.steps} steps after warm-up\n")
    rows, gemms, cores = [], [], set()
    for arch, layers, d, h, seq, batch in SHAPES:
        out = subprocess.run([exe, "--arch", arch, "--layers", str(layers), "--d-model", str(d),
                              "--heads", str(h), "--seq", str(seq), "--batch", str(batch),
                              "--steps", str(args.steps)], env=env, check=True,
                             capture_output=True, text=True).stdout
        lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        ours = next(l for l in lines if l["kind"] == "train")
        cores.add(ours["blas_core"])
        theirs = torch_tokens_per_s(arch, layers, d, h, seq, batch, args.steps, args.threads) if torch_version else None
        rows.append((arch, layers, d, seq, batch, ours["params"], ours["tokens_per_s"], theirs))
        gemms += [(f"{arch} L{layers} d{d}", g["shape"], g["ours_gflops"], g["sgemm_gflops"])
                  for g in lines if g["kind"] == "gemm"]
    print(f"OpenBLAS kernels: {', '.join(sorted(cores))} (OPENBLAS_CORETYPE="
          f"{os.environ.get('OPENBLAS_CORETYPE', 'unset')})\n")
    print("| model | params | seq | batch | Saturn tok/s | PyTorch tok/s | ratio |")
    print("|---|---|---|---|---|---|---|")
    for arch, layers, d, seq, batch, params, ours, theirs in rows:
        ratio = f"{ours / theirs:.2f}" if theirs else "n/a"
        th = f"{theirs:,.0f}" if theirs else "n/a"
        print(f"| {arch} L{layers} d{d} | {params / 1e6:.2f}M | {seq} | {batch} | {ours:,.0f} | {th} | {ratio} |")
    print("\n| model | GEMM MxKxN | Saturn linear GFLOP/s | OpenBLAS sgemm GFLOP/s |")
    print("|---|---|---|---|")
    for model, shape, ours, raw in gemms:
        print(f"| {model} | {shape} | {ours:.1f} | {raw:.1f} |")


if __name__ == "__main__":
    main()
