#!/usr/bin/python3
"""bench/data: memory and time of `saturn data prepare`, byte tokenizer vs --tokenizer (issue 28).

Makes a text input of about --mb MB from local text (/usr/share/common-licenses and the
copyright files under /usr/share/doc, repeated) and a variant that is one single line (newlines
made spaces), trains a GPT-2-style byte-level BPE on part of it with the `tokenizers` library (no
network), then measures on each input, side by side:

  bytes          `saturn data prepare` with the byte tokenizer
  tokenizer      `saturn data prepare --tokenizer` (windows, encode_batch, ids streamed)
  encode_batch   the library's own Tokenizer.encode_batch over the same text split into lines,
                 about 1 MB of lines per call (no file written): the throughput to compare with
  before         (with --before SCRIPT, e.g. `git show HEAD~1:runtime/data/hf_tokenize.py`)
                 that older hf_tokenize.py alone, which encodes each input whole

Peak RSS is GNU time's "Maximum resident set size" (for saturn, the largest single process of
saturn and the Python it starts) and, beside it, the sum over saturn and its children sampled
every 0.2 s. Times are medians of --repeat runs (`before` runs once: it is slow and large).
Prints tables; never passes or fails.

    bench/data/bench_tokenize.py --saturn build/saturn [--python PY] [--mb 50] [--repeat 3]
                                 [--work DIR] [--before OLD_hf_tokenize.py] [--skip-single-line]
"""
import argparse
import datetime
import glob
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ARGS = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--python", default=os.path.expanduser("~/.cache/saturn/test-venv/bin/python"),
                  help="a Python with `tokenizers` (default: the test venv)")
ARGS.add_argument("--mb", type=float, default=50.0, help="input size in MB (default 50)")
ARGS.add_argument("--repeat", type=int, default=3)
ARGS.add_argument("--work", default="/tmp/saturn-bench-tokenize")
ARGS.add_argument("--before", help="an older hf_tokenize.py to measure too (runs once)")
ARGS.add_argument("--skip-single-line", action="store_true")
args = ARGS.parse_args()

TIME = "/usr/bin/time"
if not os.path.exists(TIME):
    sys.exit(f"{TIME} (GNU time) is needed for peak RSS: apt-get install time")

# Run in the venv's Python: trains the tokenizer, and times encode_batch over lines.
TRAIN = r"""
import sys, tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers
sample, out = sys.argv[1], sys.argv[2]
tok = tokenizers.Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train([sample], trainers.BpeTrainer(
    vocab_size=8000, special_tokens=["<|endoftext|>"],
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
tok.save(out)
"""
ENCODE_BATCH = r"""
import sys, time, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
n = 0
t0 = time.perf_counter()
with open(sys.argv[2], encoding="utf-8", newline="") as f:
    while True:
        lines = f.readlines(1 << 20)
        if not lines:
            break
        n += sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
print(f"ids {n} seconds {time.perf_counter() - t0:.3f}")
"""


def make_inputs(work, mb):
    sources = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    sources += sorted(glob.glob("/usr/share/doc/*/copyright"))
    parts = []
    for p in sources:
        with open(p, encoding="utf-8", errors="replace") as f:
            parts.append(f.read())
    text = "\n".join(parts)
    sample = os.path.join(work, "sample.txt")
    with open(sample, "w", encoding="utf-8") as f:
        f.write(text[:4_000_000])
    want = int(mb * 1e6)
    lines = os.path.join(work, f"text-{mb:g}MB.txt")
    single = os.path.join(work, f"single-line-{mb:g}MB.txt")
    for path, body in ((lines, text), (single, text.replace("\n", " ").replace("\r", " "))):
        data = body.encode()
        with open(path, "wb") as f:
            written = 0
            while written < want:
                chunk = data[:want - written]
                f.write(chunk)
                written += len(chunk)
        # Cut back to a whole character, so the file stays UTF-8.
        with open(path, "rb+") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 4))
            tail = f.read()
            keep = len(tail.decode("utf-8", errors="ignore").encode())
            f.truncate(size - len(tail) + keep)
    return sample, lines, single, len(sources)


PAGE = os.sysconf("SC_PAGESIZE")


