#!/usr/bin/env python3
"""Packing without cross-attention against transformers (issue 32, acceptance 3).

Records of irregular lengths follow one another in the token stream (some shorter than a window,
some longer, so windows start inside records and records start at a window's first token), with
their starts in the `.records` file beside the tokens. With `packing: {cross_attention: false}`
each record of a window is a sequence of its own: Saturn's losses must equal transformers run on
every record piece alone (a batch of one, positions from 0), the batch's loss being the sum of the
pieces' summed losses over the global batch's trained targets. A target that is the next
record's first token is not trained. Checked for a tiny GPT-2 (learned positions) and a tiny
LLaMA with grouped-query attention (rotary positions) and a loss mask: the step-0 and final
validation losses, every step's loss and gradient norm over a few reproducible AdamW steps,
within 1e-6, on one device and under ddp x2 (micro-batches of 1 and 4), fsdp x2 and pipeline x2.
With --saturn-emu, the whole program on the emulated CUDA backend (bf16 activations) too, on one
device: its step-0 validation loss must equal transformers' within 1e-3 and be ten times closer to
it than to the loss of records that see each other, its step losses within 5e-3.

Usage: test_packed_records.py --saturn SATURN --venv VENV [--saturn-emu SATURN_EMU].
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import venv_peers
from token_files import write_tokens
from torch_reference import train_like_saturn

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--venv", required=True)
ARGS.add_argument("--saturn-emu")
args = ARGS.parse_args()
venv_peers.require(args.venv, ["safetensors", "transformers"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(1)
MPI = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
VOCAB, T, B = 128, 16, 8
STEPS, LR, WD, CLIP, WARMUP = 4, 3e-3, 0.1, 0.5, 1
failures = []


def expect(what, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def make_model(arch):
    torch.manual_seed(7)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2,
                                      n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      initializer_range=0.1)
        return transformers.GPT2LMHeadModel(cfg).eval()
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, initializer_range=0.1, rope_theta=50000.0)
    return transformers.LlamaForCausalLM(cfg).eval()


def record_starts(n, rng):
    """Starts of records of 1 to 2.5 windows' length, and one starting at a window's start."""
    starts, i = [0], 0
    while True:
        i += int(rng.integers(1, 5 * T // 2))
        if i >= n:
            break
        starts.append(i)
    if 2 * T not in starts:
        starts = sorted(set(starts + [2 * T]))
    return np.array(starts, dtype=np.uint64)


def pieces(w, starts):
    """The record pieces of window w: [a, b) column ranges, each a sequence of its own."""
    cut = [0] + [int(s) - w * T for s in starts if w * T < int(s) < w * T + T] + [T]
    return list(zip(cut[:-1], cut[1:]))


def labels(tokens, mask, starts):
    """[B, T] targets: -100 where the target is the next record's first token or masked out."""
    begins = set(int(s) for s in starts)
    y = np.empty((B, T), dtype=np.int64)
    for w in range(B):
        for t in range(T):
            n = w * T + t + 1
            trained = n not in begins and (mask is None or mask[n] == 1)
            y[w, t] = tokens[n] if trained else -100
    return y


def workload(path, src, data, micro, packed):
    packing = "\n  packing: {cross_attention: false}" if packed else ""
    with open(path, "w") as f:
        f.write(f"""name: packed
data: {{train: {data}, val: {data}}}
defaults:
  seq_len: {T}
  steps: {STEPS}
  eval_every: {STEPS}
  eval_batches: {B // micro}
  reproducible: true
  micro_batch_size: {micro}{packing}
  optimizer: {{lr: {LR}, weight_decay: {WD}, grad_clip: {CLIP}}}
  schedule: {{warmup: {WARMUP}, decay: hf_cosine}}
models:
  m: {{from: {src}}}
jobs:
  - {{name: j, model: m, batch_size: {B}}}
""")


