#!/usr/bin/env python3
"""Writes the golden files of the forward-pass numerics tests (test/golden/).

Regenerate with the Debian PyTorch (apt-get install python3-torch), from the
repository root:

    /usr/bin/python3 scripts/make_golden.py

Each case is three files:

  <case>.yaml         a model config in the format of examples/tiny.yaml; its
                      first line reads "# golden: batch B, seq_len T".
  <case>.safetensors  every parameter under its llmc.param name (F32, shapes
                      as in the IR), "tokens" and "targets" (I32 [B, T]),
                      "logits" (F32 [B, T, V]), "loss" (F32, shape [], like
                      the IR's tensor<f32>) and "loss_f64" (F64 [1]), plus
                      __metadata__ {config, family, batch, seq_len, seed,
                      init_std, generator}, all strings.
  <case>.grads.safetensors
                      "grad.<name>" (F64, the parameter's shape) for every
                      parameter: the gradient of the float64 loss, by
                      autograd through the reference below (the autodiff
                      tests compare @grad_step with it), plus
                      __metadata__ {config, of, loss, generator}.

The reference model below is written from the op semantics of ir/LlmcOps.td
and the structure of frontend/GptBuilder.cpp, not from the C++ code: weights
are drawn in float32 from a seeded torch.Generator, the forward pass runs in
float64 on those float32 values, and logits and loss are rounded to float32
at the end (the loss is also kept in float64).

Checks, all of which fail loudly:
  * the parameter names and shapes written equal those that
    `llmc emit-model <case>.yaml --batch B --seq-len T` declares, and the
    resolved config in its llmc.model attribute equals ours (run by default
    when build/bin/llmc exists; --check-ir makes a missing binary an error);
  * the float64 forward agrees with a second implementation written
    differently (torch.nn.MultiheadAttention, F.layer_norm, complex-number
    RoPE, per-query attention loop, F.cross_entropy);
  * every file written reads back to the same tensors.
The output is deterministic: running twice gives byte-identical files.
--sensitivity prints how much each plausible kernel bug (no causal mask,
interleaved RoPE, erf GELU instead of tanh, ...) moves the golden logits.
"""

import argparse
import collections
import itertools
import json
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# ---------------------------------------------------------------------------
# Model configs
# ---------------------------------------------------------------------------

# The three families: the keys of the YAML format and their values. A case of
# family "mixed" gives all of these keys in its overrides.
FAMILIES = {
    "gpt2": dict(activation="gelu", norm="layernorm", position="learned",
                 tie_embeddings=True, bias=True, norm_eps=1e-5),
    "opt": dict(activation="relu", norm="layernorm", position="learned",
                tie_embeddings=True, bias=True, norm_eps=1e-5),
    "llama": dict(activation="swiglu", norm="rmsnorm", position="rope",
                  tie_embeddings=False, bias=False, norm_eps=1e-6,
                  rope_theta=10000.0),
}

# The golden cases. Widths, head dims, vocab sizes and lengths are chosen not
# to be multiples of 8, so that tiling remainders are exercised. `ffn_hidden`
# is written to the YAML only where given; otherwise the config's default rule
# applies (4 * n_embd, or for swiglu 2/3 of that rounded up to 256).
# `init_std` is the std of the embedding and weight matrices: 0.02 as in
# GPT-2, or about 1/sqrt(n_embd), where pre-activations and attention scores
# are O(1) so that GELU's approximation, the attention scale and RoPE move the
# logits well above float32 noise (see --sensitivity).
Case = collections.namedtuple(
    "Case", "name family n_layer n_head n_embd seq_len vocab_size ffn_hidden "
            "batch T init_std seed overrides")

