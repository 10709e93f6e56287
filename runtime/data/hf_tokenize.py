# Encodes text files with a Hugging Face tokenizer.json through the `tokenizers` library.
# `saturn data prepare --tokenizer` runs this (embedded in the binary) with `python -c`; it is
# not meant to be run by hand. Arguments: TOKENIZER_JSON IDS_OUT INPUT...
#
# Each input is read as UTF-8 text exactly as stored (no newline translation) and encoded
# whole with Tokenizer.encode (the tokenizer's own post-processor adds any BOS/EOS), so the ids
# equal what the library gives for that text. The ids of all inputs, in order, are appended to
# IDS_OUT as little-endian uint32. A line "saturn-progress ..." follows each input (saturn
# shows it as it comes). On success one JSON line goes to stdout; on failure one line
# "saturn-error KIND MESSAGE" goes to stderr and the exit status is 3.
import array
import json
import sys


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
try:
    tokenizer = tokenizers.Tokenizer.from_file(tokenizer_path)
except Exception as e:  # the library raises plain Exception for a malformed file
    fail("not-a-tokenizer", str(e).replace("\n", " "))

ids = array.array("I")
if ids.itemsize != 4 or sys.byteorder != "little":
    fail("platform", "needs 4-byte unsigned ints and a little-endian host")
counts = []
with open(ids_path, "wb") as out:
    for path in inputs:
        try:
            with open(path, encoding="utf-8", newline="") as f:
                text = f.read()
        except UnicodeDecodeError as e:
            fail("not-utf8", f"{path}: {e}")
        except OSError as e:
            fail("io", f"{path}: {e.strerror}")
        ids = array.array("I", tokenizer.encode(text).ids)
        ids.tofile(out)
        counts.append(len(ids))
        print(f"saturn-progress {len(counts)}/{len(inputs)} {path}: {len(text)} characters, "
              f"{len(ids)} ids", flush=True)
print(json.dumps({
    "library": f"tokenizers {tokenizers.__version__}",
    "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
    "counts": counts,
}), flush=True)
