#!/usr/bin/env python3
"""Training on instruction data against transformers (issue 32, acceptance 2).

A tiny LLaMA made by transformers is fine-tuned by Saturn for a few reproducible steps on token
data with a loss mask beside it (runs of trained and untrained targets of irregular lengths, as
prompts and answers give), and by PyTorch with the same batch, AdamW, clipping and schedule,
with labels = -100 where the mask is 0 (transformers' convention; the loss is the mean over the
other targets). The data holds exactly one global batch of windows, so every step sees the same
windows and Saturn's shuffled order does not matter. Saturn's step losses and step-0 validation
loss must equal PyTorch's within 1e-6, and the gradient norms within 1e-6, on one device and under ddp x2 (micro-batches of 1 and 4
rows), fsdp x2 and pipeline x2: the loss is the mean over the global batch's trained targets
whatever the split of the batch.

Usage: test_masked_loss.py --saturn SATURN --venv VENV.
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
args = ARGS.parse_args()
venv_peers.require(args.venv, ["safetensors", "transformers"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(1)
MPI = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
VOCAB, T, B = 128, 16, 8
STEPS, LR, WD, CLIP, WARMUP = 6, 3e-3, 0.1, 0.5, 2
failures = []


def expect(what, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def make_model():
    torch.manual_seed(6)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, initializer_range=0.1, rope_theta=50000.0)
    return transformers.LlamaForCausalLM(cfg).eval()


def mask_runs(n, rng):
    m = np.zeros(n, dtype=np.uint8)
    i, on = 0, 0
    while i < n:
        run = int(rng.integers(1, 9 if on else 7))
        m[i:i + run] = on
        i += run
        on = 1 - on
    return m


def workload(path, src, data, micro):
    with open(path, "w") as f:
        f.write(f"""name: masked