CASES = [
    # T < seq_len: the learned positions are sliced to the first T rows.
    Case("gpt2_c36_h4_v101_b2_t13", "gpt2", 2, 4, 36, 16, 101, None, 2, 13,
         0.02, 1001, {}),
    Case("gpt2_c44_h4_v131_b1_t7", "gpt2", 2, 4, 44, 7, 131, 100, 1, 7,
         0.15, 1002, {}),
    Case("opt_c33_h3_v101_b3_t13", "opt", 2, 3, 33, 13, 101, None, 3, 13,
         0.02, 2001, {}),
    Case("opt_c45_h5_v75_b1_t7", "opt", 2, 5, 45, 20, 75, 84, 1, 7,
         0.15, 2002, {}),
    Case("llama_c40_h4_v101_b2_t13", "llama", 2, 4, 40, 13, 101, 92, 2, 13,
         0.02, 3001, {}),
    # Default ffn_hidden (256) and a Llama-3 style theta.
    Case("llama_c42_h3_v83_b1_t11", "llama", 2, 3, 42, 32, 83, None, 1, 11,
         0.15, 3002, dict(rope_theta=500000.0)),
    # Combinations the builder allows outside the three families: erf GELU,
    # LayerNorm without bias, RoPE with LayerNorm, untied classifier; and
    # RMSNorm with biased linears and learned positions.
    Case("mixed_geluexact_nobias_rope_b2_t9", "mixed", 2, 2, 28, 9, 61, 52, 2,
         9, 0.18, 4001,
         dict(activation="gelu_exact", norm="layernorm", position="rope",
              tie_embeddings=False, bias=False, norm_eps=1e-5,
              rope_theta=1000.0)),
    Case("mixed_rmsnorm_relu_bias_b3_t5", "mixed", 2, 3, 27, 8, 67, 60, 3, 5,
         0.18, 4002,
         dict(activation="relu", norm="rmsnorm", position="learned",
              tie_embeddings=True, bias=True, norm_eps=1e-4)),
]