def saturn_train(wl, rd, strategy, np_, program=None, device="cpu"):
    cmd = [program or args.saturn, "train", wl, "--device", device, "--quiet", "--run-dir", rd]
    if np_ > 1:
        cmd = MPI[:-1] + [str(np_)] + cmd + ["--strategy", strategy]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
        return None
    with open(os.path.join(rd, "jobs", "j", "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def torch_reference(model, x, y, cuts):
    """Validation loss before and after training, step losses and gradient norms, every record
    piece of every window run alone (a batch of one: positions from 0, no other record)."""
    trained = int((y != -100).sum())

    def loss_of():
        total = 0.0
        for w, (a, b) in cuts:
            logits = model(input_ids=x[w:w + 1, a:b], use_cache=False).logits
            total = total + F.cross_entropy(logits.reshape(-1, VOCAB), y[w, a:b].reshape(-1),
                                            ignore_index=-100, reduction="sum")
        return total / trained

    return train_like_saturn(model, loss_of, STEPS, LR, WD, CLIP,
                             lambda opt: transformers.get_cosine_schedule_with_warmup(
                                 opt, WARMUP, STEPS))


def rel(a, b):
    return abs(a - b) / abs(b)


def check(arch, tmp, rng):
    print(f"{arch}:")
    src = os.path.join(tmp, f"{arch}-hf")
    make_model(arch).save_pretrained(src, safe_serialization=True)
    tokens = rng.integers(0, VOCAB, size=B * T + 1)
    starts = record_starts(len(tokens), rng)
    # LLaMA trains on instruction-style masked data, GPT-2 on every target.
    mask = None
    if arch == "llama":
        mask = (rng.random(len(tokens)) < 0.7).astype(np.uint8)
    data = os.path.join(tmp, f"{arch}.bin")
    write_tokens(data, tokens)
    with open(os.path.join(tmp, f"{arch}.records"), "wb") as f:
        f.write(starts.astype("<u8").tobytes())
    if mask is not None:
        with open(os.path.join(tmp, f"{arch}.mask"), "wb") as f:
            f.write(mask.tobytes())
    x = torch.tensor(np.stack([tokens[w * T:w * T + T] for w in range(B)]), dtype=torch.int64)
    y = torch.tensor(labels(tokens, mask, starts), dtype=torch.int64)
    cuts = [(w, c) for w in range(B) for c in pieces(w, starts)]
    print(f"  {len(starts)} records, {len(cuts)} pieces in {B} windows, "
          f"{int((y != -100).sum())} of {B * T} targets trained")
    val0, ref, ref_norms, val_final = torch_reference(make_model(arch), x, y, cuts)
    crossing = F.cross_entropy(make_model(arch)(input_ids=x).logits.reshape(-1, VOCAB),
                               y.reshape(-1), ignore_index=-100)
    expect("packing matters: records alone give another loss than records seeing each other",
           abs(float(crossing) - val0) > 1e-3, f"{val0:.6f} vs {float(crossing):.6f}")
    wl = {}
    for micro in (1, 4):
        wl[micro] = os.path.join(tmp, f"{arch}-w{micro}.yaml")
        workload(wl[micro], src, data, micro, True)
    runs = [("one device", "single", 1, 1),
            ("ddp x2, micro-batches of 1", "ddp", 2, 1),
            ("ddp x2, micro-batches of 4", "ddp", 2, 4),
            ("fsdp x2", "fsdp", 2, 1),
            ("pipeline x2", "pipeline", 2, 1)]
    for label, strategy, np_, micro in runs:
        rd = os.path.join(tmp, arch + "-" + label.replace(" ", "_").replace(",", ""))
        rows = saturn_train(wl[micro], rd, strategy, np_)
        if rows is None:
            expect(f"{label}: saturn train", False)
            continue
        steps = {r["step"]: r for r in rows}
        v0 = [r["val_loss"] for r in rows if r.get("step") == 0 and "val_loss" in r]
        expect(f"{label}: step-0 val loss = each record alone in transformers "
               f"({v0[0] if v0 else None} vs {val0:.7f})", bool(v0) and rel(v0[0], val0) <= 1e-6)
        ours = [steps[k]["loss"] for k in range(1, STEPS + 1)]
        err = max(rel(a, b) for a, b in zip(ours, ref))
        expect(f"{label}: {STEPS} step losses = transformers' (worst rel err {err:.1e}; "
               f"{ref[0]:.5f} -> {ref[-1]:.5f})", err <= 1e-6)
        norms = [steps[k]["grad_norm"] for k in range(1, STEPS + 1)]
        err = max(rel(a, b) for a, b in zip(norms, ref_norms))
        expect(f"{label}: gradient norms = transformers' (worst rel err {err:.1e})", err <= 1e-6)
        vn = steps[STEPS].get("val_loss")
        expect(f"{label}: final val loss = transformers' "
               f"({vn if vn is None else round(vn, 7)} vs {val_final:.7f})",
               vn is not None and rel(vn, val_final) <= 1e-6)
    if args.saturn_emu:
        rows = saturn_train(wl[1], os.path.join(tmp, f"{arch}-emulated-cuda"), "single", 1,
                            args.saturn_emu, "cuda")
        if rows is None:
            expect("emulated CUDA: saturn_emu train --device cuda", False)
        else:
            steps = {r["step"]: r for r in rows}
            v0 = [r["val_loss"] for r in rows if r.get("step") == 0 and "val_loss" in r]
            ours = [steps[k]["loss"] for k in range(1, STEPS + 1)]
            err = max(rel(a, b) for a, b in zip(ours, ref))
            # bf16 activations: 1e-3, and ten times closer to the records alone than to the
            # records seeing each other (which differ by 0.3-1 % here).
            expect(f"emulated CUDA: step-0 val loss = each record alone in transformers within "
                   f"1e-3 ({v0[0] if v0 else None} vs {val0:.5f}; records seeing each "
                   f"other: {float(crossing):.5f})",
                   bool(v0) and rel(v0[0], val0) <= 1e-3
                   and 10 * abs(v0[0] - val0) < abs(v0[0] - float(crossing)))
            expect(f"emulated CUDA: {STEPS} step losses = transformers' within 5e-3 (worst rel "
                   f"err {err:.1e})", err <= 5e-3)
    # Without the record starts beside the data the job is refused, naming the file.
    os.remove(os.path.join(tmp, f"{arch}.records"))
    p = subprocess.run([args.saturn, "train", wl[1], "--device", "cpu", "--quiet", "--run-dir",
                        os.path.join(tmp, f"{arch}-no-records")], capture_output=True, text=True)
    expect("no .records beside the data: exit 2 naming it",
           p.returncode == 2 and f"{arch}.records" in p.stderr,
           f"exit {p.returncode}: {p.stderr.strip()[-300:]}")


def main():
    rng = np.random.default_rng(32)
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("gpt2", "llama"):
            check(arch, tmp, rng)
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all checks passed")


main()
