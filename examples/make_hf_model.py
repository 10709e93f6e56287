#!/usr/bin/env python3
"""Makes the small Hugging Face models examples/finetune.yaml starts from: a GPT-2 and a LLaMA
with random weights, made and saved by `transformers` itself (no model hub is needed), with the
byte tokenizer's vocabulary (256) so that `saturn data prepare`'s byte data fits them.

Run with the Python that has transformers (scripts/install-deps.sh --tests makes it):
  ~/.cache/saturn/test-venv/bin/python examples/make_hf_model.py
It writes examples/models/tiny-gpt2 and examples/models/tiny-llama (config.json,
model.safetensors, generation_config.json).
"""
import argparse
import os

import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "models"))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=256, n_positions=128, n_embd=128, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=256, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
        rope_theta=10000.0, tie_word_embeddings=False))
    for name, model in (("tiny-gpt2", gpt2), ("tiny-llama", llama)):
        out = os.path.join(a.out, name)
        model.save_pretrained(out, safe_serialization=True)
        n = sum(p.numel() for p in model.parameters())
        print(f"wrote {out} ({type(model).__name__}, {n / 1e6:.2f}M parameters)")


if __name__ == "__main__":
    main()
