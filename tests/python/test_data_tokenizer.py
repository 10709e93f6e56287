#!/usr/bin/env python3
"""`saturn data prepare --tokenizer` against the `tokenizers` library itself (issue 19).

Tokenizers are trained here with the library on local text (no hub is reachable): a GPT-2-style
byte-level BPE, a LLaMA/SentencePiece-style BPE (Metaspace normalizer, byte fallback, <s> added
by the post-processor) and a word-level vocabulary above 65536 (written as HDF5 uint32). For
each, the ids in train + val equal the library's own `encode` of every input, concatenated, and
the split is the documented one. Bad input (missing file, not a tokenizer, ids beyond uint32,
non-UTF-8 text, a Python without the library) is exit 2 naming the file, leaving nothing.

Issue 28: saturn encodes in windows to bound memory, and the ids must not depend on them. With
small windows (the test knob SATURN_TOKENIZE_WINDOW_CHARS) over inputs full of awkward places to
cut (runs of newlines and spaces, long words without whitespace, non-ASCII, CRLF, special-token
text), the ids still equal the library's whole-text encode for each tokenizer (also a T5-style
Unigram and a BERT-style WordPiece), a post-processor adding ids at both ends included;
truncation in tokenizer.json is ignored; and a failure (no ids, bad UTF-8 after the first
megabyte) leaves no output directory behind.

Usage: test_data_tokenizer.py --saturn SATURN --venv VENV. Needs `tokenizers` (in the venv that
scripts/install-deps.sh --tests makes); without it the test fails naming that command, or is
skipped (77) with SATURN_ALLOW_MISSING_HF=1.
"""
import argparse
import glob
import json
import os
import random
import re
import struct
import subprocess
import sys
import tempfile

import venv_peers

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--venv", required=True)
args = ARGS.parse_args()


venv_peers.require(args.venv, ["tokenizers", "h5py"])

import h5py  # noqa: E402
import tokenizers  # noqa: E402
from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402

FAILURES = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        FAILURES.append(what)


def read_llmc(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520 and header[1] == 1, f"{path}: bad header"
        data = f.read()
    assert len(data) == 2 * header[2], f"{path}: {len(data)} bytes for {header[2]} tokens"
    return list(struct.unpack(f"<{header[2]}H", data))


def read_h5(path):
    with h5py.File(path, "r") as f:
        d = f["tokens"]
        assert d.dtype == "uint32", f"{path}: /tokens is {d.dtype}"
        return [int(x) for x in d[()]]


def saturn(*argv, window=None):
    env = dict(os.environ)
    env["SATURN_PYTHON"] = sys.executable  # this Python has the library
    env.pop("SATURN_TOKENIZE_WINDOW_CHARS", None)
    if window is not None:
        env["SATURN_TOKENIZE_WINDOW_CHARS"] = str(window)
    return subprocess.run([args.saturn, "data", "prepare", *argv], capture_output=True,
                          text=True, env=env)


def expected_ids(tok, inputs):
    ids = []
    for p in inputs:
        with open(p, encoding="utf-8", newline="") as f:
            ids += tok.encode(f.read()).ids
    return ids


def licences():
    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    if len(files) < 3:
        print("FAILED: /usr/share/common-licenses has fewer than 3 files (base-files)")
        sys.exit(1)
    return files


def gpt2_style(train_files):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train(train_files, trainer)
    return tok


def llama_style(train_files):
    byte_tokens = [f"<0x{i:02X}>" for i in range(256)]
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                           normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=["<unk>", "<s>", "</s>"]
                                  + byte_tokens, show_progress=False)
    tok.train(train_files, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))])
    return tok


