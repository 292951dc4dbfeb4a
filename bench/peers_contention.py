#!/usr/bin/env python3
"""PyTorch's side of bench/contention.sh: the tiny model's decode and
training step, and a two-process data-parallel run, timed.

The model is examples/tiny.yaml's GPT (vocabulary 256, 2 layers, 4 heads,
width 64, MLP 256, 64 positions, learned positions, pre-norm with biases,
tanh GELU, tied classifier), built from plain torch operations with weights
N(0, 0.02): the values do not change the time.

  peers_contention.py decode [--tokens N] [--threads T]
  peers_contention.py train  [--steps N] [--threads T]
  peers_contention.py ddp    [--steps N] [--threads T] [--ranks R]

decode: batch 1 with a key/value cache of the 64 positions, one token a
step, the cache started again from one token when it fills (llmc's exported
binary refeeds half of its text instead); prints `torch decode: N tokens in
S s = X tokens/s`. train: train-tiny's step (32 sequences of 64 tokens,
forward, backward, clipping at 1.0, AdamW) N times; prints `torch train: N
steps in S s`. ddp: R processes (torch.distributed, gloo, on this machine)
each with T threads and 32 / R sequences, gradients all-reduced by
DistributedDataParallel; prints `torch ddp: R ranks x T threads, N steps in
S s`. Times are the whole N tokens or steps after one warm-up, not a best
of: on a busy machine the total is what a user waits for.
"""
import argparse
import math
import os
import sys
import time

VOCAB, LAYERS, HEADS, WIDTH, POSITIONS, HIDDEN = 256, 2, 4, 64, 64, 256
BATCH, SEQ = 32, 64


def build(torch, seed=0):
    g = torch.Generator().manual_seed(seed)

    def normal(*shape):
        return torch.nn.Parameter(torch.randn(*shape, generator=g) * 0.02)

    def const(value, *shape):
        return torch.nn.Parameter(torch.full(shape, float(value)))

    model = torch.nn.ParameterDict({"wte": normal(VOCAB, WIDTH),
                                    "wpe": normal(POSITIONS, WIDTH),
                                    "lnf_w": const(1, WIDTH),
                                    "lnf_b": const(0, WIDTH)})
    for i in range(LAYERS):
        for name, p in dict(ln1_w=const(1, WIDTH), ln1_b=const(0, WIDTH),
                            qkv_w=normal(3 * WIDTH, WIDTH),
                            qkv_b=const(0, 3 * WIDTH),
                            proj_w=normal(WIDTH, WIDTH),
                            proj_b=const(0, WIDTH),
                            ln2_w=const(1, WIDTH), ln2_b=const(0, WIDTH),
                            fc_w=normal(HIDDEN, WIDTH), fc_b=const(0, HIDDEN),
                            out_w=normal(WIDTH, HIDDEN),
                            out_b=const(0, WIDTH)).items():
            model[f"{name}{i}"] = p
    return model