def resolve_config(case):
    """The full config of a case, with every default made explicit."""
    cfg = dict(rope_theta=10000.0, dropout=0.0)
    cfg.update(FAMILIES.get(case.family, {}))  # "mixed" sets every key itself
    cfg.update(case.overrides)
    assert all(key in cfg for key in FAMILIES["gpt2"]), case.name
    cfg.update(name=case.name, n_layer=case.n_layer, n_head=case.n_head,
               n_embd=case.n_embd, seq_len=case.seq_len,
               vocab_size=case.vocab_size)
    if case.ffn_hidden is not None:
        cfg["ffn_hidden"] = case.ffn_hidden
    elif cfg["activation"] == "swiglu":
        cfg["ffn_hidden"] = -(-(2 * 4 * case.n_embd // 3) // 256) * 256
    else:
        cfg["ffn_hidden"] = 4 * case.n_embd
    assert cfg["n_embd"] % cfg["n_head"] == 0
    assert 1 <= case.T <= case.seq_len
    return cfg


def format_number(value):
    """Shortest decimal that reads back to `value` (1e-05 -> '1e-05')."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def config_yaml(case, cfg):
    keys = ["name", "n_layer", "n_head", "n_embd", "seq_len", "vocab_size"]
    if case.ffn_hidden is not None:
        keys.append("ffn_hidden")
    keys += ["activation", "norm", "norm_eps", "position"]
    if cfg["position"] == "rope":
        keys.append("rope_theta")
    keys += ["tie_embeddings", "bias"]
    lines = ["# golden: batch %d, seq_len %d" % (case.batch, case.T),
             "# Written by scripts/make_golden.py (%s): the forward pass on "
             "[%d, %d] tokens;" % (case.family, case.batch, case.T),
             "# parameters, tokens, targets, logits and loss in "
             "%s.safetensors." % case.name]
    for key in keys:
        value = cfg[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, float):
            text = format_number(value)
        else:
            text = str(value)
        lines.append("%s: %s" % (key, text))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------
# Parameters: names, shapes and the seeded draw
# ---------------------------------------------------------------------------

def param_specs(cfg):
    """(name, shape) of every parameter, in the order of @forward's arguments."""
    c, f, v = cfg["n_embd"], cfg["ffn_hidden"], cfg["vocab_size"]
    specs = [("wte", [v, c])]
    if cfg["position"] == "learned":
        specs.append(("wpe", [cfg["seq_len"], c]))

    def norm(prefix):
        specs.append((prefix + ".weight", [c]))
        if cfg["norm"] == "layernorm" and cfg["bias"]:
            specs.append((prefix + ".bias", [c]))

    def linear(prefix, n_in, n_out):
        specs.append((prefix + ".weight", [n_out, n_in]))
        if cfg["bias"]:
            specs.append((prefix + ".bias", [n_out]))

    fc_out = 2 * f if cfg["activation"] == "swiglu" else f
    for i in range(cfg["n_layer"]):
        h = "h.%d" % i
        norm(h + ".ln_1")
        linear(h + ".attn.c_attn", c, 3 * c)
        linear(h + ".attn.c_proj", c, c)
        norm(h + ".ln_2")
        linear(h + ".mlp.c_fc", c, fc_out)
        linear(h + ".mlp.c_proj", f, c)
    norm("ln_f")
    if not cfg["tie_embeddings"]:
        specs.append(("lm_head.weight", [v, c]))
    return specs


def is_norm_param(name):
    return re.search(r"(^|\.)ln_(1|2|f)\.", name) is not None


def draw_params(specs, init_std, generator):
    """float32 parameters: matrices N(0, init_std); norm weights 1 + 0.1 N;
    norm biases 0.1 N; linear biases 0.02 N (non-trivial, so bias and weight
    handling bugs show)."""
    params = collections.OrderedDict()
    for name, shape in specs:
        noise = torch.randn(shape, generator=generator, dtype=torch.float32)
        if is_norm_param(name) and name.endswith(".weight"):
            value = 1.0 + 0.1 * noise
        elif is_norm_param(name):
            value = 0.1 * noise
        elif name.endswith(".bias"):
            value = 0.02 * noise
        else:
            value = init_std * noise
        params[name] = value.to(torch.float32).contiguous()
    return params


def draw_ids(vocab_size, batch, seq, generator):
    """tokens and targets, int32 [B, T], with the edge ids 0 and V-1 present."""
    ids = torch.randint(0, vocab_size, (2, batch, seq), generator=generator)
    tokens, targets = ids[0].clone(), ids[1].clone()
    tokens[0, 0], tokens[-1, -1] = vocab_size - 1, 0
    targets[0, 0], targets[-1, -1] = 0, vocab_size - 1
    return tokens.to(torch.int32), targets.to(torch.int32)


def f32(value):
    """A float rounded to float32, as the IR's F32Attr stores it."""
    return struct.unpack("<f", struct.pack("<f", value))[0]


# ---------------------------------------------------------------------------
# The reference forward pass (float64)
# ---------------------------------------------------------------------------

class Reference:
    """The @forward of GptBuilder, written from the op semantics.

    Each component is a method so that --sensitivity can swap one for a
    plausible bug. All tensors are float64; `p` maps llmc.param names to
    float64 tensors.
    """

    def __init__(self, cfg, p):
        self.cfg, self.p = cfg, p
        # epsilon, scale and theta are F32Attrs in the IR.
        self.eps = f32(cfg["norm_eps"])
        self.theta = f32(cfg["rope_theta"])
        self.head_dim = cfg["n_embd"] // cfg["n_head"]
        self.scale = f32(1.0 / math.sqrt(self.head_dim))

    # -- components ---------------------------------------------------------

    def linear(self, x, prefix):
        # llmc.matmul {transpose_b}: x [..., K] times W^T, W [N, K].
        y = torch.matmul(x, self.p[prefix + ".weight"].t())
        if self.cfg["bias"]:
            y = y + self.p[prefix + ".bias"]
        return y

    def layer_norm(self, x, weight, bias):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased
        y = (x - mean) / torch.sqrt(var + self.eps) * weight
        return y + bias if bias is not None else y

    def rms_norm(self, x, weight):
        ms = (x * x).mean(dim=-1, keepdim=True)
        return x / torch.sqrt(ms + self.eps) * weight

    def norm(self, x, prefix):
        w = self.p[prefix + ".weight"]
        if self.cfg["norm"] == "rmsnorm":
            return self.rms_norm(x, w)
        return self.layer_norm(x, w, self.p.get(prefix + ".bias"))

    def rotary_angles(self, seq, dim):
        # angle[t, i] = t * theta^(-2i/D) for i < D/2.
        i = torch.arange(dim // 2, dtype=torch.float64)
        inv_freq = self.theta ** (-2.0 * i / dim)
        t = torch.arange(seq, dtype=torch.float64)
        return t[:, None] * inv_freq[None, :]

    def rotary(self, x):
        # Half-split pairs (x[..., i], x[..., i + D/2]) rotated by angle[t, i].
        seq, dim = x.shape[-2], x.shape[-1]
        angle = self.rotary_angles(seq, dim)
        cos, sin = torch.cos(angle), torch.sin(angle)
        x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def causal_mask(self, seq):
        # Query i sees keys j <= i (Tq = Tk).
        return torch.ones(seq, seq, dtype=torch.bool).tril()

    def attention_core(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        scores = scores.masked_fill(~self.causal_mask(q.shape[-2]),
                                    float("-inf"))
        return torch.matmul(torch.softmax(scores, dim=-1), v)

    def split_qkv(self, qkv):
        c = self.cfg["n_embd"]
        return qkv[..., :c], qkv[..., c:2 * c], qkv[..., 2 * c:]

    def attention(self, x, prefix):
        b, t, c = x.shape
        h, d = self.cfg["n_head"], self.head_dim
        qkv = self.linear(x, prefix + ".c_attn")  # [B, T, 3C]
        q, k, v = (part.reshape(b, t, h, d).transpose(1, 2)
                   for part in self.split_qkv(qkv))  # [B, H, T, D]
        if self.cfg["position"] == "rope":
            q, k = self.rotary(q), self.rotary(k)
        o = self.attention_core(q, k, v)
        o = o.transpose(1, 2).reshape(b, t, c)
        return self.linear(o, prefix + ".c_proj")

    def gelu(self, x, approximate):
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
            return 0.5 * x * (1.0 + torch.tanh(inner))
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))

    def split_gate_up(self, gu):
        f = self.cfg["ffn_hidden"]
        return gu[..., :f], gu[..., f:]

    def mlp(self, x, prefix):
        act = self.cfg["activation"]
        hidden = self.linear(x, prefix + ".c_fc")
        if act == "swiglu":
            gate, up = self.split_gate_up(hidden)
            hidden = gate * torch.sigmoid(gate) * up
        elif act == "gelu":
            hidden = self.gelu(hidden, "tanh")
        elif act == "gelu_exact":
            hidden = self.gelu(hidden, "none")
        elif act == "relu":
            hidden = torch.clamp(hidden, min=0.0)
        else:
            raise ValueError(act)
        return self.linear(hidden, prefix + ".c_proj")

    def positions(self, seq):
        return self.p["wpe"][:seq]  # llmc.slice of the first T rows

    def cross_entropy(self, logits, targets):
        # mean over all positions of logsumexp(logits) - logits[target].
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
        return (lse - picked).mean()

    # -- the model ----------------------------------------------------------

    def forward(self, tokens, targets):
        cfg, p = self.cfg, self.p
        x = p["wte"][tokens.long()]  # [B, T, C]
        if cfg["position"] == "learned":
            x = x + self.positions(tokens.shape[1])
        for i in range(cfg["n_layer"]):
            h = "h.%d" % i
            x = x + self.attention(self.norm(x, h + ".ln_1"), h + ".attn")
            x = x + self.mlp(self.norm(x, h + ".ln_2"), h + ".mlp")
        x = self.norm(x, "ln_f")
        classifier = p["wte"] if cfg["tie_embeddings"] else p["lm_head.weight"]
        logits = torch.matmul(x, classifier.t())
        return logits, self.cross_entropy(logits, targets)


# ---------------------------------------------------------------------------
# A second, differently written forward pass, to check the reference
# ---------------------------------------------------------------------------

def complex_rotary(x, theta):
    """RoPE as a complex product: z = x1 + i x2, z * exp(i angle)."""
    seq, dim = x.shape[-2], x.shape[-1]
    half = dim // 2
    freqs = torch.tensor([theta ** (-(2.0 * j) / dim) for j in range(half)],
                         dtype=torch.float64)
    angle = torch.outer(torch.arange(seq, dtype=torch.float64), freqs)
    rot = torch.polar(torch.ones_like(angle), angle)
    z = torch.complex(x[..., :half], x[..., half:]) * rot
    return torch.cat([z.real, z.imag], dim=-1)


def looped_causal_attention(q, k, v, scale):
    """One query at a time over its visible prefix, softmax by hand."""
    out = torch.zeros_like(q)
    for i in range(q.shape[-2]):
        s = torch.einsum("bhd,bhjd->bhj", q[:, :, i], k[:, :, : i + 1]) * scale
        w = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        w = w / w.sum(dim=-1, keepdim=True)
        out[:, :, i] = torch.einsum("bhj,bhjd->bhd", w, v[:, :, : i + 1])
    return out


def alternative_forward(cfg, p, tokens, targets):
    """torch modules where they exist, other formulations where they don't."""
    c, nh = cfg["n_embd"], cfg["n_head"]
    d = c // nh
    eps, scale = f32(cfg["norm_eps"]), f32(1.0 / math.sqrt(d))
    bsz, seq = tokens.shape
    bias = cfg["bias"]

    def lin(x, prefix):
        return F.linear(x, p[prefix + ".weight"],
                        p[prefix + ".bias"] if bias else None)

    def norm(x, prefix):
        w = p[prefix + ".weight"]
        if cfg["norm"] == "rmsnorm":
            rms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) / math.sqrt(c)
            return w * x * torch.rsqrt(rms ** 2 + eps)
        return F.layer_norm(x, (c,), w, p.get(prefix + ".bias"), eps)

    def attention(x, prefix):
        if cfg["position"] == "learned":
            mha = torch.nn.MultiheadAttention(c, nh, bias=bias, batch_first=True,
                                              dtype=torch.float64)
            mha.eval()
            # MultiheadAttention scales the scores by 1/sqrt(d) itself; the
            # IR's scale is that value rounded to f32. Folding their ratio
            # into the query projection makes the two agree exactly.
            ratio = torch.ones(3 * c, 1, dtype=torch.float64)
            ratio[:c] = scale * math.sqrt(d)
            with torch.no_grad():
                mha.in_proj_weight.copy_(p[prefix + ".c_attn.weight"] * ratio)
                mha.out_proj.weight.copy_(p[prefix + ".c_proj.weight"])
                if bias:
                    mha.in_proj_bias.copy_(p[prefix + ".c_attn.bias"] * ratio[:, 0])
                    mha.out_proj.bias.copy_(p[prefix + ".c_proj.bias"])
            blocked = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)
            out, _ = mha(x, x, x, attn_mask=blocked, need_weights=False)
            return out
        q, k, v = lin(x, prefix + ".c_attn").split(c, dim=-1)
        q, k, v = (t.view(bsz, seq, nh, d).permute(0, 2, 1, 3) for t in (q, k, v))
        theta = f32(cfg["rope_theta"])
        q, k = complex_rotary(q, theta), complex_rotary(k, theta)
        o = looped_causal_attention(q, k, v, scale)
        return lin(o.permute(0, 2, 1, 3).reshape(bsz, seq, c), prefix + ".c_proj")

    def mlp(x, prefix):
        hid = lin(x, prefix + ".c_fc")
        act = cfg["activation"]
        if act == "swiglu":
            gate, up = hid.chunk(2, dim=-1)
            hid = F.silu(gate) * up
        elif act == "gelu":
            hid = F.gelu(hid, approximate="tanh")
        elif act == "gelu_exact":
            hid = F.gelu(hid)
        else:
            hid = F.relu(hid)
        return lin(hid, prefix + ".c_proj")

    x = F.embedding(tokens.long(), p["wte"])
    if cfg["position"] == "learned":
        x = x + F.embedding(torch.arange(seq), p["wpe"])
    for i in range(cfg["n_layer"]):
        h = "h.%d" % i
        x = x + attention(norm(x, h + ".ln_1"), h + ".attn")
        x = x + mlp(norm(x, h + ".ln_2"), h + ".mlp")
    x = norm(x, "ln_f")
    head = p["wte"] if cfg["tie_embeddings"] else p["lm_head.weight"]
    logits = F.linear(x, head)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           targets.reshape(-1).long())
    return logits, loss


