#!/usr/bin/env python3
"""Makes the small Hugging Face models examples/finetune.yaml starts from, the way a download
would look: a tokenizer (tokenizer.json, a GPT-2-style byte-level BPE trained with the
`tokenizers` library on the licence texts every Debian system ships) and a GPT-2, a LLaMA, a
Mistral (sliding-window attention) and a Qwen2 (q/k/v biases) model made by `transformers`
itself, briefly pre-trained on that text so that they start from a loss well below a random
model's (no model hub is needed).

Run with the Python that has transformers (scripts/install-deps.sh --tests makes it):
  ~/.cache/saturn/test-venv/bin/python examples/make_hf_model.py
It writes examples/models/tiny-{gpt2,llama,mistral,qwen2} (config.json,
model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json with a chat
template), then prints
the `saturn data prepare --tokenizer` command that makes the example's data with the same
tokenizer.
"""
import argparse
import glob
import os

import tokenizers
import torch
import transformers
from tokenizers import decoders, models, pre_tokenizers, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
TEXTS = "/usr/share/common-licenses"


def train_tokenizer(files, vocab_size):
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
        unk_token="<|endoftext|>", model_max_length=128,
        clean_up_tokenization_spaces=False, chat_template=CHAT_TEMPLATE)


# A chat template in plain text (no tokens beyond the vocabulary's), for the instruction
# example (examples/instruct-sweep.yaml): each turn is "### role:", the content, a blank line.
CHAT_TEMPLATE = ("{% for m in messages %}### {{ m['role'] }}:\n{{ m['content'] }}\n\n"
                 "{% endfor %}{% if add_generation_prompt %}### assistant:\n{% endif %}")


def pretrain(model, ids, steps, seq_len, batch, lr, seed):
    """A few AdamW steps on random windows of the text (the models' "pre-training")."""
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        starts = torch.randint(0, len(ids) - seq_len - 1, (batch,), generator=g)
        x = torch.stack([ids[s:s + seq_len] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    return loss.item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab-size", type=int, default=512)
    ap.add_argument("--pretrain-steps", type=int, default=50,
                    help="AdamW steps on the licence texts (0: random weights)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    files = sorted(f for f in glob.glob(os.path.join(TEXTS, "*")) if os.path.isfile(f))
    tokenizer = train_tokenizer(files, a.vocab_size)
    V = len(tokenizer)
    eos = tokenizer.eos_token_id
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=V, n_positions=128, n_embd=128, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eos, eos_token_id=eos))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=V, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        rope_theta=50000.0, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos))
    # A window of 32 keys, half the example's seq_len of 64, so that it matters.
    mistral = transformers.MistralForCausalLM(transformers.MistralConfig(
        vocab_size=V, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        sliding_window=32, bos_token_id=eos, eos_token_id=eos))
    qwen2 = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=V, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos))
    # Pre-training text: the files encoded one by one, as `saturn data prepare` does, minus the
    # last 10% of the ids, so that the example's val split (prepare's default) stays unseen.
    ids = []
    for f in files:
        with open(f, encoding="utf-8", newline="") as fh:
            ids += tokenizer.backend_tokenizer.encode(fh.read()).ids
    ids = torch.tensor(ids[: int(len(ids) * 0.9)], dtype=torch.long)
    for name, model in (("tiny-gpt2", gpt2), ("tiny-llama", llama), ("tiny-mistral", mistral),
                        ("tiny-qwen2", qwen2)):
        loss = pretrain(model, ids, a.pretrain_steps, 64, 8, 3e-3, a.seed) \
            if a.pretrain_steps > 0 else float("nan")
        out = os.path.join(a.out, name)
        model.save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        n = sum(p.numel() for p in model.parameters())
        print(f"wrote {out} ({type(model).__name__}, {n / 1e6:.2f}M parameters, vocabulary {V}, "
              f"pre-training loss {loss:.3f} after {a.pretrain_steps} steps)")
    print("next: saturn data prepare --tokenizer "
          f"{os.path.relpath(os.path.join(a.out, 'tiny-gpt2'))} --input {TEXTS}/* "
          f"--output {os.path.relpath(os.path.join(HERE, 'data-tiny'))}")


if __name__ == "__main__":
    main()
