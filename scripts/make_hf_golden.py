#!/usr/bin/env python3
"""Writes the golden files of the Hugging Face export tests (test/golden/hf/).

Regenerate with the Debian PyTorch (apt-get install python3-torch) and a
built llmc, from the repository root:

    /usr/bin/python3 scripts/make_hf_golden.py

For each case (gpt2, llama) in test/golden/hf/:

  <case>.yaml, <case>.train.yaml   the model and a few SGD steps of training
                      (written by hand, read here and by the tests).
  <case>.safetensors  the trained parameters under Hugging Face names, as
                      `llmc convert` writes them: made here by
                      `llmc run <case>.train.yaml` and `llmc convert` of its
                      last checkpoint. Committed: it is the input of the
                      golden, and test/tools/convert-golden.test checks that
                      llmc still converts the same checkpoint to it (within
                      1e-5, as other CPUs train it within rounding).
  <case>.golden.safetensors
                      "tokens", "targets" (I32 [B, T], seeded), "logits" (F32
                      [B, T, V]), "loss" (F32 []) and "loss_f64" (F64 [1]) of
                      the model in <case>.safetensors, computed below in
                      float64 by plain PyTorch from the Hugging Face names
                      and the config.json in its metadata (transformers is
                      not needed), plus __metadata__ {weights, weights_sha256,
                      model, batch, seq_len, seed, generator}. The sha256 ties
                      the golden to the exact committed weights; the unit test
                      HfGolden (test/unit/codegen/LlmcToKernel) checks it
                      before comparing.

The reference forward passes are written from the semantics of
transformers' GPT2LMHeadModel (Conv1D computes x @ W + b with W [in, out];
activation_function gelu_new is the tanh GELU) and LlamaForCausalLM
(rotate_half RoPE on cat(freqs, freqs), RMSNorm, SiLU-gated MLP), not from
llmc's code. Check, failing loudly: mapping the Hugging Face tensors back
to llmc's layout and running make_golden.py's Reference (written from the
llmc op semantics) gives the same logits within 1e-12. Deterministic:
running twice gives byte-identical golden files.
"""

import argparse
import collections
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden  # noqa: E402  (read/write_safetensors, Reference)

REPO = make_golden.REPO
HF_DIR = os.path.join(REPO, "test", "golden", "hf")
CASES = ["gpt2", "llama"]
BATCH = 2
SEED = 7


def fail(message):
    sys.stderr.write("make_hf_golden: error: %s\n" % message)
    sys.exit(1)


# ---------------------------------------------------------------------------
# Reference forward passes, Hugging Face semantics, float64
# ---------------------------------------------------------------------------