data: {{train: {data}, val: {data}}}
defaults:
  seq_len: {T}
  steps: {STEPS}
  eval_every: {STEPS}
  eval_batches: {B // micro}
  reproducible: true
  micro_batch_size: {micro}
  optimizer: {{lr: {LR}, weight_decay: {WD}, grad_clip: {CLIP}}}
  schedule: {{warmup: {WARMUP}, decay: hf_cosine}}
models:
  m: {{from: {src}}}
jobs:
  - {{name: j, model: m, batch_size: {B}}}
""")


def saturn_train(wl, rd, strategy, np_):
    cmd = [args.saturn, "train", wl, "--device", "cpu", "--quiet", "--run-dir", rd]
    if np_ > 1:
        cmd = MPI[:-1] + [str(np_)] + cmd + ["--strategy", strategy]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"  {' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-2000:]}")
        return None
    with open(os.path.join(rd, "jobs", "j", "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def torch_reference(model, x, y):
    """The validation loss before and after training, the step losses and the gradient norms
    (before clipping), with labels -100 where a target is not trained. The norms check the
    gradient's scale, which AdamW's steps alone would not show (they are invariant to it)."""
    def loss_of():
        logits = model(input_ids=x, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100)

    return train_like_saturn(model, loss_of, STEPS, LR, WD, CLIP,
                             lambda opt: transformers.get_cosine_schedule_with_warmup(
                                 opt, WARMUP, STEPS))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "llama-hf")
        make_model().save_pretrained(src, safe_serialization=True)
        rng = np.random.default_rng(21)
        tokens = rng.integers(0, VOCAB, size=B * T + 1)
        mask = mask_runs(len(tokens), rng)
        data = os.path.join(tmp, "data.bin")
        write_tokens(data, tokens)
        with open(os.path.join(tmp, "data.mask"), "wb") as f:
            f.write(mask.tobytes())
        windows = np.stack([tokens[w * T:w * T + T + 1] for w in range(B)])
        wmask = np.stack([mask[w * T + 1:w * T + T + 1] for w in range(B)])
        x = torch.tensor(windows[:, :-1], dtype=torch.int64)
        y = torch.tensor(np.where(wmask == 1, windows[:, 1:], -100), dtype=torch.int64)
        trained = int(wmask.sum())
        print(f"{trained} of {B * T} targets trained")
        val0, ref, ref_norms, val_final = torch_reference(make_model(), x, y)
        unmasked = F.cross_entropy(make_model()(input_ids=x).logits.reshape(-1, VOCAB),
                                   torch.tensor(windows[:, 1:]).reshape(-1))
        expect("the mask matters: the masked loss differs from the loss over every target",
               abs(float(unmasked) - val0) > 1e-3, f"{val0:.6f} vs {float(unmasked):.6f}")
        # Reproducible jobs run their canonical micro-batches (micro_batch_size) everywhere;
        # an evaluation batch has micro_batch_size rows, so B / micro of them cover the data.
        wl = {}
        for micro in (1, 4):
            wl[micro] = os.path.join(tmp, f"w{micro}.yaml")
            workload(wl[micro], src, data, micro)
        runs = [("one device", "single", 1, 1),
                ("ddp x2, micro-batches of 1", "ddp", 2, 1),
                ("ddp x2, micro-batches of 4", "ddp", 2, 4),
                ("fsdp x2", "fsdp", 2, 1),
                ("pipeline x2", "pipeline", 2, 1)]
        for label, strategy, np_, micro in runs:
            rd = os.path.join(tmp, label.replace(" ", "_").replace(",", ""))
            rows = saturn_train(wl[micro], rd, strategy, np_)
            if rows is None:
                expect(f"{label}: saturn train", False)
                continue
            steps = {r["step"]: r for r in rows}
            ours = [steps[k]["loss"] for k in range(1, STEPS + 1)]
            err = max(abs(a - b) / abs(b) for a, b in zip(ours, ref))
            expect(f"{label}: {STEPS} step losses = PyTorch's with labels -100 (worst rel err "
                   f"{err:.1e}; {ref[0]:.5f} -> {ref[-1]:.5f})", err <= 1e-6)
            norms = [steps[k]["grad_norm"] for k in range(1, STEPS + 1)]
            err = max(abs(a - b) / abs(b) for a, b in zip(norms, ref_norms))
            expect(f"{label}: gradient norms = PyTorch's (worst rel err {err:.1e}; step 1: "
                   f"{norms[0]:.6f} vs {ref_norms[0]:.6f})", err <= 1e-6)
            v0 = [r["val_loss"] for r in rows if r.get("step") == 0 and "val_loss" in r]
            if v0:
                expect(f"{label}: step-0 val loss = PyTorch's ({v0[0]:.7f} vs {val0:.7f})",
                       abs(v0[0] - val0) / val0 <= 1e-6)
            vn = steps[STEPS].get("val_loss")
            expect(f"{label}: final val loss = PyTorch's "
                   f"({vn if vn is None else round(vn, 7)} vs {val_final:.7f})",
                   vn is not None and abs(vn - val_final) / val_final <= 1e-6)
        # A validation split whose evaluated windows hold no trained target: no val loss can be
        # measured, so the job is refused before it trains (not reported as a loss of 0).
        blank = os.path.join(tmp, "blank.bin")
        write_tokens(blank, tokens)
        with open(os.path.join(tmp, "blank.mask"), "wb") as f:
            f.write(bytes(len(tokens)))
        wl_blank = os.path.join(tmp, "blank.yaml")
        workload(wl_blank, src, data, 1)
        with open(wl_blank) as f:
            text = f.read().replace(f"val: {data}", f"val: {blank}")
        with open(wl_blank, "w") as f:
            f.write(text)
        p = subprocess.run([args.saturn, "train", wl_blank, "--device", "cpu", "--quiet",
                            "--run-dir", os.path.join(tmp, "blank-run")],
                           capture_output=True, text=True)
        expect("a val split with no trained target where it is evaluated: exit 2 saying so",
               p.returncode == 2 and "hold no trained token" in p.stderr,
               f"exit {p.returncode}: {p.stderr.strip()[-300:]}")
    if failures:
        print(f"{len(failures)} check(s) failed: {failures}")
        sys.exit(1)
    print("all checks passed")


main()
