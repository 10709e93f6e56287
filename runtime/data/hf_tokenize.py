# Encodes text files with a Hugging Face tokenizer.json through the `tokenizers` library.
# `saturn data prepare --tokenizer` runs this (embedded in the binary) with `python -c`; it is
# not meant to be run by hand. Arguments: TOKENIZER_JSON IDS_OUT INPUT...
#
# Each input is read as UTF-8 text exactly as stored (no newline translation) and its ids are
# the library's Tokenizer.encode(whole_text).ids, post-processor included (a LLaMA tokenizer's
# <s>). The text is never held whole: it is read in chunks and encoded as windows of about
# WINDOW characters through encode_batch (in parallel), so memory stays bounded whatever the
# input (one line of 50 MB included). Windows must not change the ids, so:
#   - windows are encoded without the post-processor; its ids, found once from probe encodes,
#     must be the same before and after every text (else: saturn-error unsupported);
#   - each window [s, e) is encoded with CONTEXT characters of text on either side (widened to
#     a word boundary) and keeps the tokens whose start offset lies in [s, e) (offsets are
#     characters in the Python binding, checked at start; tokens must come in offset order);
#   - a cut c between two windows is kept only when the window before it, the window after it
#     and a probe of the text around c with both ends moved by one character all give the same
#     tokens near c; else the two windows are merged and encoded as one. Cuts are placed after a
#     newline followed by a non-space where one is near, else before a space between words.
#     A window grows to at most MAX_WINDOW characters (saturn-error unsplittable beyond);
#   - if merging changes the tokens at the kept cut before (a word whose tokens depend on all
#     of it), the input is encoded again with 8, then 64 times the context (then unsplittable);
#   - the first window starts at the text's start and the last ends at its end, as in a whole
#     encode.
# Truncation and padding are switched off: a tokenizer.json that truncates would silently drop
# text, and training data is one stream, not padded rows.
#
# The ids of all inputs, in order, are appended to IDS_OUT as little-endian uint32. Lines
# "saturn-progress ..." follow each input and every PROGRESS_BYTES of a long one (saturn shows
# them as they come). On success one JSON line goes to stdout; on failure one line
# "saturn-error KIND MESSAGE" goes to stderr and the exit status is 3.
#
# Test knob: SATURN_TOKENIZE_WINDOW_CHARS=N sets WINDOW (and CONTEXT = WINDOW / 4, between 64
# and 1024), so that tests cross many window boundaries with small files. Not for normal use.
import array
import bisect
import codecs
import concurrent.futures
import itertools
import json
import operator
import os
import re
import sys

WINDOW = 1 << 16
READ_BYTES = 1 << 20
PROGRESS_BYTES = 32 << 20
RELOAD_CHARS = 1 << 21


def fail(kind, message):
    print(f"saturn-error {kind} {message}", file=sys.stderr, flush=True)
    sys.exit(3)


try:
    import tokenizers
except ImportError as e:
    fail("no-library", f"{sys.executable}: {e}")

if len(sys.argv) < 4:
    fail("usage", "expected TOKENIZER_JSON IDS_OUT INPUT...")
tokenizer_path, ids_path, inputs = sys.argv[1], sys.argv[2], sys.argv[3:]

knob = os.environ.get("SATURN_TOKENIZE_WINDOW_CHARS", "")
if knob:
    if not knob.isdigit() or int(knob) < 16:
        fail("usage", f"SATURN_TOKENIZE_WINDOW_CHARS={knob} (valid: an integer >= 16)")
    WINDOW = int(knob)
