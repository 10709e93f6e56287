#!/usr/bin/python3
"""Parity with PyTorch: the same tiny model (gpt2 and llama) built in PyTorch with our initial
weights and batch must give the same logits, loss and parameter gradients (max relative error
<= 1e-4), and the same losses over 10 AdamW steps (<= 1e-4).

Usage: test_torch_parity.py PARITY_DUMP_EXE [gpt2|llama ...]
Exits 77 (ctest: skipped) with the reason printed when PyTorch is absent.
"""
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from torch_reference import gpt2_forward, llama_forward
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"SKIPPED: PyTorch/numpy not importable by {sys.executable}: {e}")
    sys.exit(77)

TOL = 1e-4
torch.set_num_threads(1)


def load_dump(exe, arch, tmp):
    subprocess.run([exe, arch, tmp], check=True)
    meta = json.load(open(os.path.join(tmp, "meta.json")))
    data = np.fromfile(os.path.join(tmp, "tensors.bin"), dtype=np.float32)

    def get(name):
        t = meta["tensors"][name]
        n = int(np.prod(t["shape"]))
        return torch.from_numpy(data[t["offset"]:t["offset"] + n].reshape(t["shape"]).copy())

    return meta, get


def rel_err(ours, ref):
    denom = ref.abs().max().item()
    return (ours - ref).abs().max().item() / (denom if denom > 0 else 1.0)


def check(arch, exe):
    with tempfile.TemporaryDirectory() as tmp:
        meta, get = load_dump(exe, arch, tmp)
        cfg = meta["config"]
        B, T, steps = cfg["B"], cfg["T"], cfg["steps"]
        names = meta["names"]
        params = {n: get("init/" + n).clone().requires_grad_(True) for n in names}
        tokens = torch.tensor(meta["tokens"], dtype=torch.int64).view(steps, B, T)
        targets = torch.tensor(meta["targets"], dtype=torch.int64).view(steps, B, T)
        fwd = gpt2_forward if arch == "gpt2" else llama_forward
        failures = []

        def expect(what, err, tol=TOL):
            status = "ok" if err <= tol else "FAIL"
            print(f"  {arch:5s} {what:55s} rel err {err:.2e} {status}")
            if err > tol:
                failures.append(what)

        logits = fwd(params, cfg, tokens[0])
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets[0].view(-1))
        loss.backward()
        expect("logits", rel_err(get("logits"), logits.detach().view(B * T, -1)))
        expect("loss", abs(meta["loss0"] - loss.item()) / abs(loss.item()))
        for n in names:
            expect("grad " + n, rel_err(get("grad/" + n), params[n].grad))

        # 10 AdamW steps: decay on matrices/embeddings only, global-norm clipping.
        params = {n: get("init/" + n).clone().requires_grad_(True) for n in names}
        decay = [params[n] for n in names if params[n].dim() >= 2]
        no_decay = [params[n] for n in names if params[n].dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["weight_decay"]},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
        losses = []
        for s in range(steps):
            opt.zero_grad()
            logits = fwd(params, cfg, tokens[s])
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets[s].view(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(list(params.values()), cfg["grad_clip"])
            opt.step()
            losses.append(loss.item())
        worst = max(abs(a - b) / abs(b) for a, b in zip(meta["losses"], losses))
        expect(f"losses of {steps} AdamW steps", worst)
        # Adam's update m/sqrt(v) turns last-bit gradient differences of near-zero gradient
        # elements into lr-sized steps, so weights after training are compared at 1e-3.
        final, worst_name = max((rel_err(get("final/" + n), params[n].detach()), n) for n in names)
        expect(f"parameters after {steps} AdamW steps (worst: {worst_name})", final, tol=1e-3)
        return failures


def main():
    exe = sys.argv[1]
    archs = sys.argv[2:] or ["gpt2", "llama"]
    print(f"PyTorch {torch.__version__}, tolerance {TOL} (max |ours - torch| / max |torch|)")
    failures = []
    for arch in archs:
        failures += [f"{arch}: {f}" for f in check(arch, exe)]
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print(f"{len(archs)} passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
