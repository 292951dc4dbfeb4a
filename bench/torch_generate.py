#!/usr/bin/env python3
"""PyTorch's side of bench-export: GPT-2 generation with a KV cache.

Run with the Debian PyTorch (apt-get install python3-torch):

    /usr/bin/python3 bench/torch_generate.py make-weights W.safetensors \
        [--layers 12 --heads 12 --embd 768 --vocab 50257 --context 1024]
    /usr/bin/python3 bench/torch_generate.py run W.safetensors \
        [--batch 1] [--prompt-tokens 64] [--new-tokens 64] [--threads 2]
        [--dtype float32|bfloat16]

make-weights writes random GPT-2 weights (normal, std 0.02; biases and norm
shifts zero, norm scales one) under Hugging Face GPT-2 names and layouts
(Conv1D weights [in, out], the hub's model.safetensors naming), the file
`llmc export --weights` and this script both read, so both generate from
the same numbers.

run builds GPT-2 from the file with plain torch operations (no transformers
package: Debian does not ship it), feeds a prompt of --prompt-tokens token
ids in one forward pass (prefill, filling a key/value cache per layer), then
--new-tokens decode steps of one token per sequence each, reading the cache
(greedy; the tokens do not change the cost). It prints one line per phase:

    torch prefill: B x P tokens in S s = N tokens/s
    torch decode:  B x N tokens in S s = N tokens/s (per step X ms)

and the torch version, thread count and dtype. The cache is preallocated to
prompt + new tokens, as llmc's is to its maximum context, and every timed
region runs under torch.inference_mode().
"""

import argparse
import json
import struct
import sys
import time

import numpy as np
import torch


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        base = 8 + size
        tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if info["dtype"] != "F32":
                sys.exit(f"{path}: tensor {name} is {info['dtype']}, "
                         "this script reads F32 only")
            begin, end = info["data_offsets"]
            f.seek(base + begin)
            array = np.frombuffer(f.read(end - begin), dtype=np.float32)
            tensors[name] = torch.from_numpy(array.copy()).reshape(
                info["shape"])
    return tensors


def make_weights(args):
    rng = np.random.default_rng(args.seed)
    C, V, T = args.embd, args.vocab, args.context

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * 0.02

    t = {"wte.weight": normal(V, C), "wpe.weight": normal(T, C)}
    for i in range(args.layers):
        p = f"h.{i}."
        t[p + "ln_1.weight"] = np.ones(C, np.float32)
        t[p + "ln_1.bias"] = np.zeros(C, np.float32)
        t[p + "attn.c_attn.weight"] = normal(C, 3 * C)
        t[p + "attn.c_attn.bias"] = np.zeros(3 * C, np.float32)
        t[p + "attn.c_proj.weight"] = normal(C, C)
        t[p + "attn.c_proj.bias"] = np.zeros(C, np.float32)
        t[p + "ln_2.weight"] = np.ones(C, np.float32)
        t[p + "ln_2.bias"] = np.zeros(C, np.float32)
        t[p + "mlp.c_fc.weight"] = normal(C, 4 * C)
        t[p + "mlp.c_fc.bias"] = np.zeros(4 * C, np.float32)
        t[p + "mlp.c_proj.weight"] = normal(4 * C, C)
        t[p + "mlp.c_proj.bias"] = np.zeros(C, np.float32)
    t["ln_f.weight"] = np.ones(C, np.float32)
    t["ln_f.bias"] = np.zeros(C, np.float32)
    write_safetensors(args.file, t)
    print(f"wrote {args.file}: GPT-2 {args.layers} layers, {args.heads} "
          f"heads, width {C}, vocabulary {V}, context {T}")


