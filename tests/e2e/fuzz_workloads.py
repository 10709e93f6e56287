#!/usr/bin/python3
"""Seeded fuzzing of workload files (issue 15): mutations of the example workloads go through
`saturn plan` (most of them) and `saturn run --np 2` (a few dozen, on tiny steps). Every outcome
must be exit 0, or exit 2 with a FILE:LINE:COL message naming the mutated file and with nothing
written; never exit 1, a crash, an internal error (bad_alloc, a JSON exception, an MPI abort) or
a hang. Deterministic for a seed; every failure prints the mutation, the command, the output and
the mutated file.

Usage: fuzz_workloads.py SATURN EXAMPLES_DIR [--seed N] [--plans N] [--runs N]
Run with Debian's /usr/bin/python3 (standard library only)."""
import argparse
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# Keys the workload format knows, for insertions and renames (docs/workload.md).
KEYS = ["name", "data", "train", "val", "defaults", "models", "jobs", "strategies", "cluster",
        "solver", "sweep", "model", "lr", "batch_size", "seed", "steps", "seq_len",
        "micro_batch_size", "weight_decay", "warmup", "eval_every", "eval_batches",
        "checkpoint_every", "reproducible", "optimizer", "schedule", "type", "betas", "eps",
        "grad_clip", "decay", "min_lr_ratio", "arch", "n_layer", "n_head", "d_model", "d_ff",
        "vocab_size", "norm_eps", "rope_theta", "backend", "time_limit", "introspection",
        "interval", "threshold"]

# Values for `saturn plan`: anything, including sizes that would take hours to train.
HUGE_INTS = ["1000", "65536", "65537", "1048576", "1048577", "1000000", "1000000000",
             "1000000001", "2147483647", "2147483648", "4294967296", "4611686018427387904",
             "9223372036854775807", "9223372036854775808", "99999999999999999999999"]
SMALL_INTS = ["0", "-1", "1", "2", "3", "4", "5", "7", "8", "16", "17", "32", "63", "64", "65"]
FLOATS = ["0.0", "-0.0", "1e-300", "1e300", "1e-3", "3e-4", "0.5", "0.999999", "1.0", "10",
          "10.5", "-3e-4", ".inf", "-.inf", ".nan", "1e400", "0x10", "1_000", "+1"]
STRINGS = ["", "''", '""', "x", "auto", "gpt2", "llama", "adamw", "cosine", "linear", "glpk",
           "cbc", "ddp", "fsdp", "pipeline", "tensor", "offload", "ddp+pipeline", "null", "~",
           "true", "false", "yes", "[]", "{}", "[1, 2]", "[small]", "{a: 1}", "'16'", '"16"',
           "0x0", "1x2", "2x1", "1x1", "2", "1+1", "1x2:1MiB", "1x2:80GiB", "1x2:1e400GiB",
           "3x1", "100000x8", "1x2000", "64x1024", "/etc/passwd", "/dev/zero", "/abs/path",
           "../../x", "..", ".", "a/b", "j" * 300, "\\0", "&a x", "*a", "!!binary aGVsbG8=",
           "!!str 16", "!!int 16", "|", ">", "- x", "'a\tb'", '"\\x00"', '"\\xff"',
           '"\\u202e"', "\U0001f600", "é"]
# Raw bytes that are not UTF-8, spliced in as text by the byte mutations.
BAD_BYTES = [b"\xff", b"\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x00",
             b"\x1b[2J", b"\t", b"\r"]

# A scalar value in a map (after "key: ") or in a flow list.
VALUE_RE = re.compile(r"(?<=: )[^\s,{}\[\]#][^,{}\[\]#\n]*|(?<=[\[,] )[^\s,{}\[\]#][^,{}\[\]#\n]*")
KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.+-]*(?=:)")
LIST_RE = re.compile(r"\[[^\[\]\n]*\]")


def spots(regex, text):
    """Matches of `regex` outside comments (mutating a comment tests nothing)."""
    out = []
    for m in regex.finditer(text):
        line_start = text.rfind("\n", 0, m.start()) + 1
        if "#" not in text[line_start:m.start()]:
            out.append(m)
    return out


