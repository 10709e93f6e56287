#!/usr/bin/python3
"""Roofline estimate of one GPT-2 training step on the CUDA backend: for every kernel of the
step, the floating-point operations it executes and the bytes it must move through HBM per
token, the time each bound gives on a GPU (its dense bf16 tensor-core peak and its HBM
bandwidth, each at an efficiency printed with the table), and the MFU the sum predicts, with the
6·N + 12·L·C·T FLOPs per token that bench_engine and bench/engine/run_cuda.py count.

It is a model, not a measurement: the measured MFU comes from `bench/engine/run_cuda.py` on a
GPU (tests/gpu/device-check.sh). Its use is to say which kernels bound the step and what the
kernels of issue 18 (tensor-core attention, fused epilogues, one-pass classifier, fused
residual + norm) are worth, so a GPU measurement far below it points at a kernel, not at the
plan. Counted bytes are the compulsory ones (each operand read once from HBM, each result
written once); re-reads that hit L2 (flash attention's K/V tiles, a GEMM's operand tiles) are
not counted.

Usage: bench/engine/roofline.py [--gpu H200] [--batch 16] [--seq 1024] [--shapes 124M,350M]
         [--gemm-eff 0.75] [--attn-eff 0.25] [--bw-eff 0.80] [--markdown]"""
import argparse
from dataclasses import dataclass

SHAPES = {  # name: (layers, d_model, heads), as bench/engine/run_cuda.py
    "124M": (12, 768, 12),
    "350M": (24, 1024, 16),
}
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128 (llm.c), as run_cuda.py
GPUS = {  # dense bf16 tensor-core peak (FLOP/s), HBM bandwidth (B/s), fp32 CUDA-core peak
    "H200": (989.4e12, 4.8e12, 66.9e12),
    "H100": (989.4e12, 3.35e12, 66.9e12),
    "A100": (312e12, 2.0e12, 19.5e12),
}
BF16, FP32 = 2, 4


@dataclass
class Kernel:
    name: str
    kind: str  # "gemm", "attention" (tensor cores), "cuda-core" (fp32 attention), "memory"
    flops: float  # executed per token
    bytes: float  # compulsory HBM traffic per token


