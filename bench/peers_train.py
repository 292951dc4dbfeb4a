#!/usr/bin/env python3
"""The training step of bench-train's models in PyTorch or JAX, timed.

bench-train runs this once per framework so that its table has the peers'
figures from the same sitting. The model is the one llmc builds for the
`gpt2` preset (and bench-train's small variant): learned positions, pre-norm
blocks with biases, LayerNorm eps 1e-5, tanh GELU, an MLP of 4C, the
classifier tied to the token embedding, mean cross-entropy. The step is what
bench-train times for llmc: forward, backward, clipping of the global norm at
1.0 and AdamW (beta 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, none
on biases and norms: llmc's defaults, ir/TrainingDefaults.h). No dropout. Weights are N(0, 0.02), biases zero, norms one:
the values do not change the time.

  peers_train.py --framework torch|jax --model gpt2|small --batch B --seq T
                 [--iterations N] [--threads N]

Prints one line, `peer <framework> <version>: <tokens/s> tokens/s, <ms> ms a
step (best of N), <threads> threads`, or `skipped: <why>` with exit status 0
when the framework cannot be imported (so the caller can print the reason).
"""
import argparse
import math
import os
import sys
import time

MODELS = {
    # vocab, layers, heads, width, positions
    "gpt2": (50257, 12, 12, 768, 1024),
    "small": (256, 4, 4, 256, 256),
}
BETAS, EPS, WEIGHT_DECAY, CLIP, LR = (0.9, 0.95), 1e-8, 0.1, 1.0, 1e-4


def best_of(step, iterations):
    step()  # warm-up: compilation (JAX), allocator, optimizer state
    best = math.inf
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - start)
    return best


def torch_step(args):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    vocab, layers, heads, width, positions = MODELS[args.model]
    g = torch.Generator().manual_seed(0)

    def normal(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).requires_grad_()

    def zeros(*shape):
        return torch.zeros(*shape).requires_grad_()

    def ones(*shape):
        return torch.ones(*shape).requires_grad_()

    wte, wpe = normal(vocab, width), normal(positions, width)
    blocks = []
    for _ in range(layers):
        blocks.append(dict(
            ln1_w=ones(width), ln1_b=zeros(width),
            qkv_w=normal(3 * width, width), qkv_b=zeros(3 * width),
            proj_w=normal(width, width), proj_b=zeros(width),
            ln2_w=ones(width), ln2_b=zeros(width),
            fc_w=normal(4 * width, width), fc_b=zeros(4 * width),
            out_w=normal(width, 4 * width), out_b=zeros(width)))
    lnf_w, lnf_b = ones(width), zeros(width)
    params = [wte, wpe, lnf_w, lnf_b] + [p for b in blocks for p in b.values()]
    groups = [
        dict(params=[p for p in params if p.dim() >= 2],
             weight_decay=WEIGHT_DECAY),
        dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    optimizer = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)

    B, T = args.batch, args.seq
    tokens = torch.randint(0, vocab, (B, T), generator=g)
    targets = torch.randint(0, vocab, (B, T), generator=g)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    hd = width // heads

    def forward():
        x = wte[tokens] + wpe[:T]
        for b in blocks:
            h = F.layer_norm(x, (width,), b["ln1_w"], b["ln1_b"], 1e-5)
            q, k, v = F.linear(h, b["qkv_w"], b["qkv_b"]).split(width, dim=2)
            q, k, v = (t.view(B, T, heads, hd).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B, T, width)
            x = x + F.linear(y, b["proj_w"], b["proj_b"])
            h = F.layer_norm(x, (width,), b["ln2_w"], b["ln2_b"], 1e-5)
            h = F.gelu(F.linear(h, b["fc_w"], b["fc_b"]), approximate="tanh")
            x = x + F.linear(h, b["out_w"], b["out_b"])
        x = F.layer_norm(x, (width,), lnf_w, lnf_b, 1e-5)
        logits = F.linear(x, wte)
        return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    def step():
        optimizer.zero_grad(set_to_none=False)
        forward().backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        optimizer.step()

    return "torch " + torch.__version__, best_of(step, args.iterations)


