#!/usr/bin/env python3
"""Makes the instruction records examples/instruct-sweep.yaml trains on: JSON Lines of chat
conversations and prompt/completion pairs about small arithmetic and spelling, generated from a
fixed seed (so every run makes the same file) with words from the licence texts every Debian
system ships. Nothing is downloaded.

  python3 examples/make_instruct_data.py            # writes examples/data-instruct/records.jsonl
then tokenize them with a model's tokenizer and its chat template (the models of
examples/make_hf_model.py have one):
  saturn data prepare --format jsonl --tokenizer examples/models/tiny-llama \\
      --input examples/data-instruct/records.jsonl --output examples/data-instruct
"""
import argparse
import glob
import json
import os
import random
import re

HERE = os.path.dirname(os.path.abspath(__file__))


def words():
    found = set()
    for path in sorted(glob.glob("/usr/share/common-licenses/*")):
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                found.update(w.lower() for w in re.findall(r"\b[A-Za-z]{4,9}\b", f.read()))
    return sorted(found) or ["licence", "software", "copy", "notice", "warranty"]


def arithmetic(rng):
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", f"{a} + {b} = {a + b}."
    return f"What is {a} times {b}?", f"{a} times {b} is {a * b}."


def record(rng, vocabulary):
    kind = rng.random()
    if kind < 0.4:  # one question, one answer, sometimes a system message
        question, answer = arithmetic(rng)
        messages = [{"role": "user", "content": question},
                    {"role": "assistant", "content": answer}]
        if rng.random() < 0.5:
            messages.insert(0, {"role": "system", "content": "You are a careful calculator."})
        return {"messages": messages}
    if kind < 0.7:  # two turns about one word
        w = rng.choice(vocabulary)
        return {"messages": [
            {"role": "user", "content": f"Spell '{w}' backwards."},
            {"role": "assistant", "content": w[::-1]},
            {"role": "user", "content": "And in capitals?"},
            {"role": "assistant", "content": w[::-1].upper()}]}
    question, answer = arithmetic(rng)
    return {"prompt": f"Q: {question}\nA:", "completion": f" {answer}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "data-instruct", "records.jsonl"))
    ap.add_argument("--records", type=int, default=1500)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    vocabulary = words()
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w", encoding="utf-8") as f:
        for _ in range(a.records):
            f.write(json.dumps(record(rng, vocabulary)) + "\n")
    print(f"wrote {a.records} records to {a.out}")


if __name__ == "__main__":
    main()