def causal_attention(q, k, v):
    """q, k, v [B, H, T, D]: softmax(q k^T / sqrt(D)) v, key j <= query i."""
    t, d = q.shape[-2], q.shape[-1]
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def heads(x, n_head):
    b, t, c = x.shape
    return x.view(b, t, n_head, c // n_head).transpose(1, 2)


def merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def gpt2_forward(cfg, p, tokens):
    """GPT2LMHeadModel: Conv1D layers (x @ W + b, W [in, out])."""
    c, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
    act = {"gelu_new": lambda x: F.gelu(x, approximate="tanh"),
           "gelu": F.gelu, "relu": F.relu}[cfg["activation_function"]]

    def conv1d(x, prefix):
        return x @ p[prefix + ".weight"] + p[prefix + ".bias"]

    def ln(x, prefix):
        return F.layer_norm(x, (c,), p[prefix + ".weight"],
                            p[prefix + ".bias"], eps)

    t = tokens.shape[1]
    x = p["wte.weight"][tokens.long()] + p["wpe.weight"][:t]
    for i in range(cfg["n_layer"]):
        h = "h.%d." % i
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(c, dim=2)
        o = causal_attention(*(heads(z, cfg["n_head"]) for z in (q, k, v)))
        x = x + conv1d(merge(o), h + "attn.c_proj")
        m = act(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"))
        x = x + conv1d(m, h + "mlp.c_proj")
    x = ln(x, "ln_f")
    head = p["wte.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return x @ head.t()


def llama_forward(cfg, p, tokens):
    """LlamaForCausalLM: nn.Linear layers, rotate_half RoPE."""
    eps, nh = cfg["rms_norm_eps"], cfg["num_attention_heads"]
    d = cfg["hidden_size"] // nh

    def linear(x, prefix):
        y = x @ p[prefix + ".weight"].t()
        bias = p.get(prefix + ".bias")
        return y + bias if bias is not None else y

    def rms(x, name):
        var = x.pow(2).mean(-1, keepdim=True)
        return p[name] * (x * torch.rsqrt(var + eps))

    def rotate_half(x):
        x1, x2 = x[..., : d // 2], x[..., d // 2:]
        return torch.cat((-x2, x1), dim=-1)

    t = tokens.shape[1]
    inv_freq = 1.0 / (cfg["rope_theta"] **
                      (torch.arange(0, d, 2, dtype=torch.float64) / d))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    x = p["model.embed_tokens.weight"][tokens.long()]
    for i in range(cfg["num_hidden_layers"]):
        l = "model.layers.%d." % i
        a = rms(x, l + "input_layernorm.weight")
        q, k, v = (heads(linear(a, l + "self_attn.%s_proj" % n), nh)
                   for n in "qkv")
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        x = x + linear(merge(causal_attention(q, k, v)), l + "self_attn.o_proj")
        m = rms(x, l + "post_attention_layernorm.weight")
        gated = F.silu(linear(m, l + "mlp.gate_proj")) * linear(m, l + "mlp.up_proj")
        x = x + linear(gated, l + "mlp.down_proj")
    x = rms(x, "model.norm.weight")
    head = (p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"]
            else p["lm_head.weight"])
    return x @ head.t()


# ---------------------------------------------------------------------------
# The check: back to llmc's layout, through make_golden's Reference
# ---------------------------------------------------------------------------

def to_llmc(model_type, cfg, p):
    """Hugging Face tensors -> llmc.param names and layouts."""
    out = {}
    if model_type == "gpt2":
        for name, t in p.items():
            llmc = name[: -len(".weight")] if name in ("wte.weight", "wpe.weight") else name
            conv = name.endswith(".weight") and t.dim() == 2 and name.startswith("h.")
            out[llmc] = t.t().contiguous() if conv else t
        return out
    out["wte"] = p["model.embed_tokens.weight"]
    for i in range(cfg["n_layer"]):
        l, h = "model.layers.%d." % i, "h.%d." % i
        out[h + "ln_1.weight"] = p[l + "input_layernorm.weight"]
        out[h + "ln_2.weight"] = p[l + "post_attention_layernorm.weight"]
        out[h + "attn.c_attn.weight"] = torch.cat(
            [p[l + "self_attn.%s_proj.weight" % n] for n in "qkv"])
        out[h + "attn.c_proj.weight"] = p[l + "self_attn.o_proj.weight"]
        out[h + "mlp.c_fc.weight"] = torch.cat(
            [p[l + "mlp.gate_proj.weight"], p[l + "mlp.up_proj.weight"]])
        out[h + "mlp.c_proj.weight"] = p[l + "mlp.down_proj.weight"]
    out["ln_f.weight"] = p["model.norm.weight"]
    if "lm_head.weight" in p:
        out["lm_head.weight"] = p["lm_head.weight"]
    return out


class ExactReference(make_golden.Reference):
    """make_golden's Reference with epsilon, theta and the attention scale
    as exact doubles, as Hugging Face's configs give them (llmc's IR holds
    them as F32Attrs, a difference of ~1e-8 that the tests' 1e-5 absorbs)."""

    def __init__(self, cfg, p):
        super().__init__(cfg, p)
        self.eps = cfg["norm_eps"]
        self.theta = cfg["rope_theta"]
        self.scale = 1.0 / math.sqrt(self.head_dim)


# ---------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------

def run(cmd):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)
    if proc.returncode != 0:
        fail("%s failed:\n%s" % (" ".join(cmd), proc.stdout))
    return proc.stdout


def convert(llmc, case, weights_path):
    """llmc run <case>.train.yaml, then llmc convert its last checkpoint."""
    work = tempfile.mkdtemp(prefix="make_hf_golden.")
    try:
        run([llmc, "run", os.path.join(HF_DIR, case + ".train.yaml"),
             "--out", work])
        ckpt_dir = os.path.join(work, "checkpoints")
        ckpts = sorted(f for f in os.listdir(ckpt_dir) if f.endswith(".ckpt"))
        if not ckpts:
            fail("llmc run wrote no checkpoint in %s" % ckpt_dir)
        print(run([llmc, "convert", os.path.join(ckpt_dir, ckpts[-1]),
                   "-o", weights_path]).strip())
    finally:
        shutil.rmtree(work)


def make_case(case, llmc):
    weights_path = os.path.join(HF_DIR, case + ".safetensors")
    if llmc:
        convert(llmc, case, weights_path)
    params, metadata = make_golden.read_safetensors(weights_path)
    hf_cfg = json.loads(metadata["hf_config"])
    llmc_cfg = json.loads(metadata["llmc.model"])
    model_type = hf_cfg["model_type"]
    if model_type != case:
        fail("%s: hf_config is of model_type %s" % (weights_path, model_type))
    p64 = {name: t.to(torch.float64) for name, t in params.items()}

    seq = llmc_cfg["seq_len"]
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, llmc_cfg["vocab_size"], (2, BATCH, seq), generator=gen)
    tokens, targets = ids[0].to(torch.int32), ids[1].to(torch.int32)

    forward = gpt2_forward if model_type == "gpt2" else llama_forward
    logits = forward(hf_cfg, p64, tokens)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           targets.reshape(-1).long())

    # The same weights in llmc's layout through the llmc-semantics reference.
    check_logits, check_loss = ExactReference(
        llmc_cfg, to_llmc(model_type, llmc_cfg, p64)).forward(tokens, targets)
    err = (check_logits - logits).abs().max().item()
    if err > 1e-12 * max(1.0, logits.abs().max().item()) or \
            abs(check_loss.item() - loss.item()) > 1e-12:
        fail("%s: the Hugging Face reference and make_golden's Reference "
             "differ: logits %.3g, loss %.17g vs %.17g"
             % (case, err, loss.item(), check_loss.item()))

    with open(weights_path, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    tensors = [("loss_f64", loss.reshape(1).clone()),
               ("tokens", tokens), ("targets", targets),
               ("logits", logits.to(torch.float32)),
               ("loss", loss.to(torch.float32).reshape([]))]
    meta = collections.OrderedDict(
        [("weights", case + ".safetensors"), ("weights_sha256", sha),
         ("model", case + ".yaml"), ("batch", BATCH), ("seq_len", seq),
         ("seed", SEED), ("generator", "scripts/make_hf_golden.py")])
    golden_path = os.path.join(HF_DIR, case + ".golden.safetensors")
    make_golden.write_safetensors(golden_path, tensors, meta)
    print("%-6s loss %.7f (f64 %.15f), %d tensors, weights sha256 %s..."
          % (case, loss.float().item(), loss.item(), len(params), sha[:12]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llmc", default=os.path.join(REPO, "build", "bin", "llmc"),
                        help="the llmc binary that trains and converts")
    parser.add_argument("--no-convert", action="store_true",
                        help="keep the committed <case>.safetensors; only "
                             "recompute the goldens from them")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    llmc = None
    if not args.no_convert:
        if not os.access(args.llmc, os.X_OK):
            fail("%s is not an executable (build llmc, or pass --no-convert)"
                 % args.llmc)
        llmc = args.llmc
    for case in CASES:
        make_case(case, llmc)


if __name__ == "__main__":
    main()
