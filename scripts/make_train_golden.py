#!/usr/bin/env python3
"""Writes the golden files of the training test (test/golden/train_gpt2*).

Regenerate with the Debian PyTorch (apt-get install python3-torch), from the
repository root:

    /usr/bin/python3 scripts/make_train_golden.py

It writes a tiny GPT-2 as an llm.c checkpoint, a token shard, a training
config for `llmc run`, and the per-step losses of training that model with
torch.optim.AdamW on that data under the same hyper-parameters:

  train_gpt2_model.bin    llm.c checkpoint (header magic 20240326, version 3,
                          float32, vocabulary padded to a multiple of 128)
  train_gpt2_tokens.bin   llm.c token shard (magic 20240520, version 1,
                          uint16 tokens): exactly one global batch of
                          windows, so every step trains on all of it and the
                          loader's shuffling only reorders rows
  ../tools/Inputs/train-gpt2-golden.yaml
                          the `llmc run` config (init_from the checkpoint,
                          data the shard, the optimizer and schedule below);
                          not in test/golden/, where every .yaml is a
                          forward-pass golden case
  train_gpt2_losses.json  per step: the loss before the update (the mean
                          over micro-batches), the gradient norm before
                          clipping and the learning rate

The reference runs in float64 (from the float32 weights of the checkpoint),
so the comparison measures llmc's float32 error alone; the test states its
tolerances. The model is written from GPT-2's definition, not from llmc's
code: LayerNorm, causal attention with the fused QKV projection split
q|k|v and heads contiguous, tanh GELU, tied embeddings. The optimizer is
torch.optim.AdamW with weight decay on the 2-D tensors only (embeddings
and matrices), torch.nn.utils.clip_grad_norm_ and the learning rate set
per step from the schedule of frontend/Schedule.h (linear warmup from
lr/warmup, then cosine to min_lr at max_steps). Gradient accumulation: the
global batch of 4 sequences runs as 2 micro-batches of 2, each loss scaled
by 1/2, as llmc does.

The output is deterministic: running twice gives byte-identical files.
"""

import json
import math
import os
import struct

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test",
                   "golden")

N_LAYER, N_HEAD, N_EMBD, SEQ_LEN, VOCAB = 2, 2, 32, 16, 256
BATCH, MICRO_BATCH = 4, 2
STEPS = 6
LR, MIN_LR, WARMUP = 1e-2, 1e-3, 2
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0
SEED = 20240326
TEXT = ("Once upon a time, a small robot named Pip loved to paint the sky at "
        "dusk.")


def padded_vocab(v):
    return (v + 127) // 128 * 128


def param_specs():
    """llm.c's order: wte, wpe, each per-layer kind over all layers, ln_f."""
    c = N_EMBD
    specs = [("wte", (VOCAB, c)), ("wpe", (SEQ_LEN, c))]
    kinds = [("ln_1.weight", (c,)), ("ln_1.bias", (c,)),
             ("attn.c_attn.weight", (3 * c, c)), ("attn.c_attn.bias", (3 * c,)),
             ("attn.c_proj.weight", (c, c)), ("attn.c_proj.bias", (c,)),
             ("ln_2.weight", (c,)), ("ln_2.bias", (c,)),
             ("mlp.c_fc.weight", (4 * c, c)), ("mlp.c_fc.bias", (4 * c,)),
             ("mlp.c_proj.weight", (c, 4 * c)), ("mlp.c_proj.bias", (c,))]
    for kind, shape in kinds:
        for layer in range(N_LAYER):
            specs.append((f"h.{layer}.{kind}", shape))
    specs += [("ln_f.weight", (c,)), ("ln_f.bias", (c,))]
    return specs


def init_params():
    """GPT-2's scheme, with biases and norm parameters perturbed so that
    their gradients and updates are exercised too. float32 values."""
    g = torch.Generator().manual_seed(SEED)
    params = {}
    for name, shape in param_specs():
        if name.endswith(".bias"):
            t = 0.02 * torch.randn(shape, generator=g)
        elif len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            std = 0.02
            if name.endswith("c_proj.weight"):
                std /= math.sqrt(2 * N_LAYER)
            t = std * torch.randn(shape, generator=g)
        params[name] = t.to(torch.float32)
    return params


def forward(p, tokens, targets):
    b, t = tokens.shape
    c, nh = N_EMBD, N_HEAD
    hd = c // nh
    x = p["wte"][tokens] + p["wpe"][:t]
    mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for l in range(N_LAYER):
        pre = f"h.{l}."
        h = F.layer_norm(x, (c,), p[pre + "ln_1.weight"], p[pre + "ln_1.bias"],
                         1e-5)
        qkv = h @ p[pre + "attn.c_attn.weight"].T + p[pre + "attn.c_attn.bias"]
        q, k, v = qkv.split(c, dim=-1)
        q, k, v = (z.view(b, t, nh, hd).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        scores = scores.masked_fill(~mask, float("-inf"))
        y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, c)
        x = x + y @ p[pre + "attn.c_proj.weight"].T + p[pre + "attn.c_proj.bias"]
        h = F.layer_norm(x, (c,), p[pre + "ln_2.weight"], p[pre + "ln_2.bias"],
                         1e-5)
        h = F.gelu(h @ p[pre + "mlp.c_fc.weight"].T + p[pre + "mlp.c_fc.bias"],
                   approximate="tanh")
        x = x + h @ p[pre + "mlp.c_proj.weight"].T + p[pre + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (c,), p["ln_f.weight"], p["ln_f.bias"], 1e-5)
    logits = x @ p["wte"].T
    return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))