def tree_rss(root):
    """The summed RSS (bytes) of root's descendants, from /proc."""
    parent, rss = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            parent[int(d)] = int(fields[1])
            rss[int(d)] = int(fields[21]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    total, todo = 0, [root]
    while todo:
        p = todo.pop()
        for c, pp in parent.items():
            if pp == p:
                total += rss.get(c, 0)
                todo.append(c)
    return total


def timed(argv, env=None):
    """(seconds, peak RSS bytes, stdout, peak summed RSS bytes) of argv under GNU time -v: the
    peak is GNU time's (the largest of the processes), the sum is sampled every 0.2 s."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen([TIME, "-v", *argv], stdout=out, stderr=err, env=env)
        peak_sum = 0
        while p.poll() is None:
            peak_sum = max(peak_sum, tree_rss(p.pid))
            time.sleep(0.2)
        seconds = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(argv)}\n{stderr[-3000:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", stderr)
    return seconds, int(m.group(1)) * 1024, stdout, peak_sum


def median_of(n, fn):
    """Medians of (seconds, peak RSS, -, summed RSS) over n runs of fn; the last run's third."""
    runs = [fn() for _ in range(n)]
    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs),
            runs[-1][2], statistics.median(r[3] for r in runs))


def mib(b):
    return f"{b / 2**20:,.0f} MiB"


def main():
    os.makedirs(args.work, exist_ok=True)
    sample, lines_input, single_input, n_sources = make_inputs(args.work, args.mb)
    tok = os.path.join(args.work, "gpt2-style.json")
    subprocess.run([args.python, "-c", TRAIN, sample, tok], check=True)
    env = dict(os.environ, SATURN_PYTHON=args.python)
    env.pop("SATURN_TOKENIZE_WINDOW_CHARS", None)
    out = os.path.join(args.work, "out")
    threads = len(os.sched_getaffinity(0))
    with open("/proc/meminfo") as f:
        mem = int(re.search(r"MemTotal:\s+(\d+)", f.read()).group(1)) / 2**20
    print(f"# bench/data/bench_tokenize.py, {datetime.date.today()}, {platform.node()}: "
          f"{threads} cores, {mem:.0f} GiB, Python {args.python}")
    print(f"# input: {n_sources} local text files repeated to {args.mb:g} MB; GPT-2-style "
          f"byte-level BPE, vocabulary 8000, trained on 4 MB of it; medians of {args.repeat}")
    print()
    inputs = [("lines", lines_input)] + ([] if args.skip_single_line else
                                          [("one line", single_input)])
    rows = []
    for label, path in inputs:
        mb = os.path.getsize(path) / 1e6

        def prepare(*extra):
            shutil.rmtree(out, ignore_errors=True)
            s, rss, stdout, rss_sum = timed(
                [args.saturn, "data", "prepare", "-i", path, "-o", out, *extra], env)
            m = re.search(r"\((\d+) tokens\) and .* \((\d+) tokens\)", stdout)
            return s, rss, int(m.group(1)) + int(m.group(2)) if m else 0, rss_sum

        rows.append((label, mb, "saturn bytes", *median_of(args.repeat, prepare)))
        rows.append((label, mb, "saturn --tokenizer",
                     *median_of(args.repeat, lambda: prepare("--tokenizer", tok))))
        if label == "lines":
            def batch():
                _, rss, stdout, rss_sum = timed([args.python, "-c", ENCODE_BATCH, tok, path])
                return float(stdout.split()[3]), rss, int(stdout.split()[1]), rss_sum
            rows.append((label, mb, "encode_batch over lines", *median_of(args.repeat, batch)))
        if args.before:
            with open(args.before) as f:
                script = f.read()
            ids = os.path.join(args.work, "before.ids")
            s, rss, _, rss_sum = timed([args.python, "-c", script, tok, ids, path])
            n = os.path.getsize(ids) // 4
            os.remove(ids)
            rows.append((label, mb, "before: whole encode (script)", s, rss, n, rss_sum))
    print("| input | MB | what | peak RSS | peak RSS, summed | seconds | MB/s | ids |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for label, mb, what, s, rss, n, rss_sum in rows:
        print(f"| {label} | {mb:.1f} | {what} | {mib(rss)} | {mib(rss_sum)} | {s:.1f} | "
              f"{mb / s:.2f} | {n:,} |")
    print()
    print("peak RSS: GNU time's, the largest single process (saturn, or the Python it runs); "
          "summed: saturn and its children together, sampled every 0.2 s. encode_batch: its "
          "own time, without interpreter start-up. `before` ran once.")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