# ---------------------------------------------------------------------------
# Plausible kernel bugs, for --sensitivity
# ---------------------------------------------------------------------------

class NoCausalMask(Reference):
    def causal_mask(self, seq):
        return torch.ones(seq, seq, dtype=torch.bool)


class ScaleOneOverD(Reference):
    def __init__(self, cfg, p):
        super().__init__(cfg, p)
        self.scale = 1.0 / self.head_dim


class InterleavedRope(Reference):
    def rotary(self, x):
        angle = self.rotary_angles(x.shape[-2], x.shape[-1])
        cos, sin = torch.cos(angle), torch.sin(angle)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos],
                           dim=-1).flatten(-2)


class InverseRope(Reference):
    def rotary_angles(self, seq, dim):
        return -super().rotary_angles(seq, dim)


class RopeThetaDefault(Reference):
    def __init__(self, cfg, p):
        super().__init__(cfg, p)
        self.theta = 10000.0 if self.theta != 10000.0 else 500000.0


class GeluSwapped(Reference):
    def gelu(self, x, approximate):
        return super().gelu(x, "none" if approximate == "tanh" else "tanh")


class GateUpSwapped(Reference):
    def split_gate_up(self, gu):
        gate, up = super().split_gate_up(gu)
        return up, gate


class QkvOrderKQV(Reference):
    def split_qkv(self, qkv):
        q, k, v = super().split_qkv(qkv)
        return k, q, v