def tiny(text):
    """The example made quick to train: 2 steps, evaluation and checkpoints at every step."""
    for key, value in [("steps", "2"), ("eval_every", "1"), ("checkpoint_every", "1"),
                       ("eval_batches", "1"), ("warmup", "1"), ("time_limit", "1")]:
        text = re.sub(r"(\b%s: )\d+(e\d+)?" % key, r"\g<1>%s" % value, text)
    return text


class Mutator:
    """Text mutations of a workload, from one random stream. `bounded` keeps every number small
    enough to train in seconds (for `saturn run`) unless it is out of range anyway."""

    def __init__(self, rng, bounded):
        self.rng = rng
        self.bounded = bounded

    def value(self):
        r = self.rng
        pool = r.choice([SMALL_INTS, SMALL_INTS, FLOATS, STRINGS] +
                        ([] if self.bounded else [HUGE_INTS, HUGE_INTS]))
        v = r.choice(pool)
        if self.bounded and pool is STRINGS and v.isdigit() and int(v) > 64:
            v = "64"
        return v

    def big_list(self):
        r = self.rng
        n = r.choice([0, 1, 3, 12, 101, 1000] if not self.bounded else [0, 1, 2, 3])
        item = r.choice(["{i}", "{i}e-5", "small", "tiny-llama", "x{i}", "{i}.5"])
        return "[" + ", ".join(item.format(i=i + 1) for i in range(n)) + "]"

    def mutate(self, text):
        """Returns (new text as bytes, description)."""
        r = self.rng
        ops = [self.replace_value] * 6 + [self.replace_list, self.delete_line,
                                          self.duplicate_line, self.rename_key, self.insert_pair,
                                          self.indent, self.splice_bytes, self.targeted] * 2
        if not self.bounded:
            ops += [self.truncate, self.swap_lines, self.alias]
        steps = []
        data = text.encode()
        for _ in range(r.choice([1, 1, 1, 2, 3])):
            data, what = r.choice(ops)(data)
            steps.append(what)
        return data, "; ".join(steps)

    # Each op takes and returns bytes (mutations may leave UTF-8 behind) and says what it did.
    def replace_value(self, data):
        text = data.decode("utf-8", "surrogateescape")
        found = spots(VALUE_RE, text)
        if not found:
            return data, "no value to replace"
        m = self.rng.choice(found)
        v = self.value()
        out = text[:m.start()] + v + text[m.end():]
        return out.encode("utf-8", "surrogateescape"), "value %r -> %r at %d" % (m.group(), v, m.start())

    def replace_list(self, data):
        text = data.decode("utf-8", "surrogateescape")
        found = spots(LIST_RE, text)
        if not found:
            return data, "no list"
        m = self.rng.choice(found)
        v = self.big_list()
        out = text[:m.start()] + v + text[m.end():]
        return out.encode("utf-8", "surrogateescape"), "list %r -> %s" % (m.group(), v[:60])

    def delete_line(self, data):
        lines = data.split(b"\n")
        i = self.rng.randrange(len(lines))
        return b"\n".join(lines[:i] + lines[i + 1:]), "delete line %d" % (i + 1)

    def duplicate_line(self, data):
        lines = data.split(b"\n")
        i = self.rng.randrange(len(lines))
        return b"\n".join(lines[:i + 1] + lines[i:]), "duplicate line %d" % (i + 1)

    def swap_lines(self, data):
        lines = data.split(b"\n")
        i, j = self.rng.randrange(len(lines)), self.rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines), "swap lines %d and %d" % (i + 1, j + 1)

    def rename_key(self, data):
        text = data.decode("utf-8", "surrogateescape")
        found = spots(KEY_RE, text)
        if not found:
            return data, "no key"
        m = self.rng.choice(found)
        k = m.group()
        new = self.rng.choice(KEYS + [k[:-1], k + "s", k[::-1], k.upper(), "x" * 300])
        out = text[:m.start()] + new + text[m.end():]
        return out.encode("utf-8", "surrogateescape"), "key %r -> %r" % (k, new[:40])

    def insert_pair(self, data):
        text = data.decode("utf-8", "surrogateescape")
        found = [m.end() for m in spots(re.compile(r"\{"), text)]
        if not found:
            return data, "no map"
        at = self.rng.choice(found)
        pair = "%s: %s, " % (self.rng.choice(KEYS), self.value())
        out = text[:at] + pair + text[at:]
        return out.encode("utf-8", "surrogateescape"), "insert %r at %d" % (pair, at)

    def indent(self, data):
        lines = data.split(b"\n")
        i = self.rng.randrange(len(lines))
        lines[i] = self.rng.choice([b" ", b"  ", b"    ", b"\t", b""]) + lines[i].lstrip()
        return b"\n".join(lines), "re-indent line %d" % (i + 1)

    def splice_bytes(self, data):
        r = self.rng
        at = r.randrange(len(data) + 1)
        piece = r.choice(BAD_BYTES + [b":", b"{", b"}", b"[", b"]", b",", b"#", b"'", b'"', b"-",
                                      b"&", b"*", b"!", b"%", b"@", b"`", b"\n"])
        cut = r.choice([0, 0, 1])
        return data[:at] + piece + data[at + cut:], "bytes %r at %d (replacing %d)" % (piece, at, cut)

    def truncate(self, data):
        at = self.rng.randrange(len(data) + 1)
        return data[:at], "truncate at %d" % at

    def alias(self, data):
        # Anchors and aliases, including a list that refers to itself through a sweep.
        text = data.decode("utf-8", "surrogateescape")
        if "jobs:" not in text:
            return data, "no jobs"
        extra = self.rng.choice([
            "  - &j {model: small, batch_size: 16, name: aliased}\n  - *j\n",
            "  - sweep: &s {model: small, lr: &l [1e-3, 2e-3], batch_size: *l}\n",
            "  - sweep: {model: small, lr: [1e-3], batch_size: [16], seed: *missing}\n",
        ])
        return text.replace("jobs:\n", "jobs:\n" + extra, 1).encode("utf-8", "surrogateescape"), \
            "alias %r" % extra.strip()[:50]

    def targeted(self, data):
        # The inputs of issue 15, aimed at their keys.
        text = data.decode("utf-8", "surrogateescape")
        r = self.rng
        choices = [
            (r"^name: .*$", "name: " + r.choice(["../../escaped", "/abs/escaped", "a/b", "x" * 300,
                                                "run\udcc3(", "ok-name"])),
            (r"train: [^,}]+", "train: " + r.choice(["/etc/passwd", "/dev/null", "data/val.bin",
                                                     "data", "missing.bin"])),
            (r"d_model: (\d+)", r"d_model: \1, vocab_size: %s" % r.choice(["2", "64", "100", "65"])),
            (r"cluster: \w+", "cluster: " + r.choice(["0x0", ".inf", "1x2", "2x1", "1+1", "1x1",
                                                      "3x1", "1x2:1MiB", "1x2:1e9"])),
            (r"seq_len: \d+", "seq_len: " + r.choice(["100000", "30000", "65536"])),
        ]
        pattern, repl = r.choice(choices)
        out, n = re.subn(pattern, repl, text, count=1, flags=re.M)
        return out.encode("utf-8", "surrogateescape"), "targeted %r" % repl[:50] if n else "no target"


