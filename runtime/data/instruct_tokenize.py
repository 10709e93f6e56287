# Encodes instruction records (JSON Lines) with a Hugging Face tokenizer and its chat template.
# `saturn data prepare --format jsonl` runs this (embedded in the binary) with `python -c`; it is
# not meant to be run by hand. Arguments: TOKENIZER_DIR IDS_OUT MASK_OUT RECORDS_OUT INPUT...
#
# Each line of an input is one record (blank lines are skipped):
#   {"prompt": STR, "completion": STR}
#       ids = encode(prompt) (with the tokenizer's special tokens, a LLaMA <s> say)
#             + encode(completion, no special tokens) + [eos]; trained: the completion and eos.
#   {"messages": [{"role": "system"|"user"|"assistant", "content": STR}, ...]}
#       text = the chat template rendered as transformers 4.44 renders it (apply_chat_template:
#       a sandboxed Jinja2 environment with trim_blocks and lstrip_blocks, a tojson filter
#       without HTML escaping, raise_exception, the special tokens as variables); ids =
#       encode(text, no special tokens) + [eos]. Trained: the tokens of each assistant turn as
#       the template renders it, from the end of the conversation before it with the generation
#       prompt (render(messages[:i], add_generation_prompt=True)) to the end of the turn
#       (render(messages[:i+1])): the answer and the template's end-of-turn text, so that the
#       model learns to stop; a token counts as trained when its first character lies in a turn.
#       The eos is trained when the last message is the assistant's.
# Every record is read and checked before anything is written: a line that is not a JSON
# object of one of those shapes (a missing or non-string field, an unknown role, no assistant
# message, an empty completion) is "saturn-error bad-record FILE:LINE: what is wrong".
#
# Outputs: IDS_OUT little-endian uint32 ids, MASK_OUT one byte per id (1: trained), RECORDS_OUT
# little-endian uint64 ids per record, in input order. Lines "saturn-progress ..." every 20000
# records; one JSON line on stdout on success; on failure one line "saturn-error KIND MESSAGE" on
# stderr and exit status 3.
import array
import datetime
import json
import os
import sys


def fail(kind, message):
    print(f"saturn-error {kind} {message}", file=sys.stderr, flush=True)
    sys.exit(3)


try:
    import tokenizers
except ImportError as e:
    fail("no-library", f"{sys.executable}: {e}")

if len(sys.argv) < 6:
    fail("usage", "expected TOKENIZER_DIR IDS_OUT MASK_OUT RECORDS_OUT INPUT...")
tokenizer_dir, ids_path, mask_path, records_path = sys.argv[1:5]
inputs = sys.argv[5:]
ROLES = ("system", "user", "assistant")


def token_text(value):
    # A special token in tokenizer_config.json: a string, or an AddedToken as a dict.
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def load_config():
    config = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = os.path.join(tokenizer_dir, name)
        if os.path.exists(path):
            try:
                with open(path, encoding="utf-8") as f:
                    config.update(json.load(f))
            except (OSError, ValueError) as e:
                fail("not-a-tokenizer", f"{path}: {e}")
    return config


def load_tokenizer():
    path = os.path.join(tokenizer_dir, "tokenizer.json")
    try:
        tok = tokenizers.Tokenizer.from_file(path)
    except Exception as e:  # the library raises its own exception types
        fail("not-a-tokenizer", f"{path}: {e}")
    tok.no_truncation()
    tok.no_padding()
    return tok


config = load_config()
tokenizer = load_tokenizer()
special = {}
for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
            "mask_token"):
    text = token_text(config.get(key))
    if text is not None:
        special[key] = text
if "additional_special_tokens" in config:
    special["additional_special_tokens"] = [
        token_text(t) for t in config["additional_special_tokens"] if token_text(t) is not None]
eos_text = special.get("eos_token")
eos_id = tokenizer.token_to_id(eos_text) if eos_text is not None else None
if eos_id is None:
    fail("unsupported",
         f"{tokenizer_dir}: no eos_token in tokenizer_config.json that the vocabulary holds "
         "(every record ends with one)")

template_source = config.get("chat_template")
if isinstance(template_source, list):  # named templates: the default one
    named = {t.get("name"): t.get("template") for t in template_source if isinstance(t, dict)}
    template_source = named.get("default")
template = None


def chat_template():
    global template
    if template is not None:
        return template
    if not isinstance(template_source, str):
        fail("unsupported",
             f"{tokenizer_dir}/tokenizer_config.json has no chat_template, so chat records "
             "cannot be rendered (prompt/completion records need none)")
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:
        fail("no-library", f"{sys.executable}: {e} (chat templates are rendered with jinja2)")

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        template = env.from_string(template_source)
    except jinja2.exceptions.TemplateError as e:
        fail("unsupported", f"{tokenizer_dir}: its chat_template does not compile: {e}")
    return template