class UnbiasedVariance(Reference):
    def layer_norm(self, x, weight, bias):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).sum(dim=-1, keepdim=True) / (x.shape[-1] - 1)
        y = (x - mean) / torch.sqrt(var + self.eps) * weight
        return y + bias if bias is not None else y


class EpsTimes10(Reference):
    def __init__(self, cfg, p):
        super().__init__(cfg, p)
        self.eps = self.eps * 10


class PositionsOffByOne(Reference):
    def positions(self, seq):
        return self.p["wpe"][1:seq + 1] if seq < self.p["wpe"].shape[0] \
            else torch.roll(self.p["wpe"][:seq], 1, dims=0)


def mutations(cfg):
    """The bugs that apply to a config, by name."""
    out = [("no causal mask", NoCausalMask), ("scale 1/D", ScaleOneOverD),
           ("qkv order k,q,v", QkvOrderKQV), ("eps x10", EpsTimes10)]
    if cfg["position"] == "rope":
        out += [("interleaved rope", InterleavedRope),
                ("inverse rope", InverseRope),
                ("other rope theta", RopeThetaDefault)]
    else:
        out += [("positions off by one", PositionsOffByOne)]
    if cfg["activation"] in ("gelu", "gelu_exact"):
        out += [("other gelu", GeluSwapped)]
    if cfg["activation"] == "swiglu":
        out += [("gate/up swapped", GateUpSwapped)]
    if cfg["norm"] == "layernorm":
        out += [("unbiased variance", UnbiasedVariance)]
    return out


