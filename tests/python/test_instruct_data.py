#!/usr/bin/env python3
"""`saturn data prepare --format jsonl` against transformers (issue 32, acceptance 1).

Three tokenizers are made here (no hub is reachable): byte-level BPEs trained on local text with
a ChatML-style chat template, a Llama-3-style one (a bos in the template, `trim` on contents,
<|eot_id|> ends a turn) and a LLaMA-style BPE whose post-processor adds <s> for prompt/completion
records. For every record the ids in train + val equal transformers' `apply_chat_template`
(tokenize=True) plus the eos, or tokenizer(prompt) + tokenizer(completion, no special tokens) +
eos; the loss mask is 1 exactly on the assistant turns as transformers renders them (from the
conversation before with the generation prompt to the end of the turn) and on the completion,
with the eos trained when the record ends with an answer; the split is by record, and each
split's .records file holds the token offset of each of its records. Malformed
records are exit 2 naming the file and line, and nothing is written.

Usage: test_instruct_data.py --saturn SATURN --venv VENV (transformers, tokenizers and jinja2 in
the venv that scripts/install-deps.sh --tests makes).
"""
import argparse
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile

import venv_peers

ARGS = argparse.ArgumentParser()
ARGS.add_argument("--saturn", required=True)
ARGS.add_argument("--venv", required=True)
args = ARGS.parse_args()
venv_peers.require(args.venv, ["tokenizers", "transformers", "jinja2"])

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

FAILURES = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what)
    if not cond:
        FAILURES.append(what)


CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
          "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
          "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
          "{% endif %}")
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|begin_of_text|>",
            "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


def corpus():
    files = sorted(glob.glob("/usr/share/common-licenses/*"))
    text = []
    for f in files[:6]:
        with open(f, encoding="utf-8", errors="replace") as fh:
            text.append(fh.read())
    return text


def make_tokenizer(out_dir, template, bos, eos, add_bos):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus(), trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    if add_bos:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos, eos_token=eos,
                                   chat_template=template)
    fast.save_pretrained(out_dir)
    return AutoTokenizer.from_pretrained(out_dir)


CHATS = [
    {"messages": [{"role": "user", "content": "What is 2 + 2?"},
                  {"role": "assistant", "content": "It is 4."}]},
    {"messages": [{"role": "system", "content": "You answer briefly."},
                  {"role": "user", "content": "Name a licence."},
                  {"role": "assistant", "content": "The GNU General Public License."},
                  {"role": "user", "content": "Another?"},
                  {"role": "assistant", "content": "  Apache 2.0, with spaces around it.  "}]},
    {"messages": [{"role": "user", "content": "Ünïcödé? 日本語 — and \"quotes\""},
                  {"role": "assistant", "content": "Oui: ça marche, 東京."},
                  {"role": "user", "content": "A question left without an answer"}]},
    {"messages": [{"role": "assistant", "content": "An answer that opens the conversation."}]},
    {"messages": [{"role": "user", "content": "Line one\nline two\n\n"},
                  {"role": "assistant", "content": "Two lines\nback."}]},
]
PROMPTS = [
    {"prompt": "Translate to French: cat", "completion": " chat"},
    {"prompt": "The licence says", "completion": " that you may copy it."},
    {"prompt": "", "completion": "An answer without a prompt."},
    {"prompt": "Ünïcödé prompt ", "completion": "and a reply — 東京"},
]


def expected(tok, record):
    """transformers' ids for a record, and its mask: for a chat, the assistant turns' character
    spans in transformers' rendering (from the conversation before with the generation prompt
    to the end of the turn), mapped to tokens by the tokenizer's offsets (a token whose first
    character lies in a span). Token counts of the prefixes would not do: a prefix ending in
    "\n\n" tokenizes differently from the same characters followed by text."""
    eos = tok.convert_tokens_to_ids(tok.eos_token)
    if "messages" in record:
        msgs = record["messages"]
        ids = tok.apply_chat_template(msgs, tokenize=True)
        text = tok.apply_chat_template(msgs, tokenize=False)
        spans = []
        for i, m in enumerate(msgs):
            if m["role"] != "assistant":
                continue
            if i > 0:
                start = len(tok.apply_chat_template(msgs[:i], tokenize=False,
                                                    add_generation_prompt=True))
            else:  # apply_chat_template refuses an empty conversation: its own template, rendered
                template = tok._compile_jinja_template(tok.chat_template)
                start = len(template.render(messages=[], add_generation_prompt=True,
                                            **tok.special_tokens_map))
            spans.append((start, len(tok.apply_chat_template(msgs[:i + 1], tokenize=False))))
        enc = tok(text, add_special_tokens=False, return_offsets_mapping=True)
        assert enc["input_ids"] == ids, "rendering and apply_chat_template disagree"
        mask = [1 if any(s <= b < e for s, e in spans) else 0 for b, _ in enc["offset_mapping"]]
        return ids + [eos], mask + [1 if msgs[-1]["role"] == "assistant" else 0]
    p = tok(record["prompt"])["input_ids"]
    c = tok(record["completion"], add_special_tokens=False)["input_ids"]
    return p + c + [eos], [0] * len(p) + [1] * (len(c) + 1)