def render(messages, add_generation_prompt, where):
    import jinja2
    try:
        return chat_template().render(messages=messages, tools=None, documents=None,
                                      add_generation_prompt=add_generation_prompt, **special)
    except jinja2.exceptions.TemplateError as e:
        fail("bad-record", f"{where}: the chat template refuses it: {e}")


def check_record(record, where):
    if not isinstance(record, dict):
        fail("bad-record", f"{where}: not a JSON object")
    if "messages" in record:
        messages = record["messages"]
        if not isinstance(messages, list) or not messages:
            fail("bad-record", f"{where}: \"messages\" must be a non-empty list")
        for k, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or \
                    not isinstance(m.get("content"), str):
                fail("bad-record",
                     f"{where}: messages[{k}] must be an object with string \"role\" and "
                     "\"content\"")
            if m["role"] not in ROLES:
                fail("bad-record",
                     f"{where}: messages[{k}] has role {json.dumps(m['role'])} (valid: "
                     f"{', '.join(ROLES)})")
        if not any(m["role"] == "assistant" for m in messages):
            fail("bad-record", f"{where}: no assistant message, so nothing to train on")
        return
    if "prompt" in record or "completion" in record:
        for key in ("prompt", "completion"):
            if not isinstance(record.get(key), str):
                fail("bad-record", f"{where}: \"{key}\" must be a string")
        if not record["completion"]:
            fail("bad-record", f"{where}: the completion is empty, so nothing to train on")
        return
    fail("bad-record",
         f"{where}: expected {{\"prompt\", \"completion\"}} or {{\"messages\": [...]}}, got keys "
         f"{sorted(record)}")


def read_records():
    records = []
    for path in inputs:
        try:
            with open(path, encoding="utf-8") as f:
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    where = f"{path}:{number}"
                    try:
                        record = json.loads(line)
                    except ValueError as e:
                        fail("bad-record", f"{where}: not JSON ({e})")
                    check_record(record, where)
                    records.append((record, where))
        except UnicodeDecodeError as e:
            fail("not-utf8", f"{path}: {e}")
        except OSError as e:
            fail("io", f"cannot read {path}: {e}")
    if not records:
        fail("bad-record", f"no records in {', '.join(inputs)}")
    return records


def encode_prompt_completion(record):
    prompt = tokenizer.encode(record["prompt"], add_special_tokens=True).ids
    completion = tokenizer.encode(record["completion"], add_special_tokens=False).ids
    return prompt + completion + [eos_id], [0] * len(prompt) + [1] * (len(completion) + 1)


def encode_chat(record, where):
    messages = record["messages"]
    text = render(messages, False, where)
    spans = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(render(messages[:i], True, where))
        end_text = render(messages[:i + 1], False, where)
        if not text.startswith(end_text):
            fail("unsupported",
                 f"{where}: the chat template renders the conversation up to message {i} as a "
                 "text the whole conversation does not start with, so the assistant's turns "
                 "cannot be found in it")
        spans.append((start, len(end_text)))
    encoding = tokenizer.encode(text, add_special_tokens=False)
    mask = [1 if any(s <= begin < e for s, e in spans) else 0
            for begin, _ in encoding.offsets]
    last_is_answer = messages[-1]["role"] == "assistant"
    return encoding.ids + [eos_id], mask + [1 if last_is_answer else 0]


records = read_records()
ids, mask, counts = array.array("I"), array.array("B"), array.array("Q")
trained = 0
for k, (record, where) in enumerate(records):
    if k and k % 20000 == 0:  # saturn shows these as they come
        print(f"saturn-progress {k} of {len(records)} records", flush=True)
    if "messages" in record:
        r_ids, r_mask = encode_chat(record, where)
    else:
        r_ids, r_mask = encode_prompt_completion(record)
    if not any(r_mask):
        fail("bad-record", f"{where}: no token of it is trained (the template drops the answer?)")
    ids.extend(r_ids)
    mask.extend(r_mask)
    counts.append(len(r_ids))
    trained += sum(r_mask)
if sys.byteorder != "little":
    ids.byteswap()
    counts.byteswap()
try:
    for path, data in ((ids_path, ids), (mask_path, mask), (records_path, counts)):
        with open(path, "wb") as f:
            data.tofile(f)
except OSError as e:
    fail("io", f"cannot write: {e}")
print(json.dumps({"library": f"tokenizers {tokenizers.__version__}",
                  "vocab_size": tokenizer.get_vocab_size(with_added_tokens=True),
                  "records": len(records), "ids": len(ids), "trained": trained}))