# ---------------------------------------------------------------------------
# safetensors, written and read by hand
# ---------------------------------------------------------------------------

DTYPES = {torch.float32: ("F32", "<f4"), torch.float64: ("F64", "<f8"),
          torch.int32: ("I32", "<i4")}
NUMPY_OF = {"F32": "<f4", "F64": "<f8", "I32": "<i4"}


def write_safetensors(path, tensors, metadata):
    """tensors: ordered (name, tensor). The data are laid out in that order
    with no gaps; 8-byte tensors should come first so that every tensor is
    aligned to its element size (the data start is 8-byte aligned)."""
    header = collections.OrderedDict()
    header["__metadata__"] = collections.OrderedDict(
        (k, str(v)) for k, v in metadata.items())
    blobs, offset = [], 0
    for name, tensor in tensors:
        dtype, np_dtype = DTYPES[tensor.dtype]
        data = tensor.contiguous().numpy().astype(np_dtype).tobytes()
        header[name] = collections.OrderedDict(
            [("dtype", dtype), ("shape", list(tensor.shape)),
             ("data_offsets", [offset, offset + len(data)])])
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # pad with spaces to 8 bytes
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n].decode("utf-8"),
                        object_pairs_hook=collections.OrderedDict)
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    tensors, covered = collections.OrderedDict(), 0
    for name, info in sorted(header.items(),
                             key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = info["data_offsets"]
        if begin != covered:
            raise RuntimeError("%s: gap or overlap before %s" % (path, name))
        array = np.frombuffer(data[begin:end], dtype=NUMPY_OF[info["dtype"]])
        tensors[name] = torch.from_numpy(array.copy()).reshape(info["shape"])
        covered = end
    if covered != len(data):
        raise RuntimeError("%s: %d trailing bytes" % (path, len(data) - covered))
    return tensors, metadata


# ---------------------------------------------------------------------------
# Checking against the IR that llmc builds
# ---------------------------------------------------------------------------

ARG_RE = re.compile(r"%arg\d+: tensor<([^>]*)> \{llmc\.(param|input) = \"([^\"]+)\"\}")


def parse_shape(text):
    *dims, elem = text.split("x")
    return [int(d) for d in dims], elem


def check_ir(llmc, yaml_path, case, cfg, specs):
    cmd = [llmc, "emit-model", yaml_path, "--batch", str(case.batch),
           "--seq-len", str(case.T)]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if proc.returncode != 0:
        fail("%s failed:\n%s" % (" ".join(cmd), proc.stderr))
    ir = proc.stdout
    params, inputs = [], {}
    for shape_text, kind, name in ARG_RE.findall(ir):
        shape, elem = parse_shape(shape_text)
        if kind == "param":
            if elem != "f32":
                fail("%s: parameter %s is %s, expected f32" % (case.name, name, elem))
            params.append((name, shape))
        else:
            inputs[name] = (shape, elem)
    ours = [(name, list(shape)) for name, shape in specs]
    if params != ours:
        diffs = ["  #%d ours %s, IR %s" % (i, a, b) for i, (a, b) in enumerate(
            itertools.zip_longest(ours, params)) if a != b]
        fail("%s: parameters differ from the IR's (%d ours, %d in the IR):\n%s"
             % (case.name, len(ours), len(params), "\n".join(diffs[:10])))
    for name in ("tokens", "targets"):
        if inputs.get(name) != ([case.batch, case.T], "i32"):
            fail("%s: IR input %s is %s" % (case.name, name, inputs.get(name)))
    # @forward returns the loss, and possibly the logits after it.
    match = re.search(r"func\.func @forward\(.*\) -> (.*) \{\s*$", ir, re.M)
    results = re.findall(r"tensor<[^>]*>", match.group(1)) if match else []
    logits_type = "tensor<%dx%dx%dxf32>" % (case.batch, case.T, cfg["vocab_size"])
    if results not in (["tensor<f32>"], ["tensor<f32>", logits_type]):
        fail("%s: @forward returns %s, expected tensor<f32> (loss) and "
             "optionally %s (logits)" % (case.name, results, logits_type))

    # The resolved config in the module's llmc.model attribute.
    match = re.search(r"llmc\.model = \{(.*?)\}\}", ir)
    if not match:
        fail("%s: no llmc.model attribute in the IR" % case.name)
    attrs = {}
    for key, value in re.findall(r"(\w+) = (\"[^\"]*\"|[^,]+)", match.group(1)):
        value = value.strip()
        if value.startswith('"'):
            attrs[key] = value.strip('"')
        elif value in ("true", "false"):
            attrs[key] = value == "true"
        else:
            attrs[key] = float(value.split(":")[0])
    expected = dict(cfg, batch=case.batch)
    for key, value in expected.items():
        got = attrs.get(key)
        same = (got == value if isinstance(value, (str, bool))
                else got is not None and not isinstance(got, (str, bool))
                and math.isclose(got, value, rel_tol=1e-6))
        if not same:
            fail("%s: llmc.model %s = %r, expected %r" % (case.name, key, got, value))


def fail(message):
    sys.stderr.write("make_golden: error: %s\n" % message)
    sys.exit(1)


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def make_case(case, out_dir, llmc, sensitivity):
    cfg = resolve_config(case)
    specs = param_specs(cfg)
    yaml_path = os.path.join(out_dir, case.name + ".yaml")
    st_path = os.path.join(out_dir, case.name + ".safetensors")
    with open(yaml_path, "w") as f:
        f.write(config_yaml(case, cfg))
    if llmc:
        check_ir(llmc, yaml_path, case, cfg, specs)

    gen = torch.Generator().manual_seed(case.seed)
    params = draw_params(specs, case.init_std, gen)
    tokens, targets = draw_ids(cfg["vocab_size"], case.batch, case.T, gen)

    p64 = {name: t.to(torch.float64).requires_grad_() for name, t in params.items()}
    logits, loss = Reference(cfg, p64).forward(tokens, targets)
    # The gradients of the loss, by autograd through the float64 reference.
    loss.backward()
    grads = [("grad." + name, t.grad.detach().clone()) for name, t in p64.items()]
    p64 = {name: t.detach() for name, t in p64.items()}
    logits, loss = logits.detach(), loss.detach()

    # The reference must agree with the second implementation.
    alt_logits, alt_loss = alternative_forward(cfg, p64, tokens, targets)
    logit_err = (logits - alt_logits).abs().max().item()
    scale = max(logits.abs().max().item(), 1.0)
    if logit_err > 1e-10 * scale or abs(loss.item() - alt_loss.item()) > 1e-10:
        fail("%s: reference and alternative forward differ: logits %.3g, "
             "loss %.17g vs %.17g" % (case.name, logit_err, loss.item(),
                                      alt_loss.item()))

    loss64 = loss.reshape(1).clone()
    tensors = [("loss_f64", loss64)]  # 8-byte first, for alignment
    tensors += list(params.items())
    tensors += [("tokens", tokens), ("targets", targets),
                ("logits", logits.to(torch.float32)),
                ("loss", loss.to(torch.float32).reshape([]))]
    metadata = collections.OrderedDict(
        [("config", case.name), ("family", case.family),
         ("batch", case.batch), ("seq_len", case.T), ("seed", case.seed),
         ("init_std", case.init_std), ("generator", "scripts/make_golden.py")])
    write_safetensors(st_path, tensors, metadata)

    back, back_meta = read_safetensors(st_path)
    if list(back) != [name for name, _ in tensors]:
        fail("%s: tensor names did not read back" % case.name)
    for name, tensor in tensors:
        if back[name].dtype != tensor.dtype or not torch.equal(back[name], tensor):
            fail("%s: %s did not read back" % (case.name, name))
    if back_meta.get("batch") != str(case.batch):
        fail("%s: metadata did not read back" % case.name)

    grads_path = os.path.join(out_dir, case.name + ".grads.safetensors")
    grads_meta = collections.OrderedDict(
        [("config", case.name), ("of", case.name + ".safetensors"),
         ("loss", "mean cross-entropy over all positions"),
         ("generator", "scripts/make_golden.py")])
    write_safetensors(grads_path, grads, grads_meta)
    back, _ = read_safetensors(grads_path)
    if list(back) != [name for name, _ in grads] or not all(
            torch.equal(back[name], g) for name, g in grads):
        fail("%s: gradients did not read back" % case.name)

    print("%-36s loss %.7f (f64 %.15f)  %6d + %6d bytes" % (
        case.name, loss.float().item(), loss.item(), os.path.getsize(st_path),
        os.path.getsize(grads_path)))

    if sensitivity:
        tol_ref = logits.abs().max().item()
        for label, cls in mutations(cfg):
            m_logits, m_loss = cls(cfg, p64).forward(tokens, targets)
            d = (m_logits - logits).abs().max().item()
            print("    %-22s max|dlogits| %.2e (%.1e of max|logits|), "
                  "dloss %.2e" % (label, d, d / tol_ref,
                                  abs(m_loss.item() - loss.item())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default=os.path.join(REPO, "test", "golden"),
                        help="output folder (default: test/golden)")
    parser.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"),
                        help="the llmc binary for the IR check")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check-ir", action="store_true",
                       help="require the IR check (fail if llmc is missing)")
    group.add_argument("--no-check-ir", action="store_true",
                       help="skip the IR check")
    parser.add_argument("--sensitivity", action="store_true",
                        help="print how far plausible bugs move the logits")
    parser.add_argument("--only", help="regex: make only the matching cases")
    args = parser.parse_args()

    # One thread, so that float64 reductions are always summed the same way.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    llmc = None
    if not args.no_check_ir:
        if os.access(args.llmc, os.X_OK):
            llmc = args.llmc
        elif args.check_ir:
            fail("--check-ir: %s is not an executable" % args.llmc)
        else:
            print("make_golden: %s not found; skipping the IR check" % args.llmc)

    os.makedirs(args.out, exist_ok=True)
    for case in CASES:
        if args.only and not re.search(args.only, case.name):
            continue
        make_case(case, args.out, llmc, args.sensitivity)


if __name__ == "__main__":
    main()
