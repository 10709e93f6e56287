"""LoRA against PEFT (issue 31): tiny GPT-2 and LLaMA (grouped-query attention) models made by
transformers, fine-tuned by Saturn with `lora:` and by peft 0.12 on the same steps.

  - trajectory: 20 reproducible steps (Saturn's batch order, AdamW, clipping, transformers'
    cosine schedule) equal PEFT's training within 1e-6 in loss at every step, on one device and
    under ddp, fsdp, pipeline, zero2 and offload x2 (bit-identical adapters to one device's);
    tensor x2 (which reproducible mode does not run) too, its adapters compared as one device's. The adapters are
    compared with PEFT's training in float64, the same steps without rounding (EXACT says why):
    within 1e-5 relative (norm-wise), and no element farther from it than 4x PEFT's own float32
    training's farthest. Targets q,v (GPT-2: its fused c_attn) at rank 4, and every
    linear at rank 16 with rsLoRA. The first step's learning rate is 0 (transformers' warmup),
    so the step-1 checkpoint holds Saturn's initial adapters, which PEFT starts from.
  - the base is the import, bit for bit, after training: Saturn refuses to save otherwise, and
    the merged export checks the base's checksum.
  - export: `saturn ckpt export --format peft` loads with PeftModel.from_pretrained with no
    missing or unexpected keys and no warnings, and gives Saturn's final val loss within 1e-6;
    `--format hf --merge` equals PEFT's merge_and_unload() within 1e-6.
  - resume: ddp x2 stopped at step 10, resumed on one rank, ends bit-identical to one run;
    `saturn run --np 2` pre-empted by SIGUSR1 exits 99 and `--resume --np 1` ends bit-identical
    to an uninterrupted run; a resume against a changed base is exit 2 naming the base.

Usage: test_lora_peft.py --saturn SATURN --venv VENV [--only gpt2,llama]
"""
import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

import venv_peers
from token_files import write_tokens

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--venv", required=True)
ARGS.add_argument("--only", default="gpt2,llama")
args = ARGS.parse_args()

venv_peers.require(args.venv, ["safetensors", "transformers", "peft"])

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import peft  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(1)
transformers.utils.logging.disable_progress_bar()
MPI = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", "2"]
VOCAB, T, B = 128, 16, 4
STEPS, LR, WD, CLIP, WARMUP = 20, 3e-3, 0.1, 0.5, 3
SIGNAL_STEPS = 1500
failures = []


def expect(what, ok, detail=""):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}{': ' + detail if detail else ''}", flush=True)
    if not ok:
        failures.append(what)


def run(cmd, expect_rc=0):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if expect_rc is not None and p.returncode != expect_rc:
        print(f"  command {' '.join(cmd)} exited {p.returncode} (expected {expect_rc})\n"
              f"  stdout: {p.stdout[-2000:]}\n  stderr: {p.stderr[-2000:]}")
    return p


def make_model(arch):
    torch.manual_seed(5 if arch == "gpt2" else 6)
    if arch == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2,
                                      n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                      initializer_range=0.1)
        model = transformers.GPT2LMHeadModel(cfg)
    else:
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                                       num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, max_position_embeddings=64,
                                       rms_norm_eps=1e-5, initializer_range=0.1,
                                       rope_theta=50000.0)
        model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model.eval()


# EXACT: why the adapters are compared with PEFT's float64 training. Adam divides each gradient
# element by its own running magnitude, so an element whose gradient nearly cancels turns fp32
# rounding (any summation order) into a visible part of a step. PEFT's own float32 training is
# 3e-5 to 2e-4 of a tensor's largest element away from its float64 training, element-wise
# (1e-6 to 2e-6 norm-wise), while its losses agree within 1e-7: an element-wise 1e-5 between two
# float32 trainings measures their summation orders, not their arithmetic. So against the
# float64 trajectory, Saturn's adapters must be within ADAPTER_NORM_TOL norm-wise (all adapters
# as one vector), and no element farther from it than ADAPTER_VS_PEFT times PEFT float32's
# farthest: the same sensitive elements move (one device: 0.15-1.3x PEFT's error; tensor x2,
# whose reductions add roundings of their own: up to 2x).
ADAPTER_NORM_TOL = 1e-5
ADAPTER_VS_PEFT = 4.0

