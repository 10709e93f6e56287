#!/usr/bin/env python3
"""examples/finetune.yaml end to end, as its header says to run it (issue 19, acceptance 4).

In a scratch copy of the example: examples/make_hf_model.py makes the tokenizer and the four
briefly pre-trained models with transformers; `saturn data prepare --tokenizer` tokenizes the
licence texts with that tokenizer; `saturn run finetune.yaml --np 4` trains the 8-job sweep.
Then, for every job:
  - the first evaluated val loss (step 0) equals transformers' loss of the imported model on the
    same validation windows (relative 1e-5), and is far below a random model's (ln V);
  - the exported jobs/<id>/hf loads with from_pretrained without warnings, carries the
    tokenizer and the special-token ids of the model it came from, and its loss on those windows
    equals the job's final val loss (relative 1e-4).

Also examples/lora-sweep.yaml (issue 31) and examples/instruct-sweep.yaml (issue 32) on the same
models (check_lora_sweep, check_instruct_sweep).
Usage: test_example_finetune.py --saturn SATURN --venv VENV --source-dir REPO
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile

import venv_peers

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--venv", required=True)
ARGS.add_argument("--source-dir", required=True)
args = ARGS.parse_args()


venv_peers.require(args.venv, ["tokenizers", "transformers", "peft"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(1)
FAILURES = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run(argv, **kw):
    print("$ " + " ".join(argv), flush=True)
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        print(p.stdout[-3000:] + p.stderr[-3000:])
        print(f"FAILED: exit {p.returncode}")
        sys.exit(1)
    return p


def read_llmc(path):
    with open(path, "rb") as f:
        header = np.frombuffer(f.read(1024), dtype="<i4")
        return np.frombuffer(f.read(), dtype="<u2")[: header[2]].astype(np.int64)


def hf_loss(model, windows):
    with torch.no_grad():
        x = torch.tensor(windows)
        return model(input_ids=x, labels=x).loss.item()


def main():
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(args.source_dir, "examples", "finetune.yaml"), tmp)
        run([sys.executable, os.path.join(args.source_dir, "examples", "make_hf_model.py"),
             "--out", os.path.join(tmp, "models")])
        licences = sorted(os.path.join("/usr/share/common-licenses", f)
                          for f in os.listdir("/usr/share/common-licenses")
                          if os.path.isfile(os.path.join("/usr/share/common-licenses", f)))
        env = dict(os.environ, SATURN_PYTHON=sys.executable)
        run([args.saturn, "data", "prepare", "--tokenizer", os.path.join(tmp, "models", "tiny-gpt2"),
             "--input", *licences, "--output", os.path.join(tmp, "data-tiny")], env=env)
        run_dir = os.path.join(tmp, "run")
        run([args.saturn, "run", os.path.join(tmp, "finetune.yaml"), "--np", "4", "--run-dir",
             run_dir, "--quiet"])

        with open(os.path.join(run_dir, "summary.json")) as f:
            summary = json.load(f)
        jobs = summary["jobs"]
        check(len(jobs) == 8 and all(j["status"] == "finished" for j in jobs),
              f"8 jobs finished ({[(j['id'], j['status']) for j in jobs]})")
        # Validation rows: eval_batches (4) micro-batches of the largest divisor of batch_size
        # that is at most 8 (8 for batch sizes 8 and 16), windows of seq_len + 1 at stride
        # seq_len from the start of val.bin (runtime/data/loader.hpp).
        T, rows = 64, 4 * 8
        val = read_llmc(os.path.join(tmp, "data-tiny", "val.bin"))
        windows = np.stack([val[w * T:w * T + T + 1] for w in range(rows)])
        models, losses = {}, {}
        for name in ("tiny-gpt2", "tiny-llama", "tiny-mistral", "tiny-qwen2"):
            models[name] = transformers.AutoModelForCausalLM.from_pretrained(
                os.path.join(tmp, "models", name))
            losses[name] = hf_loss(models[name], windows)
        vocab = models["tiny-gpt2"].config.vocab_size
        src_cfg = json.load(open(os.path.join(tmp, "models", "tiny-gpt2", "config.json")))
        for job in jobs:
            jid, name = job["id"], job["model"]
            with open(os.path.join(run_dir, "jobs", jid, "metrics.jsonl")) as f:
                recs = [json.loads(line) for line in f]
            v0 = next((r["val_loss"] for r in recs if r["step"] == 0 and "val_loss" in r), None)
            ref = losses[name]
            err = abs(v0 - ref) / ref if v0 is not None else float("inf")
            check(err <= 1e-5, f"{jid}: step-0 val loss {v0} = the imported model's {ref:.7f} "
                               f"(rel {err:.1e})")
            check(v0 is not None and v0 < math.log(vocab) - 0.5,
                  f"{jid}: it starts pre-trained ({v0} vs a random model's ln {vocab} = "
                  f"{math.log(vocab):.3f})")
            hf_dir = os.path.join(run_dir, "jobs", jid, "hf")
            with warnings_captured() as caught:
                exported = transformers.AutoModelForCausalLM.from_pretrained(hf_dir)
                tok = transformers.AutoTokenizer.from_pretrained(hf_dir)
            check(not caught, f"{jid}: export loads without warnings ({caught[:2]})")
            cfg = json.load(open(os.path.join(hf_dir, "config.json")))
            check(cfg.get("eos_token_id") == src_cfg["eos_token_id"] and
                  tok.eos_token_id == src_cfg["eos_token_id"],
                  f"{jid}: export carries eos_token_id {src_cfg['eos_token_id']} and the tokenizer")
            final = job["final_val_loss"]
            got = hf_loss(exported, windows)
            err = abs(got - final) / final
            check(err <= 1e-4, f"{jid}: exported model's loss {got:.6f} = final val loss "
                               f"{final:.6f} (rel {err:.1e})")
        check_lora_sweep(tmp, val, models["tiny-llama"])
        check_instruct_sweep(tmp, models["tiny-llama"])
    if FAILURES:
        print(f"FAILED: {len(FAILURES)} check(s)")
        return 1
    print("the fine-tuning example works end to end")
    return 0


def check_instruct_sweep(tmp, base):
    """examples/instruct-sweep.yaml on 4 ranks (issue 32): the records made by
    make_instruct_data.py, tokenized with tiny-llama's chat template; every job finishes, its
    step-0 val loss equals transformers' loss of the imported model with labels -100 where the
    loss mask is 0 (relative 1e-5) — with packing.cross_attention false, each record piece of a
    window run alone and targets that start the next record left out too — and its val loss
    falls."""
    shutil.copy(os.path.join(args.source_dir, "examples", "instruct-sweep.yaml"), tmp)
    records = os.path.join(tmp, "data-instruct", "records.jsonl")
    run([sys.executable, os.path.join(args.source_dir, "examples", "make_instruct_data.py"),
         "--out", records])
    env = dict(os.environ, SATURN_PYTHON=sys.executable)
    run([args.saturn, "data", "prepare", "--format", "jsonl", "--tokenizer",
         os.path.join(tmp, "models", "tiny-llama"), "--input", records, "--output",
         os.path.join(tmp, "data-instruct")], env=env)
    run_dir = os.path.join(tmp, "run-instruct")
    run([args.saturn, "run", os.path.join(tmp, "instruct-sweep.yaml"), "--np", "4", "--run-dir",
         run_dir, "--quiet"])
    with open(os.path.join(run_dir, "summary.json")) as f:
        jobs = json.load(f)["jobs"]
    check(len(jobs) == 4 and all(j["status"] == "finished" for j in jobs),
          f"instruct-sweep: 4 jobs finished ({[(j['id'], j['status']) for j in jobs]})")
    # Validation: eval_batches (4) micro-batches of 8 rows, windows of seq_len + 1 from the
    # start of val.bin; a target counts where the loss mask beside it is 1.
    T, rows = 64, 4 * 8
    data = os.path.join(tmp, "data-instruct")
    val = read_llmc(os.path.join(data, "val.bin"))
    with open(os.path.join(data, "val.mask"), "rb") as f:
        mask = np.frombuffer(f.read(), dtype=np.uint8)
    with open(os.path.join(data, "val.records"), "rb") as f:
        starts = np.frombuffer(f.read(), dtype="<u8").astype(np.int64)
    check(len(mask) == len(val) and 0 < mask.sum() < len(mask),
          f"instruct-sweep: a loss mask beside val.bin ({int(mask.sum())} of {len(mask)} trained)")
    x = np.stack([val[w * T:w * T + T + 1] for w in range(rows)])
    m = np.stack([mask[w * T:w * T + T + 1] for w in range(rows)])
    labels = np.where(m == 1, x, -100)
    with torch.no_grad():
        ref = {"xattn1": base(input_ids=torch.tensor(x), labels=torch.tensor(labels)).loss.item()}
        # Packed records alone: a window's pieces between record starts, each a sequence of its
        # own; a target that is a record's first token is not trained.
        total, trained = 0.0, 0
        for w in range(rows):
            y = labels[w, 1:].copy()
            y[np.isin(np.arange(w * T + 1, w * T + T + 1), starts)] = -100
            cut = [0] + [int(s) - w * T for s in starts if w * T < s < w * T + T] + [T]
            for a, b in zip(cut[:-1], cut[1:]):
                logits = base(input_ids=torch.tensor(x[w:w + 1, a:b])).logits[0]
                total += float(torch.nn.functional.cross_entropy(
                    logits, torch.tensor(y[a:b]), ignore_index=-100, reduction="sum"))
            trained += int((y != -100).sum())
        ref["xattn0"] = total / trained
    check(abs(ref["xattn0"] - ref["xattn1"]) > 1e-4,
          f"instruct-sweep: packing changes the loss ({ref['xattn0']:.5f} alone vs "
          f"{ref['xattn1']:.5f} seeing each other)")
    for job in jobs:
        with open(os.path.join(run_dir, "jobs", job["id"], "metrics.jsonl")) as f:
            vals = [(r["step"], r["val_loss"]) for r in map(json.loads, f) if "val_loss" in r]
        v0 = next((v for s, v in vals if s == 0), None)
        want = ref["xattn0" if "xattn0" in job["id"] else "xattn1"]
        err = abs(v0 - want) / want if v0 is not None else float("inf")
        check(err <= 1e-5, f"instruct-sweep {job['id']}: step-0 val loss {v0} = transformers' "
                           f"with labels -100 off the answers, {want:.7f} (rel {err:.1e})")
        check(len(vals) >= 2 and vals[-1][1] < vals[0][1],
              f"instruct-sweep {job['id']}: val loss falls ({vals[0][1]:.4f} -> "
              f"{vals[-1][1]:.4f})")


def check_lora_sweep(tmp, val, base):
    """examples/lora-sweep.yaml on 4 ranks (issue 31): 8 LoRA jobs and a full fine-tune of the
    same base all finish, the LoRA jobs on fewer devices than the full one, and each LoRA job's
    PEFT export gives its final val loss on the base."""
    import peft
    shutil.copy(os.path.join(args.source_dir, "examples", "lora-sweep.yaml"), tmp)
    # Its validation windows: 4 micro-batches of 8 rows (batch size 8) at its seq_len.
    T = int(re.search(r"^  seq_len: (\d+)$", open(os.path.join(tmp, "lora-sweep.yaml")).read(),
                      re.M).group(1))
    windows = np.stack([val[w * T:w * T + T + 1] for w in range(4 * 8)])
    run_dir = os.path.join(tmp, "run-lora")
    run([args.saturn, "run", os.path.join(tmp, "lora-sweep.yaml"), "--np", "4", "--run-dir",
         run_dir, "--quiet"])
    with open(os.path.join(run_dir, "summary.json")) as f:
        jobs = json.load(f)["jobs"]
    check(len(jobs) == 9 and all(j["status"] == "finished" for j in jobs),
          f"lora-sweep: 9 jobs finished ({[(j['id'], j['status']) for j in jobs]})")
    devices = {j["id"]: max(s["devices"] for s in j["segments"]) for j in jobs}
    strategies = {j["id"]: sorted({s["strategy"] for s in j["segments"]}) for j in jobs}
    full = devices.get("tiny-llama-full", 0)
    lora = [d for jid, d in devices.items() if jid != "tiny-llama-full"]
    print(f"  lora-sweep placement: {[(jid, strategies[jid], devices[jid]) for jid in devices]}")
    # The example's 7 MiB devices hold a LoRA job (5.3-6.0 MiB) but not the full fine-tune
    # (9.0 MiB with recomputation): the plan gives it several, and the LoRA jobs fewer (on one
    # device each a LoRA job needs the least device time: its batch of 8 scales poorly). The
    # plan's choice, plan-000: a re-plan may later move the last job left onto idle devices.
    check(full >= 2, f"lora-sweep: the full fine-tune on {full} devices (it fits none alone)")
    # Every strategy the sweep lists trains adapters (test_lora_peft checks each against PEFT): a
    # LoRA job runs one of them, whichever a re-plan moves it to, and never anything else.
    listed = re.search(r"^strategies: \[(.*?)\]", open(os.path.join(tmp, "lora-sweep.yaml")).read(),
                       re.M).group(1).replace(" ", "").split(",")
    check(all(s in listed for jid, ss in strategies.items() if jid != "tiny-llama-full"
              for s in ss),
          f"lora-sweep: every LoRA job on a strategy the sweep lists ({listed})")
    with open(os.path.join(run_dir, "plans", "plan-000.json")) as f:
        planned = {j["id"]: j["devices"] for j in json.load(f)["jobs"]}
    planned_lora = [d for jid, d in planned.items() if jid != "tiny-llama-full"]
    check(len(planned_lora) == 8 and max(planned_lora) < planned.get("tiny-llama-full", 0),
          f"lora-sweep: the plan puts the LoRA jobs on {sorted(set(planned_lora))} devices, "
          f"fewer than the full fine-tune's {planned.get('tiny-llama-full')}")
    for job in jobs:
        jid = job["id"]
        if jid == "tiny-llama-full":
            continue
        with warnings_captured() as caught:
            loaded = peft.PeftModel.from_pretrained(base, os.path.join(run_dir, "jobs", jid,
                                                                       "peft")).eval()
        check(not caught, f"{jid}: its PEFT export loads without warnings ({caught[:2]})")
        got = hf_loss(loaded, windows)
        final = job["final_val_loss"]
        check(abs(got - final) <= 1e-4 * final,
              f"{jid}: the PEFT export's loss {got:.6f} = final val loss {final:.6f}")
        base = loaded.unload()  # the base back without this job's adapters


class warnings_captured:
    """Collects Python warnings and transformers' logged warnings while active."""

    def __enter__(self):
        import logging
        import warnings
        self._w = warnings.catch_warnings(record=True)
        self.records = self._w.__enter__()
        warnings.simplefilter("always")
        self.handler = logging.Handler(level=logging.WARNING)
        self.logged = []
        self.handler.emit = lambda r: self.logged.append(r.getMessage())
        self.logger = transformers.utils.logging.get_logger("transformers")
        self.logger.addHandler(self.handler)
        self.out = []
        return self.out

    def __exit__(self, *exc):
        self.logger.removeHandler(self.handler)
        self._w.__exit__(*exc)
        self.out.extend(str(w.message) for w in self.records)
        self.out.extend(self.logged)
        return False


if __name__ == "__main__":
    sys.exit(main())