CONTEXT = min(1024, max(64, WINDOW // 4))
MAX_WINDOW = max(16 * WINDOW, 1 << 20)
try:
    THREADS = len(os.sched_getaffinity(0))
except AttributeError:
    THREADS = os.cpu_count() or 1
# Windows per encode_batch call: enough to keep every thread busy, few enough that the
# encodings held at once stay small (at most 64 windows).
BATCH = min(64, max(8, 2 * THREADS))


def load(text=None):
    """The tokenizer (text: its JSON, else the file), truncation and padding off."""
    t = (tokenizers.Tokenizer.from_str(text) if text is not None
         else tokenizers.Tokenizer.from_file(tokenizer_path))
    t.no_truncation()
    t.no_padding()
    return t


try:
    whole = load()
    with open(tokenizer_path, encoding="utf-8") as f:
        spec = json.load(f)
    has_post = spec.get("post_processor") is not None
    spec["post_processor"] = None
    BODY_JSON = json.dumps(spec)
    body = load(BODY_JSON)
except Exception as e:  # the library raises plain Exception for a malformed file
    fail("not-a-tokenizer", str(e).replace("\n", " "))
# BPE and Unigram models cache the tokens of up to 10000 pre-tokenized words. Without a
# pre-tokenizer (LLaMA's) each window is one word, and the cache would grow by every window, so
# the tokenizer is loaded afresh once RELOAD_CHARS characters were encoded in windows whose
# words are long (8 characters or more on average), and after 16 times that in any case.
CACHED = (spec.get("model") or {}).get("type") in ("BPE", "Unigram")
del spec

if array.array("I").itemsize != 4 or sys.byteorder != "little":
    fail("platform", "needs 4-byte unsigned ints and a little-endian host")


def one_line(e):
    return str(e).replace("\n", " ")


def static_ids(whole):
    """The ids the post-processor puts before and after every text: (prefix, suffix)."""
    if not has_post:
        return [], []
    around = whole.encode("").ids  # prefix + suffix with nothing between
    # Short texts, then words of the vocabulary (for a word-level one without an unknown token).
    vocab = sorted(body.get_vocab(with_added_tokens=False).items(), key=lambda kv: kv[1])
    words = [w for w, _ in vocab if w.isalpha()][:2]
    probes = ["Saturn", "a b\n\n1 22 333, x", " \u00e9t\u00e9 \u6771 x"] + words + [" ".join(words)]
    splits, tried = None, 0
    for probe in probes:
        try:
            full = whole.encode(probe).ids
            inner = body.encode(probe, add_special_tokens=False).ids
        except Exception:  # e.g. a word-level vocabulary without this word and no unknown token
            continue
        if not inner:
            continue
        tried += 1
        n = len(inner)
        here = {k for k in range(len(full) - n + 1)
                if full[k:k + n] == inner and full[:k] + full[k + n:] == around}
        splits = here if splits is None else splits & here
    if tried < 2:
        fail("unsupported", f"{tokenizer_path}: the library encodes too few of saturn's short "
             f"probe texts to show which ids its post-processor adds, so saturn cannot encode "
             f"long inputs in windows")
    if not splits or len(splits) > 1:
        fail("unsupported", f"{tokenizer_path}: its post-processor does not put the same ids "
             f"before and after every text, so saturn cannot encode long inputs in windows")
    k = splits.pop()
    return around[:k], around[k:]


PREFIX, SUFFIX = static_ids(whole)
# The windows rely on offsets in characters, which the Python binding gives (0.19): one that
# gave bytes would place tokens after a non-ASCII character beyond the text's end.
try:
    _probe = "\u00e9\u00e9\u6771\u6771 abc \U0001f680 abc"
    if any(e > len(_probe) for _, e in body.encode(_probe, add_special_tokens=False).offsets):
        fail("unsupported", f"this `tokenizers` ({tokenizers.__version__}) gives offsets in bytes, "
             f"not characters")
except Exception:  # the probe cannot be encoded: nothing learnt
    pass
VOCAB_SIZE = whole.get_vocab_size(with_added_tokens=True)
del whole  # only needed for the probes
# Where a cut may go, best first: after a newline that a non-space follows; before a space
# between two non-spaces. Greedy matches from the window's middle find the last such place.
CUT_AFTER_NEWLINE = re.compile(r"(?s).*\n(?=\S)")
CUT_BEFORE_SPACE = re.compile(r"(?s).*\S(?= \S)")
WORD_START = re.compile(r"(?s).*\s(?=\S)")  # greedy: the last one
WORD_END = re.compile(r"\S(?=\s)")


class Text:
    """One input read in chunks: buf holds its characters [base, base + len(buf)). `context` is
    how many characters a window is encoded with on either side (CONTEXT, more on a retry)."""

    def __init__(self, path, f, context, progress):
        self.path, self.f, self.progress = path, f, progress
        self.next_progress = PROGRESS_BYTES
        self.context, self.half, self.snap = context, context // 2, min(context, 256)
        self.decoder = codecs.getincrementaldecoder("utf-8")("strict")
        self.buf, self.base, self.eof, self.bytes = "", 0, False, 0

    def end(self):
        return self.base + len(self.buf)

    def read(self):
        data = self.f.read(READ_BYTES)
        held = len(self.decoder.getstate()[0])  # bytes of a character split by the last read
        try:
            chunk = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as e:
            fail("not-utf8", f"{self.path}: byte {self.bytes - held + e.start}: {e.reason}")
        self.bytes += len(data)
        self.eof = not data
        self.buf += chunk

    def slice(self, a, b):
        return self.buf[a - self.base:b - self.base]

    def drop_before(self, pos):
        if pos > self.base:
            self.buf = self.buf[pos - self.base:]
            self.base = pos

    def span(self, s, e, n, extra=0):
        """The characters [a, b) that [s, e) is encoded with: context (+ extra) more on either
        side, moved out to the start and end of a word where one is within `snap` characters (so
        that a tokenizer that fails on part of a word, such as a word-level one without an
        unknown token, sees whole words), and within the text (n: its length, None while
        unknown)."""
        a, b = s - self.context - extra, e + self.context + extra
        if a <= 0:
            a = 0
        else:
            m = WORD_START.match(self.buf, max(0, a - self.snap - self.base), a - self.base + 1)
            a = self.base + m.end() if m else a
        if n is not None and b + self.snap >= n:
            b = n
        else:
            m = WORD_END.search(self.buf, b - 1 - self.base, b + self.snap - self.base)
            b = self.base + m.end() if m else b
        return a, b

    def cut(self, lo, hi):
        """A cut in (lo, hi]: a good place if there is one, else hi."""
        a = lo - self.base
        m = CUT_AFTER_NEWLINE.match(self.buf, a, hi - self.base + 1)
        if m:
            return self.base + m.end()
        m = CUT_BEFORE_SPACE.match(self.buf, a, hi - self.base + 2)
        return self.base + m.end() if m else hi


class Window:
    """Encoded characters [s, e) (the encoding's text starts at a0): its ids, and its tokens
    near both ends, for the cuts."""

    def __init__(self, s, e, a0, encoding, text):
        offsets = encoding.offsets
        starts = list(map(operator.itemgetter(0), offsets))
        if not all(map(operator.le, starts, itertools.islice(starts, 1, None))):
            fail("unsupported", f"{tokenizer_path}: the library gives tokens out of offset order "
                 f"for {text.path}, so saturn cannot encode it in windows")
        ids = encoding.ids
        half = text.half

        def index(pos):  # the first token starting at or after pos
            return bisect.bisect_left(starts, pos - a0)

        def near(c):  # the tokens that overlap [c - half, c + half)
            i, j = index(c - half), index(c + half)
            while i > 0 and offsets[i - 1][1] + a0 > c - half:
                i -= 1
            return [(ids[k], offsets[k][0] + a0, offsets[k][1] + a0) for k in range(i, j)]

        self.s, self.e = s, e
        self.ids = ids[index(s):index(e)]
        self.near_s = near(s) if s > 0 else None
        self.near_e = near(e)


class Encoder:
    """encode_batch of the tokenizer without its post-processor, in a background thread so
    that Python works on one batch while the library encodes the next. It also loads the
    tokenizer afresh to empty the model's cache when needed (see CACHED)."""

    def __init__(self):
        self.tok, self.long_chars, self.all_chars = body, 0, 0
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)

    def submit(self, texts, path):
        if CACHED and (self.long_chars >= RELOAD_CHARS or self.all_chars >= 16 * RELOAD_CHARS):
            self.tok, self.long_chars, self.all_chars = load(BODY_JSON), 0, 0
        return self.pool.submit(self.tok.encode_batch, texts, add_special_tokens=False), texts, path

    def result(self, job):
        future, texts, path = job
        try:
            encodings = future.result()
        except Exception as e:
            fail("encode", f"{path}: {one_line(e)}")
        for t, enc in zip(texts, encodings):
            words = enc.token_to_word(len(enc) - 1) if len(enc) else None  # last word's index
            if words is None or len(t) >= 8 * (words + 1):
                self.long_chars += len(t)
            self.all_chars += len(t)
        return encodings


class Stats:
    windows = 0
    merges = 0
    retries = 0


class Retry(Exception):
    """A kept cut changed when a later one was merged: encode the input again, more context."""


class Batch:
    """Windows [cuts[i], cuts[i + 1]) and probes at the cuts inside the text, being encoded."""

    def __init__(self, text, start, encoder):
        while not text.eof and text.end() < start + BATCH * WINDOW + text.context + text.snap + 2:
            text.read()
        if text.bytes >= text.next_progress and not text.eof:
            text.progress(f"{text.bytes >> 20} MB so far")
            text.next_progress += PROGRESS_BYTES
        self.n = n = text.end() if text.eof else None
        # Cuts from `start` on, with the context after each already read; at the end of the
        # text, the rest as one window.
        self.cuts = cuts = [start]
        for _ in range(BATCH):
            s = cuts[-1]
            if n is not None and n - s <= WINDOW + WINDOW // 2:
                if n > s:
                    cuts.append(n)
                break
            cuts.append(text.cut(s + WINDOW // 2, s + WINDOW))
        self.spans = [text.span(s, e, n) for s, e in zip(cuts, cuts[1:])]
        self.probe_cuts = [c for c in cuts[:-1] if c > 0]
        self.probes = [text.span(c, c, n, 1) for c in self.probe_cuts]
        self.last = n is not None and cuts[-1] == n
        self.job = encoder.submit([text.slice(a, b) for a, b in self.spans + self.probes],
                                  text.path) if len(cuts) > 1 else None


def encode_input(text, emit, encoder):
    """Encodes one input, handing its ids to emit()."""
    emit(PREFIX)
    pending = None  # the last window, written once the cut at its end is kept
    batch = Batch(text, 0, encoder)
    while batch.job:
        encodings = encoder.result(batch.job)
        following = None if batch.last else Batch(text, batch.cuts[-1], encoder)
        cuts, spans = batch.cuts, batch.spans
        probe_near = {c: Window(c, c, a, enc, text).near_e
                      for c, (a, _), enc in zip(batch.probe_cuts, batch.probes,
                                                 encodings[len(spans):])}
        del encodings[len(spans):]
        for i, (s, e) in enumerate(zip(cuts, cuts[1:])):
            w = Window(s, e, spans[i][0], encodings[i], text)
            encodings[i] = None
            Stats.windows += 1
            if pending is None:
                pending = w
                continue
            if pending.near_e == w.near_s == probe_near[s]:
                emit(pending.ids)
                pending = w
                continue
            # The cut changes the tokens near it: encode both windows as one.
            Stats.merges += 1
            if e - pending.s > MAX_WINDOW:
                fail("unsplittable", f"{text.path}: found no place to split the text between "
                     f"characters {pending.s} and {e} where the tokens do not depend on the split "
                     f"(the windows of {MAX_WINDOW} characters that saturn encodes at most)")
            a, b = text.span(pending.s, e, batch.n)
            encoding = encoder.result(encoder.submit([text.slice(a, b)], text.path))[0]
            merged = Window(pending.s, e, a, encoding, text)
            if merged.near_s != pending.near_s:
                raise Retry(pending.s)
            pending = merged
        text.drop_before(pending.s - text.context - text.snap - 2)
        if following is None:
            break
        batch = following
    if pending:  # it ends at the end of the text
        emit(pending.ids)
    emit(SUFFIX)


counts = []
encoder = Encoder()
with open(ids_path, "wb") as out:
    for number, path in enumerate(inputs, 1):
        def progress(what):
            print(f"saturn-progress {number}/{len(inputs)} {path}: {what}", flush=True)

        def emit(ids):
            array.array("I", ids).tofile(out)
            counts[-1] += len(ids)

        counts.append(0)
        windows_before, written = Stats.windows, out.tell()
        # A kept cut whose tokens change later (text whose tokens depend on more than CONTEXT
        # characters, as a long word can for a Unigram model) makes the input be encoded again
        # from its start, with more context.
        for context in (CONTEXT, 8 * CONTEXT, 64 * CONTEXT):
            out.seek(written)
            out.truncate()
            counts[-1] = 0
            try:
                with open(path, "rb") as f:
                    text = Text(path, f, context, progress)
                    encode_input(text, emit, encoder)
                break
            except Retry as e:
                where = e.args[0]
                Stats.retries += 1
            except OSError as e:
                fail("io", f"{path}: {e.strerror}")
        else:
            fail("unsplittable", f"{path}: the tokens near character {where} change with text "
                 f"more than {context} characters away, or the library gives wrong offsets for "
                 f"them (as for characters that a BPE without unk_token drops), so saturn cannot "
                 f"encode it in windows")
        progress(f"{text.end()} characters, {counts[-1]} ids, "
                 f"{Stats.windows - windows_before} windows")
print(json.dumps({
    "library": f"tokenizers {tokenizers.__version__}",
    "vocab_size": VOCAB_SIZE,
    "counts": counts,
    "windows": Stats.windows,
    "merged": Stats.merges,
    "retries": Stats.retries,
}), flush=True)