# (name, workload targets, PEFT target_modules per arch, rank, alpha, rslora)
CONFIGS = [
    ("qv-r4", {"gpt2": "[qkv]", "llama": "[q, v]"},
     {"gpt2": ["attn.c_attn"], "llama": ["self_attn.q_proj", "self_attn.v_proj"]}, 4, 8, False),
    ("all-r16", {"gpt2": "[all-linear]", "llama": "[all-linear]"},
     {"gpt2": ["attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"],
      "llama": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]}, 16, 32, True),
]


def workload(path, src, data, targets, rank, alpha, rslora, reproducible=True, export="",
             steps=STEPS, checkpoint_every=1):
    with open(path, "w") as f:
        f.write(f"""name: lora-peft
{'export: ' + export if export else ''}
data: {{train: {data}, val: {data}}}
defaults:
  seq_len: {T}
  steps: {steps}
  eval_batches: 1
  checkpoint_every: {checkpoint_every}
  reproducible: {'true' if reproducible else 'false'}
  optimizer: {{lr: {LR}, weight_decay: {WD}, grad_clip: {CLIP}}}
  schedule: {{warmup: {WARMUP}, decay: hf_cosine}}
models:
  m: {{from: {src}}}
jobs:
  - {{name: j, model: m, batch_size: {B}, lora: {{rank: {rank}, alpha: {alpha}, targets: {targets}, use_rslora: {'true' if rslora else 'false'}}}}}
""")


def saturn_train(wl, rd, strategy="single", np_=1, extra=()):
    cmd = [args.saturn, "train", wl, "--device", "cpu", "--quiet", "--run-dir", rd,
           "--keep-checkpoints", "100", *extra]
    if np_ > 1:
        cmd = MPI[:-1] + [str(np_)] + cmd + ["--strategy", strategy]
    return run(cmd)


def metrics(rd):
    with open(os.path.join(rd, "jobs", "j", "metrics.jsonl")) as f:
        return {r["step"]: r for r in map(json.loads, f)}


def adapters(h5file):
    with h5py.File(h5file, "r") as f:
        return {k: np.array(v) for k, v in f["model"].items()}