def snapshot(root, skip):
    out = set()
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            if not p.startswith(skip):
                out.add(p)
    return out


def run(cmd, cwd, timeout, env):
    """(exit code or None on timeout, output). The whole process group goes on timeout:
    `saturn run --np` starts mpiexec and its ranks."""
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return None, out.decode("utf-8", "replace")


INTERNAL = re.compile(r"terminate called|bad_alloc|json\.exception|MPI_ABORT|Segmentation fault|"
                      r"core dumped|internal: |Assertion|what\(\):")


def verdict(rc, out, path, cmd):
    """None when the outcome is allowed, else what is wrong."""
    if rc is None:
        return "hang (timed out)"
    if INTERNAL.search(out):
        return "internal error: " + INTERNAL.search(out).group()
    if rc == 0:
        return None
    if rc != 2:
        return "exit %d (allowed: 0, or 2 with FILE:LINE:COL)" % rc
    if "--cluster" in cmd and "error: --cluster: " in out:
        return None  # the flag's error names the flag
    if not re.search(re.escape(path) + r":\d+:\d+: ", out):
        return "exit 2 without %s:LINE:COL: in the message" % path
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("saturn")
    ap.add_argument("examples")
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--plans", type=int, default=400)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--plan-timeout", type=float, default=30)
    ap.add_argument("--run-timeout", type=float, default=60)
    ap.add_argument("--verbose", action="store_true", help="one line per case")
    a = ap.parse_args()
    saturn = os.path.abspath(a.saturn)
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               SATURN_CALIBRATION_CACHE="none")
    work = tempfile.mkdtemp(prefix="saturn-fuzz-")
    try:
        # The cases, and their data next to them (`data/train.bin` is relative to the file), from
        # one licence text.
        cases = os.path.join(work, "cases")
        os.makedirs(cases)
        with open(os.path.join(cases, "text.txt"), "w") as f:
            f.write(open("/usr/share/common-licenses/BSD").read() * 20)
        subprocess.run([saturn, "data", "prepare", "--input", os.path.join(cases, "text.txt"),
                        "--output", os.path.join(cases, "data")], check=True,
                       stdout=subprocess.DEVNULL)
        examples = sorted(f for f in os.listdir(a.examples) if f.endswith(".yaml"))
        bases = [(f, open(os.path.join(a.examples, f)).read()) for f in examples]
        # Commands run three levels down, so a run directory written anywhere (runs/NAME, or a
        # NAME escaping it) shows up under `work`.
        cwd = os.path.join(work, "a", "b", "cwd")
        os.makedirs(cwd)
        rng = random.Random(a.seed)
        failures = []
        counts = {}
        t0 = time.time()
        total = a.plans + a.runs
        run_every = max(1, total // max(1, a.runs))
        runs = 0
        for i in range(total):
            is_run = a.runs > 0 and i % run_every == 0 and runs < a.runs
            runs += is_run
            base_name, base = rng.choice(bases)
            text = tiny(base) if is_run else base
            data, what = Mutator(rng, bounded=is_run).mutate(text)
            path = os.path.join(cases, "case-%04d-%s" % (i, base_name))
            with open(path, "wb") as f:
                f.write(data)
            if is_run:
                cmd = [saturn, "run", path, "--np", "2", "--quiet", "--device-memory", "512MiB"]
                timeout = a.run_timeout
            else:
                cmd = [saturn, "plan", path, "--time-limit", "2"]
                if rng.random() < 0.1:  # the flag's values are bounded and located too
                    cmd += ["--cluster", rng.choice(STRINGS + SMALL_INTS + HUGE_INTS)]
                timeout = a.plan_timeout
            before = snapshot(work, cases)
            rc, out = run(cmd, cwd, timeout, env)
            after = snapshot(work, cases)
            problem = verdict(rc, out, path, cmd)
            if problem is None and rc == 2 and after != before:
                problem = "exit 2 but wrote " + ", ".join(sorted(after - before)[:5])
            kind = "run" if is_run else "plan"
            counts[(kind, rc)] = counts.get((kind, rc), 0) + 1
            if a.verbose:
                errors = [l for l in out.splitlines() if "error" in l]
                print("case %d %s exit %s: %s | %s" % (i, kind, rc, what[:70],
                                                      (errors or [""])[0][:150]), flush=True)
            if problem:
                failures.append(i)
                print("FAIL case %d (seed %d, %s of %s): %s\n  mutation: %s\n  command: %s\n"
                      "  output (last lines):\n    %s\n  file:\n    %s" %
                      (i, a.seed, kind, base_name, problem, what, " ".join(cmd),
                       "\n    ".join(out.strip().splitlines()[-12:]),
                       "\n    ".join(repr(l)[2:-1] for l in data.split(b"\n"))), flush=True)
            # A run that trained leaves its run directory: clear it for the next case.
            for entry in os.listdir(cwd):
                shutil.rmtree(os.path.join(cwd, entry), ignore_errors=True)
            for entry in after - before:
                if os.path.exists(entry) and not entry.startswith(cwd):
                    shutil.rmtree(entry, ignore_errors=True) if os.path.isdir(entry) else os.remove(entry)
        summary = ", ".join("%s exit %s: %d" % (k[0], k[1], v) for k, v in sorted(
            counts.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))))
        print("%d cases (seed %d) in %.0f s: %s" % (total, a.seed, time.time() - t0, summary))
        if failures:
            print("%d FAILED: cases %s" % (len(failures), failures))
            return 1
        print("all outcomes were exit 0, or exit 2 with FILE:LINE:COL and nothing written")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