def step_kernels(L, C, H, T, V, tokens_per_step, n_params, design):
    """The kernels of one training step (forward, backward, AdamW) of a GPT-2-shaped model, per
    token. design = "issue18" (this issue's kernels) or "before" (the kernels before it)."""
    N = tokens_per_step
    F = 4 * C  # MLP width
    fused = design == "issue18"

    def gemm(name, k, m, inp, out, out_bytes=BF16, weight_bytes=BF16, accumulate=False):
        """out[N, m] = inp[N, k] · W[k, m]: 2·k·m FLOPs per token; reads inp and the weights
        (amortised over the step's tokens), writes out (reads it too when it accumulates)."""
        b = inp * BF16 + out * out_bytes * (2 if accumulate else 1) + weight_bytes * k * m / N
        return Kernel(name, "gemm", 2.0 * k * m, b)

    def mem(name, b):
        return Kernel(name, "memory", 0.0, b)

    hd = C // H
    # Causal attention executes the lower triangle, skipping 16-key chunks no row of a warp sees:
    # on average T/2 + 8 keys per query, 2·hd FLOPs per key and head for each of the products.
    keys = T / 2 + 8
    attn_mm = 2.0 * keys * hd * H  # one [T x T] x [T x hd]-shaped product per token
    ks = []
    for _ in range(L):
        # ---- forward
        if fused:
            ks.append(mem("residual + layernorm (fused)", 4 * C + 4 * C + 2 * FP32))
        else:
            ks.append(mem("residual", 6 * C))
            ks.append(mem("layernorm", 4 * C + 2 * FP32))
        ks.append(gemm("qkv", C, 3 * C, C, 3 * C))
        ks.append(Kernel("attention forward", "attention" if fused else "cuda-core",
                         2 * attn_mm, 6 * C * BF16 / 2 + 2 * C + FP32 * H))
        ks.append(gemm("attention projection", C, C, C, C))
        if fused:
            ks.append(mem("residual + layernorm (fused)", 8 * C + 2 * FP32))
            # bias + GELU in the epilogue; the pre-activation kept (aux) for the backward
            ks.append(Kernel("fc + bias + GELU epilogue", "gemm", 2.0 * C * F,
                             2 * C + 2 * F * BF16 + BF16 * C * F / N))
        else:
            ks.append(mem("residual", 6 * C))
            ks.append(mem("layernorm", 4 * C + 2 * FP32))
            ks.append(gemm("fc", C, F, C, F))
            ks.append(mem("gelu", 2 * F * BF16))
        ks.append(gemm("fc projection", F, C, F, C))
        # ---- backward: each GEMM twice (input and weight gradients, fp32 weight gradients
        # accumulated); the activation gradient written once (β = 0) where issue 18 removed the
        # memset, else zeroed, then read and written.
        acc = not fused
        ks.append(gemm("fc projection dinp" + (" + dGELU epilogue" if fused else ""), C, F, C,
                       F, accumulate=acc))
        if fused:
            ks[-1].bytes += F * BF16  # the pre-activation (aux) the dGELU epilogue reads
        else:
            ks.append(mem("gelu backward", 3 * F * BF16 + F * BF16))
            ks.append(mem("memsets (dact, dfc)", 2 * F * BF16))
        ks.append(Kernel("fc projection dweight", "gemm", 2.0 * C * F,
                         (C + F) * BF16 + 2 * FP32 * C * F / N))
        ks.append(gemm("fc dinp", F, C, F, C, accumulate=acc))
        ks.append(Kernel("fc dweight", "gemm", 2.0 * C * F, (C + F) * BF16 + 2 * FP32 * C * F / N))
        if not fused:
            ks.append(mem("bias gradient column sums", (F + C) * BF16))
        ks.append(mem("layernorm backward (x2)", 2 * (4 * C * BF16 + 2 * C * BF16)))
        ks.append(gemm("attention projection dinp", C, C, C, C, accumulate=acc))
        ks.append(Kernel("attention projection dweight", "gemm", 2.0 * C * C,
                         2 * C * BF16 + 2 * FP32 * C * C / N))
        # Backward recomputes S (and P) and dP in both the dQ and the dK/dV kernels: 7 products.
        ks.append(Kernel("attention backward", "attention" if fused else "cuda-core",
                         7 * attn_mm, (6 * C + 2 * C + 2 * C + 6 * C * 2) * BF16 / 2 + 3 * FP32 * H))
        ks.append(gemm("qkv dinp", 3 * C, C, 3 * C, C, accumulate=acc))
        ks.append(Kernel("qkv dweight", "gemm", 2.0 * C * 3 * C,
                         4 * C * BF16 + 2 * FP32 * 3 * C * C / N))
        if not fused:
            ks.append(mem("memsets (dln, datty, dqkv)", 5 * C * BF16))
    # ---- classifier: logits [N, V] in bf16, tied weights
    ks.append(gemm("lm head", C, V, C, V))
    if fused:
        # one pass for the row statistics, one to write the gradient in place
        ks.append(mem("softmax + cross-entropy + gradient (one pass)", 3 * V * BF16))
    else:
        ks.append(mem("cross-entropy forward", 2 * V * BF16))
        ks.append(mem("cross-entropy backward", 4 * V * BF16))
    ks.append(gemm("lm head dinp", V, C, V, C, accumulate=not fused))
    ks.append(Kernel("lm head dweight", "gemm", 2.0 * C * V, (C + V) * BF16 + 2 * FP32 * C * V / N))
    ks.append(mem("embedding forward + backward", 4 * C * BF16 + 2 * C * FP32))
    # ---- optimizer, once per step: AdamW reads master weights, gradient and both moments,
    # writes them and the bf16 copy; the gradient norm reads the gradients; they are zeroed.
    ks.append(mem("AdamW + gradient norm + zeroing", (7 * FP32 + BF16 + FP32 + FP32) * n_params / N))
    return ks


def n_params(L, C, T, V):
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


# Default efficiencies: cuBLASLt's bf16 GEMMs at these shapes; the WMMA attention's own estimate
# (docs/cuda.md: bound by shared-memory bandwidth near 25 % of the peak); the fp32 one-warp-per-
# row attention before issue 18; HBM-bound kernels.
GEMM_EFF, ATTN_EFF, CORE_EFF, BW_EFF = 0.75, 0.25, 0.25, 0.80