class Gpt2:
    """GPT-2 (pre-norm, tanh GELU, tied classifier) over a KV cache."""

    def __init__(self, w, heads, dtype):
        self.w = {k: v.to(dtype) for k, v in w.items()}
        self.heads = heads
        self.layers = 1 + max(int(k.split(".")[1]) for k in w
                              if k.startswith("h."))

    def forward(self, tokens, start, cache):
        """tokens [B, P] at positions start.. start+P; returns the last
        position's logits [B, V] and writes keys/values into `cache`."""
        w, H = self.w, self.heads
        B, P = tokens.shape
        x = w["wte.weight"][tokens] + w["wpe.weight"][start:start + P]
        C = x.shape[-1]
        D = C // H
        end = start + P
        for i in range(self.layers):
            p = f"h.{i}."
            h = torch.nn.functional.layer_norm(
                x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"])
            qkv = torch.addmm(w[p + "attn.c_attn.bias"], h.reshape(B * P, C),
                              w[p + "attn.c_attn.weight"]).view(B, P, 3, H, D)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [B, H, P, D]
            keys, values = cache[i]
            keys[:, :, start:end] = k
            values[:, :, start:end] = v
            att = attend(q, keys[:, :, :end], values[:, :, :end], start)
            att = att.transpose(1, 2).reshape(B * P, C)
            x = x + torch.addmm(w[p + "attn.c_proj.bias"], att,
                                w[p + "attn.c_proj.weight"]).view(B, P, C)
            h = torch.nn.functional.layer_norm(
                x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"])
            h = torch.nn.functional.gelu(
                torch.addmm(w[p + "mlp.c_fc.bias"], h.reshape(B * P, C),
                            w[p + "mlp.c_fc.weight"]), approximate="tanh")
            x = x + torch.addmm(w[p + "mlp.c_proj.bias"], h,
                                w[p + "mlp.c_proj.weight"]).view(B, P, C)
        last = torch.nn.functional.layer_norm(
            x[:, -1], (C,), w["ln_f.weight"], w["ln_f.bias"])
        return last @ w["wte.weight"].t()


def causal_mask(P, start, end, dtype):
    rows = torch.arange(start, start + P).unsqueeze(1)
    cols = torch.arange(end).unsqueeze(0)
    return torch.zeros(P, end, dtype=dtype).masked_fill(cols > rows,
                                                        float("-inf"))


def attend(q, k, v, start):
    """Causal attention of queries at start.. over keys 0..end."""
    mask = causal_mask(q.shape[2], start, k.shape[2], q.dtype)
    if hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        return torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=mask)
    # torch 1.13 (Debian's) has no fused attention: the same, eagerly.
    scores = (q @ k.transpose(-1, -2)) / (q.shape[-1] ** 0.5)
    return torch.softmax(scores + mask, dim=-1) @ v


def run(args):
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    model = Gpt2(read_safetensors(args.file), args.heads, dtype)
    B, P, N = args.batch, args.prompt_tokens, args.new_tokens
    C = model.w["wte.weight"].shape[1]
    V = model.w["wte.weight"].shape[0]
    D = C // args.heads
    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(0, V, (B, P), generator=generator)

    def fresh_cache():
        return [(torch.zeros(B, args.heads, P + N, D, dtype=dtype),
                 torch.zeros(B, args.heads, P + N, D, dtype=dtype))
                for _ in range(model.layers)]

    with torch.inference_mode():
        model.forward(prompt[:, :8], 0, fresh_cache())  # warm-up
        best_prefill, best_decode = float("inf"), float("inf")
        for _ in range(args.repeats):
            cache = fresh_cache()
            t0 = time.perf_counter()
            logits = model.forward(prompt, 0, cache)
            t1 = time.perf_counter()
            token = logits.argmax(-1, keepdim=True)
            for step in range(N):
                logits = model.forward(token, P + step, cache)
                token = logits.argmax(-1, keepdim=True)
            t2 = time.perf_counter()
            best_prefill = min(best_prefill, t1 - t0)
            best_decode = min(best_decode, t2 - t1)
    print(f"torch {torch.__version__}, {args.threads} threads, {args.dtype}, "
          f"{model.layers} layers, width {C}, vocabulary {V}")
    print(f"torch prefill: {B} x {P} tokens in {best_prefill:.3f} s = "
          f"{B * P / best_prefill:.1f} tokens/s")
    print(f"torch decode:  {B} x {N} tokens in {best_decode:.3f} s = "
          f"{B * N / best_decode:.1f} tokens/s "
          f"(per step {1000 * best_decode / N:.2f} ms)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("make-weights")
    make.add_argument("file")
    make.add_argument("--layers", type=int, default=12)
    make.add_argument("--heads", type=int, default=12)
    make.add_argument("--embd", type=int, default=768)
    make.add_argument("--vocab", type=int, default=50257)
    make.add_argument("--context", type=int, default=1024)
    make.add_argument("--seed", type=int, default=1)
    bench = sub.add_parser("run")
    bench.add_argument("file")
    bench.add_argument("--heads", type=int, default=12)
    bench.add_argument("--batch", type=int, default=1)
    bench.add_argument("--prompt-tokens", type=int, default=64)
    bench.add_argument("--new-tokens", type=int, default=64)
    bench.add_argument("--threads", type=int, default=2)
    bench.add_argument("--repeats", type=int, default=3)
    bench.add_argument("--seed", type=int, default=1)
    bench.add_argument("--dtype", default="float32",
                       choices=["float32", "bfloat16"])
    args = parser.parse_args()
    make_weights(args) if args.command == "make-weights" else run(args)


if __name__ == "__main__":
    main()