def lr_at(step):
    """frontend/Schedule.h, cosine: warmup (step+1)/warmup, then cosine."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    if step >= STEPS:
        return MIN_LR
    progress = (step - WARMUP) / (STEPS - WARMUP)
    return MIN_LR + (LR - MIN_LR) * 0.5 * (1 + math.cos(math.pi * progress))


def train(params32, tokens):
    ids = torch.tensor(tokens, dtype=torch.long)
    t = SEQ_LEN
    # Window w is tokens[w*T : w*T + T + 1] (frontend/Dataset.h).
    x = torch.stack([ids[w * t:w * t + t] for w in range(BATCH)])
    y = torch.stack([ids[w * t + 1:w * t + t + 1] for w in range(BATCH)])
    p = {n: v.to(torch.float64).clone().requires_grad_(True)
         for n, v in params32.items()}
    decay = [v for v in p.values() if v.dim() >= 2]
    no_decay = [v for v in p.values() if v.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS)
    micro_batches = BATCH // MICRO_BATCH
    steps = []
    for step in range(STEPS):
        lr = lr_at(step)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        loss_sum = 0.0
        for m in range(micro_batches):
            rows = slice(m * MICRO_BATCH, (m + 1) * MICRO_BATCH)
            loss = forward(p, x[rows], y[rows])
            (loss / micro_batches).backward()
            loss_sum += loss.item()
        norm = torch.nn.utils.clip_grad_norm_(list(p.values()), GRAD_CLIP)
        opt.step()
        steps.append({"step": step, "loss": loss_sum / micro_batches,
                      "grad_norm": norm.item(), "lr": lr})
    return steps


def write_checkpoint(path, params):
    header = [0] * 256
    header[:8] = [20240326, 3, SEQ_LEN, VOCAB, N_LAYER, N_HEAD, N_EMBD,
                  padded_vocab(VOCAB)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        for name, _ in param_specs():
            t = params[name]
            if name == "wte":
                pad = torch.zeros(padded_vocab(VOCAB) - VOCAB, N_EMBD)
                t = torch.cat([t, pad])
            f.write(t.contiguous().numpy().astype("<f4").tobytes())


def write_shard(path, tokens):
    header = [0] * 256
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))


CONFIG = f"""\
# Written by scripts/make_train_golden.py (do not edit): the `llmc run`
# config whose losses test/golden/train_gpt2_losses.json holds, computed
# by PyTorch (float64) with torch.optim.AdamW on the same model and data.
model:
  name: train_gpt2
  n_layer: {N_LAYER}
  n_head: {N_HEAD}
  n_embd: {N_EMBD}
  seq_len: {SEQ_LEN}
  vocab_size: {VOCAB}
init_from: ../../golden/train_gpt2_model.bin
optimizer:
  name: adamw
  lr: {LR}
  betas: [{BETAS[0]}, {BETAS[1]}]
  eps: {EPS}
  weight_decay: {WEIGHT_DECAY}
  grad_clip: {GRAD_CLIP}
schedule:
  name: cosine
  warmup_steps: {WARMUP}
  min_lr: {MIN_LR}
global_batch_size: {BATCH}
micro_batch_size: {MICRO_BATCH}
seq_len: {SEQ_LEN}
max_steps: {STEPS}
data:
  train: [../../golden/train_gpt2_tokens.bin]
  val_fraction: 0
  tokenizer: byte
log_interval: 1
eval_interval: 0
eval_steps: 0
sample_tokens: 0
seed: 1
"""


def main():
    torch.set_num_threads(1)
    tokens = list(TEXT.encode())[:BATCH * SEQ_LEN + 1]
    assert len(tokens) == BATCH * SEQ_LEN + 1, len(tokens)
    params = init_params()
    steps = train(params, tokens)
    write_checkpoint(os.path.join(OUT, "train_gpt2_model.bin"), params)
    write_shard(os.path.join(OUT, "train_gpt2_tokens.bin"), tokens)
    with open(os.path.join(OUT, "..", "tools", "Inputs",
                           "train-gpt2-golden.yaml"), "w") as f:
        f.write(CONFIG)
    golden = {
        "generator": "scripts/make_train_golden.py, torch " + torch.__version__
                     + ", float64",
        "steps": steps,
    }
    with open(os.path.join(OUT, "train_gpt2_losses.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    for s in steps:
        print(f"step {s['step']}: loss {s['loss']:.9f} grad_norm "
              f"{s['grad_norm']:.6f} lr {s['lr']:.6g}")


if __name__ == "__main__":
    main()