def estimate(shape, gpu, batch, seq, gemm_eff=GEMM_EFF, attn_eff=ATTN_EFF, bw_eff=BW_EFF,
             design="issue18", core_eff=CORE_EFF):
    L, C, H = SHAPES[shape]
    peak, bw, fp32_peak = GPUS[gpu]
    P = n_params(L, C, seq, VOCAB)
    ks = step_kernels(L, C, H, seq, VOCAB, batch * seq, P, design)
    rows = {}
    for k in ks:
        rate = {"gemm": peak * gemm_eff, "attention": peak * attn_eff,
                "cuda-core": fp32_peak * core_eff, "memory": float("inf")}[k.kind]
        t = max(k.flops / rate, k.bytes / (bw * bw_eff))
        r = rows.setdefault(k.name, [0.0, 0.0, 0.0, k.kind])
        r[0] += k.flops
        r[1] += k.bytes
        r[2] += t
    total = sum(r[2] for r in rows.values())
    model_flops = 6.0 * P + 12.0 * L * C * seq
    return rows, total, model_flops / total / peak, P


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", default="H200", choices=sorted(GPUS))
    ap.add_argument("--batch", type=int, default=16, help="sequences per optimizer step")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--shapes", default="124M,350M")
    ap.add_argument("--gemm-eff", type=float, default=GEMM_EFF,
                    help="fraction of the bf16 peak cuBLASLt reaches at these shapes")
    ap.add_argument("--attn-eff", type=float, default=ATTN_EFF,
                    help="fraction of the bf16 peak the WMMA flash attention reaches")
    ap.add_argument("--core-eff", type=float, default=CORE_EFF,
                    help="fraction of the fp32 CUDA-core peak the pre-issue-18 attention reached")
    ap.add_argument("--bw-eff", type=float, default=BW_EFF, help="fraction of HBM bandwidth")
    ap.add_argument("--detail", action="store_true", help="one row per kernel")
    a = ap.parse_args()
    peak, bw, _ = GPUS[a.gpu]
    print(f"Roofline of one training step on {a.gpu} (bf16 peak {peak / 1e12:.0f} TFLOP/s, HBM "
          f"{bw / 1e12:.2f} TB/s); batch {a.batch} x T {a.seq}; efficiencies: GEMM {a.gemm_eff}, "
          f"tensor-core attention {a.attn_eff}, fp32 attention {a.core_eff} (of the fp32 peak), "
          f"memory {a.bw_eff}\n")
    for shape in a.shapes.split(","):
        res = {d: estimate(shape, a.gpu, a.batch, a.seq, a.gemm_eff, a.attn_eff, a.bw_eff, d,
                           a.core_eff) for d in ("before", "issue18")}
        rows, total, mfu, P = res["issue18"]
        _, total_b, mfu_b, _ = res["before"]
        print(f"### GPT-2 {shape} ({P / 1e6:.1f} M parameters)\n")
        print("| kernel | bound | GFLOP/token | KB/token | FLOP/byte | share of step |")
        print("|---|---|---:|---:|---:|---:|")
        groups = {}
        for name, (f, b, t, kind) in rows.items():
            key = name if a.detail else (
                "GEMMs (cuBLASLt, incl. fused epilogues)" if kind == "gemm" else
                "attention" if "attention" in name and kind != "gemm" else
                "optimizer (AdamW, norm, zeroing)" if "AdamW" in name else
                "elementwise, norms, classifier, embedding")
            g = groups.setdefault(key, [0.0, 0.0, 0.0, kind])
            g[0] += f
            g[1] += b
            g[2] += t
        for name, (f, b, t, kind) in sorted(groups.items(), key=lambda kv: -kv[1][2]):
            bound = "compute" if f / b > peak / bw else "memory"
            print(f"| {name} | {bound} | {f / 1e9:.4f} | {b / 1e3:.1f} | {f / b:.0f} | "
                  f"{100 * t / total:.1f} % |")
        print(f"\nPredicted: {1 / total / 1e3:.0f} k tokens/s, **MFU {100 * mfu:.0f} %** with "
              f"issue 18's kernels; {1 / total_b / 1e3:.0f} k tokens/s, MFU {100 * mfu_b:.0f} % "
              f"with the kernels before it.\n")


if __name__ == "__main__":
    main()