def peft_model(src, modules, rank, alpha, rslora, arch, initial):
    base = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32).eval()
    cfg = peft.LoraConfig(r=rank, lora_alpha=alpha, target_modules=modules, lora_dropout=0.0,
                          fan_in_fan_out=arch == "gpt2", use_rslora=rslora, bias="none",
                          task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" not in name:
                continue
            ours = name.replace("base_model.model.", "").replace(".default", "")
            p.copy_(torch.from_numpy(initial[ours]))
    return model


def peft_train(model, x, y):
    params = [p for _, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW([{"params": params, "weight_decay": WD}], lr=LR, betas=(0.9, 0.95),
                            eps=1e-8)
    sched = transformers.get_cosine_schedule_with_warmup(opt, WARMUP, STEPS)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        sched.step()
        losses.append(float(loss))
    return losses


def peft_state(model):
    return {n.replace("base_model.model.", "").replace(".default", ""): p.detach().numpy()
            for n, p in model.named_parameters() if "lora_" in n}


def worst_rel(ours, ref):
    """The largest element-wise error of any tensor, relative to that tensor's largest element."""
    worst = 0.0
    for k, r in ref.items():
        denom = float(np.abs(r).max()) or 1.0
        e = float(np.abs(ours[k].astype(np.float64) - r).max()) / denom
        if os.environ.get("SATURN_LORA_DEBUG") and e > 1e-5:
            i = np.unravel_index(np.argmax(np.abs(ours[k] - r)), r.shape)
            print(f"    {k}: rel {e:.1e}, max|ref| {denom:.3e}, at {i}: ours {ours[k][i]:.9e} "
                  f"ref {r[i]:.9e}; median |ref| {float(np.median(np.abs(r))):.3e}")
        worst = max(worst, e)
    return worst


def norm_rel(ours, ref):
    """The norm-wise relative error of all adapters as one vector: |ours - ref| / |ref|."""
    diff = sum(float(np.sum((ours[k].astype(np.float64) - r) ** 2)) for k, r in ref.items())
    return (diff / sum(float(np.sum(np.asarray(r, np.float64) ** 2)) for r in ref.values())) ** 0.5


def check_adapters(label, got, model32, exact):
    """Saturn's adapters against PEFT's float64 training (EXACT), beside PEFT's float32 one."""
    ref = {k: v.astype(np.float64) for k, v in peft_state(exact).items()}
    peft32 = peft_state(model32)
    if set(got) != set(ref):
        expect(f"{label}: adapter tensors named as PEFT's", False,
               f"ours {sorted(got)[:3]}... vs {sorted(ref)[:3]}...")
        return
    norm = norm_rel(got, ref)
    ours, theirs = worst_rel(got, ref), worst_rel(peft32, ref)
    expect(f"{label}: {len(ref)} adapter tensors = PEFT's float64 training within "
           f"{ADAPTER_NORM_TOL:.0e} norm-wise (rel err {norm:.1e}; PEFT float32's "
           f"{norm_rel(peft32, ref):.1e})", norm <= ADAPTER_NORM_TOL)
    expect(f"{label}: element-wise as close to it as PEFT's float32 training (worst rel err "
           f"{ours:.1e} vs PEFT's {theirs:.1e}; vs PEFT float32 directly {worst_rel(got, peft32):.1e})",
           ours <= ADAPTER_VS_PEFT * theirs)


def check_arch(arch, tmp):
    print(f"{arch}:", flush=True)
    src = os.path.join(tmp, f"{arch}-hf")
    make_model(arch).save_pretrained(src, safe_serialization=True)
    rng = np.random.default_rng(13)
    tokens = rng.integers(0, VOCAB, size=B * T + 1)
    data = os.path.join(tmp, f"{arch}.bin")
    write_tokens(data, tokens)
    windows = np.stack([tokens[w * T:w * T + T + 1] for w in range(B)])
    x = torch.tensor(windows[:, :-1], dtype=torch.int64)
    y = torch.tensor(windows[:, 1:], dtype=torch.int64)
    for name, targets, modules, rank, alpha, rslora in CONFIGS:
        label = f"{arch} {name}"
        wl = os.path.join(tmp, f"{arch}-{name}.yaml")
        workload(wl, src, data, targets[arch], rank, alpha, rslora)
        rd = os.path.join(tmp, f"{arch}-{name}-single")
        if saturn_train(wl, rd).returncode != 0:
            expect(f"{label}: saturn train", False)
            continue
        ours = [metrics(rd)[k]["loss"] for k in range(1, STEPS + 1)]
        initial = adapters(os.path.join(rd, "jobs", "j", "checkpoints", "step-00000001.h5"))
        final = os.path.join(rd, "jobs", "j", "final.h5")
        model = peft_model(src, modules[arch], rank, alpha, rslora, arch, initial)
        ref = peft_train(model, x, y)
        errs = [abs(a - b) / abs(b) for a, b in zip(ours, ref)]
        k = max(range(STEPS), key=lambda i: errs[i])
        if os.environ.get("SATURN_LORA_DEBUG"):
            print("    per-step rel errs:", " ".join(f"{e:.1e}" for e in errs))
        expect(f"{label}: {STEPS} steps' losses = PEFT's (worst rel err {errs[k]:.1e} at step "
               f"{k + 1}; {ref[0]:.4f} -> {ref[-1]:.4f})", errs[k] <= 1e-6,
               f"ours {ours[k]:.8f} vs {ref[k]:.8f}")
        exact = peft_model(src, modules[arch], rank, alpha, rslora, arch, initial).double()
        exact_losses = peft_train(exact, x, y)
        e64 = max(abs(a - b) / abs(b) for a, b in zip(ours, exact_losses))
        expect(f"{label}: losses = PEFT's float64 training's (worst rel err {e64:.1e})",
               e64 <= 1e-6)
        check_adapters(label, adapters(final), model, exact)
        got = adapters(final)
        for strategy in ("ddp", "fsdp", "pipeline", "zero2", "offload", "tensor"):
            repro = strategy != "tensor"
            wl2 = wl if repro else wl.replace(".yaml", "-nonrepro.yaml")
            if not repro:
                workload(wl2, src, data, targets[arch], rank, alpha, rslora, reproducible=False)
            rd2 = os.path.join(tmp, f"{arch}-{name}-{strategy}")
            if saturn_train(wl2, rd2, strategy, 2).returncode != 0:
                expect(f"{label}: {strategy} x2", False)
                continue
            theirs = [metrics(rd2)[k]["loss"] for k in range(1, STEPS + 1)]
            e = max(abs(a - b) / abs(b) for a, b in zip(theirs, ref))
            expect(f"{label}: {strategy} x2{'' if repro else ' (not reproducible)'} losses = "
                   f"PEFT's (worst rel err {e:.1e})", e <= 1e-6)
            if not repro:
                check_adapters(f"{label}: {strategy} x2",
                               adapters(os.path.join(rd2, "jobs", "j", "final.h5")), model, exact)
            else:
                same = all(np.array_equal(a, b) for a, b in
                           zip(adapters(os.path.join(rd2, "jobs", "j", "final.h5")).values(),
                               got.values()))
                expect(f"{label}: {strategy} x2 adapters bit-identical to one device's", same)
        if name == CONFIGS[0][0]:
            check_exports(arch, src, final, model, x, y, metrics(rd)[STEPS]["val_loss"], tmp)
            check_resume(arch, wl, src, got, tmp)
            check_signal(arch, src, data, targets[arch], rank, alpha, rslora, tmp)


def check_exports(arch, src, final, trained, x, y, val_loss, tmp):
    exp = os.path.join(tmp, f"{arch}-peft")
    p = run([args.saturn, "ckpt", "export", final, "--format", "peft", "-o", exp])
    if p.returncode != 0:
        expect(f"{arch}: export --format peft", False)
        return
    base = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = peft.PeftModel.from_pretrained(base, exp).eval()
    logging.getLogger().removeHandler(handler)
    noise = [str(w.message) for w in caught] + [r.getMessage() for r in records
                                                 if r.levelno >= logging.WARNING]
    expect(f"{arch}: PeftModel.from_pretrained(base, export) without warnings", not noise,
           "; ".join(noise)[:500])
    with torch.no_grad():
        logits = loaded(input_ids=x, use_cache=False).logits
        loss = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
    expect(f"{arch}: the loaded adapters' val loss = Saturn's final val loss (rel err "
           f"{abs(loss - val_loss) / abs(val_loss):.1e})",
           abs(loss - val_loss) <= 1e-6 * abs(val_loss), f"{loss:.8f} vs {val_loss:.8f}")
    cfg = json.load(open(os.path.join(exp, "adapter_config.json")))
    expect(f"{arch}: adapter_config.json names the base", cfg["base_model_name_or_path"] ==
           os.path.abspath(src), str(cfg["base_model_name_or_path"]))
    merged_dir = os.path.join(tmp, f"{arch}-merged")
    p = run([args.saturn, "ckpt", "export", final, "--format", "hf", "--merge", "-o", merged_dir])
    if p.returncode != 0:
        expect(f"{arch}: export --format hf --merge", False)
        return
    ours = transformers.AutoModelForCausalLM.from_pretrained(merged_dir,
                                                             torch_dtype=torch.float32)
    ref = loaded.merge_and_unload()
    theirs = ref.state_dict()
    worst = 0.0
    for k, v in ours.state_dict().items():
        r = theirs[k].detach().numpy()
        worst = max(worst, float(np.abs(v.detach().numpy() - r).max()) /
                    (float(np.abs(r).max()) or 1.0))
    expect(f"{arch}: the merged export = merge_and_unload() (worst rel err {worst:.1e})",
           worst <= 1e-6)
    p = run([args.saturn, "ckpt", "export", final, "--format", "hf", "-o",
             os.path.join(tmp, f"{arch}-unmerged")], expect_rc=2)
    expect(f"{arch}: --format hf without --merge is refused naming peft and --merge",
           p.returncode == 2 and "--format peft" in p.stderr and "--merge" in p.stderr,
           p.stderr[-300:])


def check_resume(arch, wl, src, straight, tmp):
    rd = os.path.join(tmp, f"{arch}-resume")
    p = saturn_train(wl, rd, "ddp", 2, ["--max-steps", "10"])
    ok = p.returncode == 0 and saturn_train(wl, rd, extra=["--resume"]).returncode == 0
    got = adapters(os.path.join(rd, "jobs", "j", "final.h5")) if ok else {}
    same = ok and all(np.array_equal(got[k], straight[k]) for k in straight)
    expect(f"{arch}: ddp x2 to step 10, resumed on one rank: adapters bit-identical", same)
    # The same checkpoints against a changed base: refused, naming it.
    changed = os.path.join(tmp, f"{arch}-hf-changed")
    shutil.copytree(src, changed)
    model = transformers.AutoModelForCausalLM.from_pretrained(changed, torch_dtype=torch.float32)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 0.5
    model.save_pretrained(changed, safe_serialization=True)
    wl2 = wl.replace(".yaml", "-changed.yaml")
    with open(wl) as f, open(wl2, "w") as g:
        g.write(f.read().replace(f"from: {src}", f"from: {changed}"))
    rd2 = os.path.join(tmp, f"{arch}-resume-changed")
    shutil.copytree(rd, rd2)
    for stale in ("final.h5",):
        os.remove(os.path.join(rd2, "jobs", "j", stale))
    p = run([args.saturn, "train", wl2, "--device", "cpu", "--quiet", "--run-dir", rd2,
             "--resume"], expect_rc=2)
    expect(f"{arch}: a resume on a changed base is exit 2 naming it",
           p.returncode == 2 and os.path.abspath(changed) in p.stderr, p.stderr[-400:])


def check_signal(arch, src, data, targets, rank, alpha, rslora, tmp):
    """`saturn run` of the LoRA job pre-empted by SIGUSR1 (as Slurm's --signal sends it): it
    checkpoints and exits 99; `saturn run --resume` on another rank count finishes it with
    adapters bit-identical to an uninterrupted run (reproducible mode)."""
    wl = os.path.join(tmp, f"{arch}-signal.yaml")
    # Long enough, and polled often enough, that the signal lands mid-run on a loaded machine
    # (400 steps once finished between two polls while other tests shared the cores).
    workload(wl, src, data, targets, rank, alpha, rslora, steps=SIGNAL_STEPS, checkpoint_every=0)
    env = dict(os.environ, SATURN_CALIBRATION_CACHE="none")
    straight = os.path.join(tmp, f"{arch}-signal-straight")
    p = subprocess.run([args.saturn, "run", wl, "--np", "1", "--run-dir", straight, "--quiet"],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        expect(f"{arch}: saturn run of the LoRA job", False, p.stderr[-300:])
        return
    rd = os.path.join(tmp, f"{arch}-signal-run")
    proc = subprocess.Popen([args.saturn, "run", wl, "--np", "2", "--run-dir", rd, "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    progress = os.path.join(rd, "jobs", "j", "metrics.jsonl")
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(progress) and sum(1 for _ in open(progress)) >= 10:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=300)
    done = [r for r in map(json.loads, open(progress))] if os.path.exists(progress) else []
    stopped_at = max((r["step"] for r in done), default=0)
    expect(f"{arch}: SIGUSR1 to saturn run: exit 99 at step {stopped_at} of {SIGNAL_STEPS}",
           proc.returncode == 99 and 0 < stopped_at < SIGNAL_STEPS,
           "" if proc.returncode == 99 else f"exit {proc.returncode}: {err[-300:]}")
    p = subprocess.run([args.saturn, "run", "--resume", rd, "--np", "1", "--quiet"],
                       capture_output=True, text=True, env=env)
    ok = p.returncode == 0
    a = adapters(os.path.join(straight, "jobs", "j", "final.h5")) if ok else {}
    b = adapters(os.path.join(rd, "jobs", "j", "final.h5")) if ok else {}
    expect(f"{arch}: --resume on one rank finishes with adapters bit-identical to one run",
           ok and a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a),
           "" if ok else p.stderr[-300:])


def main():
    with tempfile.TemporaryDirectory(prefix="saturn-lora-") as tmp:
        for arch in args.only.split(","):
            check_arch(arch, tmp)
    if failures:
        print(f"FAILED: {len(failures)} checks: {failures}")
        return 1
    print("all LoRA checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