def t5_style(train_files):
    # Unigram (Viterbi over each word, so a long word's tokens can depend on all of it).
    tok = tokenizers.Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train(train_files, trainers.UnigramTrainer(vocab_size=800, unk_token="<unk>",
                                                   special_tokens=["<unk>", "</s>"],
                                                   show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", special_tokens=[("</s>", tok.token_to_id("</s>"))])
    return tok


def bert_style(train_files):
    # WordPiece: a word over 100 characters is one [UNK]; [CLS] and [SEP] around each input.
    tok = tokenizers.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train(train_files, trainers.WordPieceTrainer(
        vocab_size=800, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False))
    tok.post_processor = processors.BertProcessing(("[SEP]", tok.token_to_id("[SEP]")),
                                                   ("[CLS]", tok.token_to_id("[CLS]")))
    return tok


def large_vocab(train_files):
    # Ids above 65535 for real words: 70000 filler entries first, then the text's words.
    vocab = {"[UNK]": 0}
    for i in range(1, 70000):
        vocab[f"filler{i}"] = i
    splitter = pre_tokenizers.Whitespace()
    for p in train_files:
        with open(p, encoding="utf-8", errors="replace") as f:
            for w, _ in splitter.pre_tokenize_str(f.read()):
                vocab.setdefault(w, len(vocab))
    tok = tokenizers.Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = splitter
    return tok


def round_trip(name, tok, tmp, inputs, fraction, want_format):
    path = os.path.join(tmp, f"{name}.json")
    tok.save(path)
    out = os.path.join(tmp, f"out-{name}")
    r = saturn("--tokenizer", path, "--input", *inputs, "--output", out,
               "--val-fraction", str(fraction))
    check(r.returncode == 0, f"{name}: exit 0 (got {r.returncode}: {r.stderr.strip()})")
    if r.returncode != 0:
        return
    want = expected_ids(tok, inputs)
    if want_format == "llm.c":
        train = read_llmc(os.path.join(out, "train.bin"))
        val = read_llmc(os.path.join(out, "val.bin"))
    else:
        train = read_h5(os.path.join(out, "train.h5"))
        val = read_h5(os.path.join(out, "val.h5"))
    check(train + val == want,
          f"{name}: train + val ({len(train)} + {len(val)}) equal the library's encode "
          f"({len(want)} ids, {want_format})")
    n_val = min(len(want) - 1, max(1, round(len(want) * fraction)))
    check(len(val) == n_val, f"{name}: val holds {len(val)} ids = round(n * {fraction}) = {n_val}")
    vocab = tok.get_vocab_size(with_added_tokens=True)
    check(f"vocabulary {vocab}" in r.stdout, f"{name}: reports vocabulary {vocab}")
    with open(os.path.join(out, "tokenizer.json"), "rb") as a, open(path, "rb") as b:
        check(a.read() == b.read(), f"{name}: tokenizer.json copied beside the data")
    # A model directory holding tokenizer.json is accepted as --tokenizer, with the same ids.
    again = os.path.join(tmp, f"again-{name}")
    r = saturn("--tokenizer", out, "--input", *inputs, "--output", again,
               "--val-fraction", str(fraction))
    same = r.returncode == 0 and all(
        open(os.path.join(out, f), "rb").read() == open(os.path.join(again, f), "rb").read()
        for f in os.listdir(out))
    check(same, f"{name}: --tokenizer DIR (holding tokenizer.json) gives identical files")


def awkward_text(seed, size, licence_text):
    """`size` characters of text with many awkward places to cut: runs of newlines, spaces and
    tabs, CRLF, words thousands of characters long, repeated letters and punctuation, non-ASCII
    (accents, CJK, emoji, U+2581), special-token text, and plain prose between."""
    rnd = random.Random(seed)
    pieces = [
        lambda: "\n" * rnd.randint(1, 300),
        lambda: " " * rnd.randint(1, 300),
        lambda: "\r\n" * rnd.randint(1, 40),
        lambda: "\t \n \r\n  " * rnd.randint(1, 20),
        lambda: "".join(rnd.choice("abcdefghij") for _ in range(rnd.randint(50, 3000))),
        lambda: rnd.choice("a=-.\u2581") * rnd.randint(10, 2000),
        lambda: "Grüße naïve café — 東京タワー 🚀🚀 Ж\u2581x " * rnd.randint(1, 10),
        lambda: "東京" * rnd.randint(10, 600) + "🚀" * rnd.randint(1, 200),
        lambda: "<|endoftext|><s></s><unk>" * rnd.randint(1, 4),
        lambda: "1234567890" * rnd.randint(1, 200) + " x" * rnd.randint(1, 300),
        lambda: ".,;:!?" * rnd.randint(1, 100) + "ab " * rnd.randint(1, 300),
        lambda: (lambda i: licence_text[i:i + rnd.randint(10, 4000)])(
            rnd.randint(0, len(licence_text) - 4000)),
    ]
    out, n = [], 0
    while n < size:
        out.append(rnd.choice(pieces)())
        n += len(out[-1])
    return "".join(out)[:size]


def windowed(name, tok, tmp, inputs, window):
    """The ids through many window cuts equal the library's whole-text encode."""
    path = os.path.join(tmp, f"{name}.json")
    tok.save(path)
    out = os.path.join(tmp, f"windows-{name}-{window}")
    r = saturn("--tokenizer", path, "--input", *inputs, "--output", out, window=window)
    check(r.returncode == 0, f"{name}, windows of {window}: exit 0"
          + (f" (got {r.returncode}: {r.stderr.strip()[-300:]})" if r.returncode else ""))
    if r.returncode != 0:
        return
    windows = sum(int(w) for w in re.findall(r"ids, (\d+) windows", r.stdout + r.stderr))
    want = expected_ids(tok, inputs)
    if os.path.exists(os.path.join(out, "train.bin")):
        got = read_llmc(os.path.join(out, "train.bin")) + read_llmc(os.path.join(out, "val.bin"))
    else:
        got = read_h5(os.path.join(out, "train.h5")) + read_h5(os.path.join(out, "val.h5"))
    first = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
    check(got == want and windows >= 5 * len(inputs),
          f"{name}, windows of {window} characters ({windows} windows): {len(got)} ids equal "
          f"the library's whole-text encode ({len(want)} ids"
          + (f"; first difference at id {first})" if first is not None else ")"))


def expect_exit2(what, argv, must_name, out_dir):
    r = saturn(*argv)
    msg = r.stderr.strip()
    check(r.returncode == 2 and must_name in msg,
          f"{what}: exit 2 naming {must_name} (got {r.returncode}: {msg[:300]})")
    check(not os.path.exists(out_dir) or not os.listdir(out_dir),
          f"{what}: nothing written to {out_dir}")


def main():
    files = licences()
    with tempfile.TemporaryDirectory() as tmp:
        # Non-ASCII text, CRLF line ends and a character no training text has (byte fallback).
        uni = os.path.join(tmp, "unicode.txt")
        with open(uni, "w", encoding="utf-8", newline="") as f:
            f.write("Grüße, naïve café — 東京 🚀\r\nLine two\tends here.\r\n\u0416\u2581x\n")
        inputs = files[:3] + [uni]
        gpt2 = gpt2_style(files[:6])
        llama = llama_style(files[:6])
        round_trip("gpt2-bpe", gpt2, tmp, inputs, 0.1, "llm.c")
        round_trip("llama-bpe", llama, tmp, inputs, 0.25, "llm.c")
        big = large_vocab(files[:6])
        check(big.get_vocab_size() > 65536, f"large vocabulary has {big.get_vocab_size()} ids")
        round_trip("wordlevel-70k", big, tmp, inputs, 0.1, "hdf5")

        # Windows: many cuts through awkward text, the ids unchanged (issue 28).
        with open(files[0], encoding="utf-8", errors="replace") as f:
            licence_text = f.read()
        awkward = []
        for seed in range(3):
            awkward.append(os.path.join(tmp, f"awkward{seed}.txt"))
            with open(awkward[-1], "w", encoding="utf-8", newline="") as f:
                f.write(awkward_text(seed, 12000, licence_text))
        for window in (16, 100, 1000):
            windowed("gpt2-bpe", gpt2, tmp, awkward, window)
            windowed("llama-bpe", llama, tmp, awkward, window)
            windowed("wordlevel-70k", big, tmp, awkward, window)
        # A post-processor that adds ids at both ends, and one tokenizer.json that truncates
        # and pads (both ignored: the ids are those of the whole text).
        both = tokenizers.Tokenizer.from_file(os.path.join(tmp, "llama-bpe.json"))
        both.post_processor = processors.TemplateProcessing(
            single="<s> $A </s>", special_tokens=[("<s>", both.token_to_id("<s>")),
                                                  ("</s>", both.token_to_id("</s>"))])
        windowed("llama-bos-eos", both, tmp, awkward, 100)
        for window in (16, 100):
            windowed("t5-unigram", t5_style(files[:2]), tmp, awkward, window)
            windowed("bert-wordpiece", bert_style(files[:2]), tmp, awkward, window)
        truncating = tokenizers.Tokenizer.from_file(os.path.join(tmp, "gpt2-bpe.json"))
        truncating.enable_truncation(max_length=16)
        truncating.enable_padding(length=8)
        truncating.save(os.path.join(tmp, "truncating.json"))
        out = os.path.join(tmp, "out-truncating")
        r = saturn("--tokenizer", os.path.join(tmp, "truncating.json"), "-i", awkward[0], "-o", out)
        want = expected_ids(gpt2, awkward[:1])
        got = (read_llmc(os.path.join(out, "train.bin")) + read_llmc(os.path.join(out, "val.bin"))
               if r.returncode == 0 else [])
        check(got == want, f"truncation and padding in tokenizer.json are ignored ({len(got)} of "
              f"{len(want)} ids" + (f"; exit {r.returncode}: {r.stderr.strip()[-200:]})"
                                    if r.returncode else ")"))

        # A failure leaves no output directory behind (issue 28, item 14): encoding that gives
        # no ids (whitespace only for the word-level tokenizer), into a directory two levels
        # below a missing one; a bad byte after the first megabyte, once ids were written.
        spaces = os.path.join(tmp, "spaces.txt")
        with open(spaces, "w") as f:
            f.write(" \n\t " * 100)
        nested = os.path.join(tmp, "missing-parent", "a", "out")
        r = saturn("--tokenizer", os.path.join(tmp, "wordlevel-70k.json"), "-i", spaces,
                   "-o", nested)
        check(r.returncode == 2 and "too few" in r.stderr
              and not os.path.exists(os.path.join(tmp, "missing-parent")),
              f"no ids: exit 2, no directory left (exit {r.returncode}: "
              f"{r.stderr.strip().splitlines()[-1][:200]})")
        late = os.path.join(tmp, "late-bad-byte.txt")
        with open(late, "wb") as f:
            f.write(licence_text.encode() * (1_300_000 // len(licence_text) + 1) + b"\xff tail")
        late_out = os.path.join(tmp, "late-out")
        expect_exit2("bad UTF-8 after 1 MB", ["--tokenizer", os.path.join(tmp, "gpt2-bpe.json"),
                                              "-i", files[0], late, "-o", late_out],
                     late, late_out)
        check(not os.path.exists(late_out), "bad UTF-8 after 1 MB: no output directory left")
        kept = os.path.join(tmp, "existing-out")
        os.makedirs(kept)
        with open(os.path.join(kept, "train.bin"), "w") as f:
            f.write("old")
        r = saturn("--tokenizer", os.path.join(tmp, "gpt2-bpe.json"), "-i", late, "-o", kept)
        check(r.returncode == 2 and os.listdir(kept) == ["train.bin"]
              and open(os.path.join(kept, "train.bin")).read() == "old",
              f"a failure into an existing directory leaves it as it was: {os.listdir(kept)}")

        # Bad input: each exit 2 naming the file, nothing written.
        tok_path = os.path.join(tmp, "gpt2-bpe.json")
        out = os.path.join(tmp, "bad-out")
        missing = os.path.join(tmp, "no-such-tokenizer.json")
        expect_exit2("missing tokenizer", ["--tokenizer", missing, "-i", files[0], "-o", out],
                     missing, out)
        expect_exit2("tokenizer is text", ["--tokenizer", files[0], "-i", files[0], "-o", out],
                     files[0], out)
        no_model = os.path.join(tmp, "no-model.json")
        with open(no_model, "w") as f:
            json.dump({"version": "1.0", "vocab": {"a": 0}}, f)
        expect_exit2("JSON without a model", ["--tokenizer", no_model, "-i", files[0], "-o", out],
                     no_model, out)
        broken = os.path.join(tmp, "broken.json")
        with open(tok_path) as f:
            j = json.load(f)
        j["model"]["type"] = "NoSuchModel"
        with open(broken, "w") as f:
            json.dump(j, f)
        expect_exit2("library rejects it", ["--tokenizer", broken, "-i", files[0], "-o", out],
                     broken, out)
        huge = os.path.join(tmp, "huge-ids.json")
        j["model"]["type"] = "BPE"
        first = next(iter(j["model"]["vocab"]))
        j["model"]["vocab"][first] = 2 ** 32
        with open(huge, "w") as f:
            json.dump(j, f)
        expect_exit2("ids beyond uint32", ["--tokenizer", huge, "-i", files[0], "-o", out],
                     huge, out)
        binary = os.path.join(tmp, "binary.dat")
        with open(binary, "wb") as f:
            f.write(b"text then \xff\xfe\x00 not utf-8")
        expect_exit2("input not UTF-8", ["--tokenizer", tok_path, "-i", binary, "-o", out],
                     binary, out)
        expect_exit2("missing input", ["--tokenizer", tok_path, "-i", missing + ".txt", "-o", out],
                     missing + ".txt", out)
        r = subprocess.run([args.saturn, "data", "prepare", "--tokenizer", tok_path, "--python",
                            "/bin/false-python-does-not-exist", "-i", files[0], "-o", out],
                           capture_output=True, text=True)
        check(r.returncode == 2 and "--python" in r.stderr,
              f"python that cannot run: exit 2 saying --python ({r.returncode}: "
              f"{r.stderr.strip()[:200]})")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
