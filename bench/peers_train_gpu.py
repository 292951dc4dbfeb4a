#!/usr/bin/env python3
"""GPT-2's training step on one GPU in PyTorch with torch.compile: the peer
that scripts/gpu-check.sh times next to llmc-cuda-run in the same run.

The model is the one llmc builds for the `gpt2` and `gpt2-medium` presets
(learned positions, pre-norm blocks with biases, LayerNorm eps 1e-5, tanh
GELU, an MLP of 4C, the classifier tied to the token embedding, mean
cross-entropy); the step is llmc's: forward, backward, clipping of the
global norm at 1.0, AdamW (beta 0.9/0.95, eps 1e-8, weight decay 0.1 on
matrices). As practitioners run it: bf16 autocast, flash attention
(scaled_dot_product_attention), fused AdamW, every transformer block
compiled by torch.compile (one graph reused by all blocks, which keeps
compilation short) and the embedding, final norm and loss compiled too.

  peers_train_gpu.py --model gpt2|gpt2-medium|tiny --batch B --seq T
                     [--steps N] [--warmup N]

Prints one JSON line: framework, GPU, ms_per_step (median of the timed
steps, CUDA events around each), tokens_per_s, compile_s (the first step),
peak_allocated_bytes and peak_reserved_bytes; or `skipped: <why>` and exit
status 0 when torch or a GPU is missing.
"""
import argparse
import json
import statistics
import sys
import time

MODELS = {
    # vocab, layers, heads, width, positions
    "gpt2": (50257, 12, 12, 768, 1024),
    "gpt2-medium": (50257, 24, 16, 1024, 1024),
    "tiny": (256, 2, 4, 64, 64),
}
BETAS, EPS, WEIGHT_DECAY, CLIP, LR = (0.9, 0.95), 1e-8, 0.1, 1.0, 1e-4


def build(torch, vocab, layers, heads, width, positions):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv = nn.Linear(width, 3 * width)
            self.proj = nn.Linear(width, width)
            self.fc = nn.Linear(width, 4 * width)
            self.out = nn.Linear(4 * width, width)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2)
                       for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
            return x + self.out(h)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(positions, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.lnf = nn.LayerNorm(width)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, std=0.02)

        def embed(self, tokens):
            T = tokens.shape[1]
            return self.wte(tokens) + self.wpe.weight[:T]

        def head_loss(self, x, targets):
            logits = F.linear(self.lnf(x), self.wte.weight)
            return F.cross_entropy(logits.float().view(-1, vocab),
                                   targets.view(-1))

    return Gpt()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    try:
        import torch
    except ImportError as error:
        print(f"skipped: {error} ({sys.executable})")
        return 0
    if not torch.cuda.is_available():
        print(f"skipped: torch {torch.__version__} sees no GPU")
        return 0
    torch.manual_seed(0)
    vocab, layers, heads, width, positions = MODELS[args.model]
    model = build(torch, vocab, layers, heads, width, positions).cuda()
    for block in model.blocks:
        block.compile()
    embed = torch.compile(model.embed)
    head_loss = torch.compile(model.head_loss)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(
        [dict(params=[p for p in params if p.dim() >= 2],
              weight_decay=WEIGHT_DECAY),
         dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)],
        lr=LR, betas=BETAS, eps=EPS, fused=True)
    tokens = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")
    targets = torch.randint(0, vocab, (args.batch, args.seq), device="cuda")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = embed(tokens)
            for block in model.blocks:
                x = block(x)
            loss = head_loss(x, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP, foreach=True)
        optimizer.step()
        return loss

    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    for _ in range(args.warmup - 1):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        begin = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        begin.record()
        loss = step()
        end.record()
        times.append((begin, end))
    torch.cuda.synchronize()
    ms = statistics.median(b.elapsed_time(e) for b, e in times)
    print(json.dumps({
        "framework": f"torch {torch.__version__}",
        "gpu": torch.cuda.get_device_name(),
        "model": args.model, "batch": args.batch, "seq": args.seq,
        "ms_per_step": ms, "tokens_per_s": args.batch * args.seq / ms * 1e3,
        "compile_s": compile_s, "loss": float(loss),
        "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
        "peak_reserved_bytes": torch.cuda.max_memory_reserved()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