def forward(torch, m, tokens, start=0, cache=None):
    """Logits [B, T, V] of tokens at positions start..; with a cache (a list
    of [keys, values] per layer, [B, H, POSITIONS, D]) keys and values are
    written into it and attention reads its prefix."""
    F = torch.nn.functional
    B, T = tokens.shape
    D = WIDTH // HEADS
    x = m["wte"][tokens] + m["wpe"][start:start + T]
    for i in range(LAYERS):
        h = F.layer_norm(x, (WIDTH,), m[f"ln1_w{i}"], m[f"ln1_b{i}"], 1e-5)
        q, k, v = F.linear(h, m[f"qkv_w{i}"], m[f"qkv_b{i}"]).split(WIDTH, 2)
        q, k, v = (t.view(B, T, HEADS, D).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            keys, values = cache[i]
            keys[:, :, start:start + T] = k
            values[:, :, start:start + T] = v
            k, v = keys[:, :, :start + T], values[:, :, :start + T]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(B, T, WIDTH)
        x = x + F.linear(y, m[f"proj_w{i}"], m[f"proj_b{i}"])
        h = F.layer_norm(x, (WIDTH,), m[f"ln2_w{i}"], m[f"ln2_b{i}"], 1e-5)
        h = F.gelu(F.linear(h, m[f"fc_w{i}"], m[f"fc_b{i}"]),
                   approximate="tanh")
        x = x + F.linear(h, m[f"out_w{i}"], m[f"out_b{i}"])
    x = F.layer_norm(x, (WIDTH,), m["lnf_w"], m["lnf_b"], 1e-5)
    return F.linear(x, m["wte"])


def decode(args):
    import torch
    torch.set_num_threads(args.threads)
    m = build(torch)
    D = WIDTH // HEADS

    def run(tokens):
        done = 0
        with torch.inference_mode():
            while done < tokens:
                cache = [[torch.zeros(1, HEADS, POSITIONS, D),
                          torch.zeros(1, HEADS, POSITIONS, D)]
                         for _ in range(LAYERS)]
                token = torch.zeros(1, 1, dtype=torch.long)
                for pos in range(min(POSITIONS, tokens - done)):
                    logits = forward(torch, m, token, pos, cache)
                    token = logits[:, -1].argmax(-1, keepdim=True)
                    done += 1

    run(64)  # warm-up
    start = time.perf_counter()
    run(args.tokens)
    seconds = time.perf_counter() - start
    print(f"torch {torch.__version__}, {args.threads} threads")
    print(f"torch decode: {args.tokens} tokens in {seconds:.3f} s = "
          f"{args.tokens / seconds:.1f} tokens/s")


def train_setup(torch, batch, seed=0):
    m = build(torch)
    decay = [p for p in m.values() if p.dim() >= 2]
    no_decay = [p for p in m.values() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [dict(params=decay, weight_decay=0.1),
         dict(params=no_decay, weight_decay=0.0)],
        lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
    targets = torch.randint(0, VOCAB, (batch, SEQ), generator=g)
    return m, optimizer, tokens, targets


def train_steps(torch, model, params, optimizer, tokens, targets, steps):
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=False)
        logits = model(tokens)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, VOCAB),
                                                 targets.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()


def train(args):
    import torch
    torch.set_num_threads(args.threads)
    m, optimizer, tokens, targets = train_setup(torch, BATCH)
    model = lambda t: forward(torch, m, t)
    params = list(m.values())
    train_steps(torch, model, params, optimizer, tokens, targets, 1)
    start = time.perf_counter()
    train_steps(torch, model, params, optimizer, tokens, targets, args.steps)
    seconds = time.perf_counter() - start
    print(f"torch {torch.__version__}, {args.threads} threads")
    print(f"torch train: {args.steps} steps in {seconds:.3f} s")


def ddp_rank(rank, args, store_file):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", init_method=f"file://{store_file}",
                            rank=rank, world_size=args.ranks)

    class Tiny(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, t):
            return forward(torch, self.m, t)

    m, optimizer, tokens, targets = train_setup(torch, BATCH // args.ranks,
                                                seed=rank)
    model = torch.nn.parallel.DistributedDataParallel(Tiny(m))
    params = list(m.values())
    train_steps(torch, model, params, optimizer, tokens, targets, 1)
    dist.barrier()
    start = time.perf_counter()
    train_steps(torch, model, params, optimizer, tokens, targets, args.steps)
    dist.barrier()
    seconds = time.perf_counter() - start
    if rank == 0:
        print(f"torch {torch.__version__}")
        print(f"torch ddp: {args.ranks} ranks x {args.threads} threads, "
              f"{args.steps} steps in {seconds:.3f} s")
    dist.destroy_process_group()


def ddp(args):
    import tempfile
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as work:
        mp.spawn(ddp_rank, args=(args, os.path.join(work, "store")),
                 nprocs=args.ranks)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["decode", "train", "ddp"])
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--ranks", type=int, default=2)
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError as error:
        print(f"skipped: {error}")
        return 0
    dict(decode=decode, train=train, ddp=ddp)[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
