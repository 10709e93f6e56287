"""The GPT-2 and LLaMA forward passes written directly in PyTorch, from a dict of parameters
named and shaped as in Hugging Face transformers (and in Saturn's checkpoints). The parity test
and the engine benchmark both use it."""
import math

import torch
import torch.nn.functional as F


def gpt2_forward(p, cfg, idx):
    B, T = idx.shape
    C, H = cfg["d_model"], cfg["n_head"]
    eps = cfg["norm_eps"]
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]
    for l in range(cfg["n_layer"]):
        q = f"transformer.h.{l}."
        h = F.layer_norm(x, (C,), p[q + "ln_1.weight"], p[q + "ln_1.bias"], eps)
        qkv = h @ p[q + "attn.c_attn.weight"] + p[q + "attn.c_attn.bias"]  # Conv1D
        qq, kk, vv = qkv.split(C, dim=2)
        qq = qq.view(B, T, H, C // H).transpose(1, 2)
        kk = kk.view(B, T, H, C // H).transpose(1, 2)
        vv = vv.view(B, T, H, C // H).transpose(1, 2)
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(C // H)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ vv).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ p[q + "attn.c_proj.weight"] + p[q + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), p[q + "ln_2.weight"], p[q + "ln_2.bias"], eps)
        h = F.gelu(h @ p[q + "mlp.c_fc.weight"] + p[q + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ p[q + "mlp.c_proj.weight"] + p[q + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return x @ p["transformer.wte.weight"].t()


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def llama_forward(p, cfg, idx):
    B, T = idx.shape
    C, H = cfg["d_model"], cfg["n_head"]
    hd = C // H
    eps = cfg["norm_eps"]
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = p["model.embed_tokens.weight"][idx]
    for l in range(cfg["n_layer"]):
        q = f"model.layers.{l}."
        h = rms_norm(x, p[q + "input_layernorm.weight"], eps)
        qq = (h @ p[q + "self_attn.q_proj.weight"].t()).view(B, T, H, hd).transpose(1, 2)
        kk = (h @ p[q + "self_attn.k_proj.weight"].t()).view(B, T, H, hd).transpose(1, 2)
        vv = (h @ p[q + "self_attn.v_proj.weight"].t()).view(B, T, H, hd).transpose(1, 2)
        qq = qq * cos + rotate_half(qq) * sin
        kk = kk * cos + rotate_half(kk) * sin
        att = (qq @ kk.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ vv).transpose(1, 2).contiguous().view(B, T, C)
        x = x + y @ p[q + "self_attn.o_proj.weight"].t()
        h = rms_norm(x, p[q + "post_attention_layernorm.weight"], eps)
        g = F.silu(h @ p[q + "mlp.gate_proj.weight"].t()) * (h @ p[q + "mlp.up_proj.weight"].t())
        x = x + g @ p[q + "mlp.down_proj.weight"].t()
    x = rms_norm(x, p["model.norm.weight"], eps)
    return x @ p["lm_head.weight"].t()


def train_like_saturn(model, loss_of, steps, lr, wd, clip, make_schedule):
    """A reproducible Saturn job's training in PyTorch: AdamW (betas 0.9, 0.95, eps 1e-8; weight
    decay on matrices only), clipping at `clip`, the schedule make_schedule(optimizer) returns.
    loss_of() is the batch's loss (the same batch every step). Returns the loss before training,
    the step losses, the gradient norms before clipping (they check the gradient's scale, which
    AdamW's steps alone would not show) and the loss after training."""
    with torch.no_grad():
        before = float(loss_of())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd},
                             {"params": keep, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.95),
                            eps=1e-8)
    sched = make_schedule(opt)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_of()
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(model.parameters()), clip)))
        opt.step()
        sched.step()
        losses.append(float(loss))
    with torch.no_grad():
        after = float(loss_of())
    return before, losses, norms, after