def jax_step(args):
    import jax
    import jax.numpy as jnp

    vocab, layers, heads, width, positions = MODELS[args.model]
    key = jax.random.PRNGKey(0)

    def normal(*shape):
        nonlocal key
        key, sub = jax.random.split(key)
        return 0.02 * jax.random.normal(sub, shape, jnp.float32)

    zeros, ones = jnp.zeros, jnp.ones
    params = dict(
        wte=normal(vocab, width), wpe=normal(positions, width),
        lnf_w=ones(width), lnf_b=zeros(width),
        blocks=[dict(
            ln1_w=ones(width), ln1_b=zeros(width),
            qkv_w=normal(3 * width, width), qkv_b=zeros(3 * width),
            proj_w=normal(width, width), proj_b=zeros(width),
            ln2_w=ones(width), ln2_b=zeros(width),
            fc_w=normal(4 * width, width), fc_b=zeros(4 * width),
            out_w=normal(width, 4 * width), out_b=zeros(width))
            for _ in range(layers)])
    B, T = args.batch, args.seq
    key, k1, k2 = jax.random.split(key, 3)
    tokens = jax.random.randint(k1, (B, T), 0, vocab)
    targets = jax.random.randint(k2, (B, T), 0, vocab)
    hd = width // heads
    mask = jnp.tril(jnp.ones((T, T), bool))

    def layer_norm(x, w, b):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + 1e-5) * w + b

    def loss_fn(p):
        x = p["wte"][tokens] + p["wpe"][:T]
        for b in p["blocks"]:
            h = layer_norm(x, b["ln1_w"], b["ln1_b"])
            qkv = h @ b["qkv_w"].T + b["qkv_b"]
            q, k, v = (t.reshape(B, T, heads, hd).transpose(0, 2, 1, 3)
                       for t in jnp.split(qkv, 3, axis=-1))
            att = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
            att = jax.nn.softmax(jnp.where(mask, att, -jnp.inf), axis=-1)
            y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, width)
            x = x + y @ b["proj_w"].T + b["proj_b"]
            h = layer_norm(x, b["ln2_w"], b["ln2_b"])
            h = jax.nn.gelu(h @ b["fc_w"].T + b["fc_b"], approximate=True)
            x = x + h @ b["out_w"].T + b["out_b"]
        x = layer_norm(x, p["lnf_w"], p["lnf_b"])
        logp = jax.nn.log_softmax(x @ p["wte"].T, axis=-1)
        return -jnp.take_along_axis(logp, targets[..., None], -1).mean()

    @jax.jit
    def step(p, m, v, t):
        loss, grads = jax.value_and_grad(loss_fn)(p)
        leaves = jax.tree_util.tree_leaves(grads)
        norm = jnp.sqrt(sum(jnp.sum(g * g) for g in leaves))
        scale = jnp.minimum(1.0, CLIP / (norm + 1e-6))
        grads = jax.tree_util.tree_map(lambda g: g * scale, grads)
        m = jax.tree_util.tree_map(
            lambda m, g: BETAS[0] * m + (1 - BETAS[0]) * g, m, grads)
        v = jax.tree_util.tree_map(
            lambda v, g: BETAS[1] * v + (1 - BETAS[1]) * g * g, v, grads)
        c1, c2 = 1 - BETAS[0] ** t, 1 - BETAS[1] ** t
        p = jax.tree_util.tree_map(
            lambda p, m, v: p * (1 - LR * WEIGHT_DECAY * (p.ndim >= 2))
            - LR * (m / c1) / (jnp.sqrt(v / c2) + EPS), p, m, v)
        return p, m, v, loss

    state = [params, jax.tree_util.tree_map(jnp.zeros_like, params),
             jax.tree_util.tree_map(jnp.zeros_like, params), 1]

    def run():
        p, m, v, loss = step(*state)
        loss.block_until_ready()
        state[:] = [p, m, v, state[3] + 1]

    return "jax " + jax.__version__, best_of(run, args.iterations)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--framework", choices=["torch", "jax"], required=True)
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    # Both frameworks get the same cores: XLA's CPU client sizes its pools
    # from the affinity mask, PyTorch from set_num_threads.
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:args.threads])
    try:
        run = torch_step if args.framework == "torch" else jax_step
        version, seconds = run(args)
    except ImportError as error:
        print(f"skipped: {error} ({sys.executable})")
        return 0
    print(f"peer {version}: {args.batch * args.seq / seconds:.0f} tokens/s, "
          f"{1e3 * seconds:.1f} ms a step (best of {args.iterations}), "
          f"{args.threads} threads")
    return 0


if __name__ == "__main__":
    sys.exit(main())