def read_llmc(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        assert header[0] == 20240520 and header[1] == 1, f"{path}: bad header"
        data = f.read()
    return list(struct.unpack(f"<{header[2]}H", data))


def read_mask(path):
    with open(path, "rb") as f:
        return list(f.read())


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) % 8 == 0, f"{path}: {len(data)} bytes, not a multiple of 8"
    return list(struct.unpack(f"<{len(data) // 8}Q", data))


def offsets(sizes):
    out, at = [], 0
    for n in sizes:
        out.append(at)
        at += n
    return out


def prepare(tok_dir, records_file, out, *extra):
    return subprocess.run([args.saturn, "data", "prepare", "--format", "jsonl", "--tokenizer",
                           tok_dir, "-i", records_file, "-o", out, *extra],
                          capture_output=True, text=True)


def write_jsonl(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n")


def compare(name, tok, tok_dir, records, tmp):
    src = os.path.join(tmp, f"{name}.jsonl")
    write_jsonl(src, records)
    out = os.path.join(tmp, f"{name}-out")
    r = prepare(tok_dir, src, out, "--val-fraction", "0.4")
    check(r.returncode == 0, f"{name}: data prepare exit 0 ({r.stderr.strip()[-300:]})")
    if r.returncode != 0:
        return
    ids = read_llmc(os.path.join(out, "train.bin")) + read_llmc(os.path.join(out, "val.bin"))
    mask = read_mask(os.path.join(out, "train.mask")) + read_mask(os.path.join(out, "val.mask"))
    want_ids, want_mask, sizes = [], [], []
    for rec in records:
        i, m = expected(tok, rec)
        want_ids += i
        want_mask += m
        sizes.append(len(i))
    check(ids == want_ids, f"{name}: ids equal transformers' for all {len(records)} records "
          f"({len(ids)} vs {len(want_ids)} ids)")
    check(mask == want_mask, f"{name}: loss mask equals the answers' spans "
          f"({sum(mask)} vs {sum(want_mask)} trained)")
    n_val = round(len(records) * 0.4)
    val = read_llmc(os.path.join(out, "val.bin"))
    check(len(val) == sum(sizes[len(records) - n_val:]),
          f"{name}: val holds exactly the last {n_val} records ({len(val)} ids)")
    n_train = len(records) - n_val
    check(read_records(os.path.join(out, "train.records")) == offsets(sizes[:n_train]),
          f"{name}: train.records holds the token offset of each of its {n_train} records")
    check(read_records(os.path.join(out, "val.records")) == offsets(sizes[n_train:]),
          f"{name}: val.records holds the offset of each of its {n_val} records, from 0")
    check(os.path.exists(os.path.join(out, "tokenizer_config.json")),
          f"{name}: the tokenizer's config (its chat template) is copied beside the data")


def bad_records(tok_dir, tmp):
    good = json.dumps(CHATS[0])
    cases = [
        ("not JSON", "{\"messages\": [", 2),
        ("unknown role", json.dumps({"messages": [{"role": "robot", "content": "hi"}]}), 2),
        ("content not a string", json.dumps({"messages": [{"role": "user", "content": 3}]}), 2),
        ("no assistant message", json.dumps({"messages": [{"role": "user", "content": "hi"}]}), 2),
        ("empty completion", json.dumps({"prompt": "p", "completion": ""}), 2),
        ("neither shape", json.dumps({"text": "plain"}), 2),
        ("a list, not an object", "[1, 2]", 2),
    ]
    for what, line, number in cases:
        src = os.path.join(tmp, "bad.jsonl")
        write_jsonl(src, [good, line, good])
        out = os.path.join(tmp, "bad-out")
        r = prepare(tok_dir, src, out)
        msg = r.stderr.strip()
        check(r.returncode == 2 and f"{src}:{number}" in msg,
              f"bad record ({what}): exit 2 naming {os.path.basename(src)}:{number} "
              f"(got {r.returncode}: {msg[-200:]})")
        check(not os.path.exists(out), f"bad record ({what}): nothing written")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        chatml_dir = os.path.join(tmp, "chatml")
        chatml = make_tokenizer(chatml_dir, CHATML, "<s>", "<|im_end|>", False)
        compare("chatml", chatml, chatml_dir, CHATS, tmp)
        llama3_dir = os.path.join(tmp, "llama3")
        llama3 = make_tokenizer(llama3_dir, LLAMA3, "<|begin_of_text|>", "<|eot_id|>", False)
        compare("llama3", llama3, llama3_dir, CHATS, tmp)
        pc_dir = os.path.join(tmp, "prompt-completion")
        pc = make_tokenizer(pc_dir, None, "<s>", "</s>", True)
        compare("prompt-completion", pc, pc_dir, PROMPTS, tmp)
        bad_records(chatml_dir, tmp)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


main()
