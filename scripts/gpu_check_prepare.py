#!/usr/bin/env python3
"""Prepares the GPU acceptance run here (scripts/gpu-check.sh --prepare):
everything the GPU machine cannot make itself, since it has no LLVM or MLIR.

  gpu_check_prepare.py [--build build] [--prepared build-gpu] [--short]

Into PREPARED (default build-gpu/, ignored by git, carried by the device
call): bin/ the standalone binaries (llmc-cuda-run, bench-attention-cuda,
bench-sparse-cuda: no LLVM shared library) and the `--target cuda` exports,
gzip-compressed; inputs/ the training programs (llmc-cpu-reference
--compile --function train), their seeded inputs and the CPU's reference
losses, grad norms and final tensors, the speed runs' programs and inputs,
`llmc plan --json` of each speed run, the CPU export's logits;
cache.tar.gz, the NVRTC kernel cache of every program, which the dry run
at the end compiles and packs (so the GPU compiles nothing it can reuse);
prepared.json, the checks in the order they run, with budgets.

--short prepares the same checks on the tiny model only: what
test/tools/gpu-check-dry-run.test runs. The full preparation takes minutes
(bench/README.md), most of them in the CPU references of GPT-2 124M, its
exports and NVRTC.
"""
import argparse
import datetime
import gzip
import json
import os
import random
import shutil
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpu_check  # noqa: E402  (the runner: names the checks' files)

BINARIES = ["llmc-cuda-run", "bench-attention-cuda", "bench-sparse-cuda"]
TINY = os.path.join(ROOT, "examples", "tiny.yaml")
# GPT-2 124M's and 350M's shapes for the speed runs: the B and T.
SPEED_BATCH, SPEED_SEQ = 16, 1024
# The prompt of the export checks (byte tokenizer: one token a byte).
PROMPT = "Once upon a"
BENCH_PROMPT = "The quick brown fox jumps over the lazy dog; " * 2


def run(argv, log, **kwargs):
    """Runs a preparation step; a failure stops the preparation with the
    step's output (nothing is half-prepared: prepared.json comes last)."""
    print("  $ " + " ".join(argv), flush=True)
    out = subprocess.run(argv, capture_output=True, text=True, **kwargs)
    text = out.stdout + out.stderr
    if len(text) > 20000:  # --print-logits: megabytes, kept in inputs/
        text = text[:10000] + "\n[...]\n" + text[-10000:]
    log.write(f"$ {' '.join(argv)}\n{text}\n")
    if out.returncode != 0:
        sys.exit(f"gpu-check --prepare: error: {argv[0]} failed "
                 f"(exit {out.returncode}):\n{out.stdout[-2000:]}"
                 f"{out.stderr[-2000:]}")
    return out.stdout


class Prep:
    def __init__(self, args):
        self.build = os.path.abspath(args.build)
        self.out = os.path.abspath(args.prepared)
        self.short = args.short
        self.log = None
        # The CPU kernels and the exports' NVRTC work go to the usual
        # cache ($LLMC_CACHE_DIR), not to the carried one, which holds
        # only what the GPU run compiles (filled by the dry run).
        self.env = dict(os.environ)

    def tool(self, name):
        return os.path.join(self.build, "bin", name)

    def path(self, relative):
        return os.path.join(self.out, relative)

    def run(self, argv):
        return run(argv, self.log, env=self.env)


def model_yaml(prep, name, layers, heads, width, seq, vocab):
    path = prep.path(f"inputs/{name}.yaml")
    with open(path, "w") as f:
        f.write(f"name: {name}\nn_layer: {layers}\nn_head: {heads}\n"
                f"n_embd: {width}\nseq_len: {seq}\nvocab_size: {vocab}\n")
    return path


def training_programs(prep, prefix, model, precision, batch, seq, steps,
                      lr, inputs_only=False):
    """The grad, update (and cast) programs of `model`, seeded inputs for
    `steps` steps and, unless inputs_only, the CPU's reference."""
    p = prep.path(prefix)
    argv = [prep.tool("llmc-cpu-reference"), p + "-grad.llmc",
            "--compile", model, "--function", "train",
            "--update", p + "-update.llmc", "--precision", precision,
            "--batch", str(batch), "--seq-len", str(seq),
            "--make-inputs", p + "-in.safetensors",
            "--train-steps", str(steps), "--lr", str(lr),
            "--sample-elements", "1024", "-o", p + "-ref.safetensors"]
    if precision != "fp32":
        argv += ["--cast", p + "-cast.llmc"]
    if inputs_only:
        argv.append("--inputs-only")
    prep.run(argv)
    return precision != "fp32"


def train_checks(prep):
    """One training step (three, for the losses' course) of each model and
    precision against the CPU, then the attention gradients."""
    checks = []
    models = [("tiny", TINY, 1e-3, 8)]
    if not prep.short:
        models.append(("gpt2", "gpt2", 3e-4, 22))
    for name, model, lr, budget in models:
        for precision in ("fp32", "bf16", "fp16"):
            prefix = f"inputs/train-{name}-{precision}"
            cast = training_programs(prep, prefix, model, precision, 4, 64, 3,
                                     lr)
            checks.append(dict(
                name=f"train-{name}-{precision}", group="correctness",
                kind="train", budget_s=budget, prefix=prefix, cast=cast,
                precision=precision, steps=3,
                what=f"{name} {precision}, B=4 T=64, 3 steps: losses and "
                     "grad norms vs the CPU"))
    # Head size 64 (GPT-2's) in bf16 and 128 in fp16: the tensor-core
    # kernels' two templates and two types; one step, so Adam's first
    # moment is 0.1 x the clipped gradient of each attention weight.
    shapes = [("d64", 12, "bf16"), ("d128", 6, "fp16")]
    width, seq = (768, 256) if not prep.short else (256, 64)
    for label, heads, precision in shapes:
        if prep.short:
            heads //= 3
        yaml = model_yaml(prep, f"attn-{label}", 2, heads, width, seq, 256)
        prefix = f"inputs/attn-{label}-{precision}"
        cast = training_programs(prep, prefix, yaml, precision, 2, seq, 1,
                                 1e-3)
        checks.append(dict(
            name=f"attention-grads-{label}-{precision}", group="correctness",
            kind="train", budget_s=12, prefix=prefix, cast=cast,
            precision=precision, steps=1,
            tensors=r"^sample\.state\.adam_m\.h\.\d+\.attn\.",
            what=f"tensor-core flash attention fwd+bwd, head size "
                 f"{width // heads}, {precision}, T={seq}: attention weight "
                 "gradients vs the CPU"))
    checks.append(dict(
        name="attention-tc-vs-cuda-cores", group="correctness",
        kind="attention-tc", budget_s=25,
        what="bench-attention-cuda: tensor-core out/dq/dk/dv vs the "
             "CUDA-core kernels at GPT-2 shapes, T=1024/2048"))
    checks.append(dict(
        name="sparse-2of4-vs-dense", group="correctness", kind="sparse",
        budget_s=20,
        what="bench-sparse-cuda: mma.sp 2:4 GEMM vs cuBLASLt dense, GPT-2 "
             "124M/350M shapes"))
    return checks


def patterned_gpt2_weights(path, layers=12, width=768, vocab=50257,
                           positions=1024):
    """GPT-2 124M's tensors under Hugging Face names (Conv1D [in, out]),
    each filled with a seeded block of 1021 normal values repeated: a model
    like any other to the kernels, whose weights compress to almost nothing
    (the block recurs within gzip's window), so the exported binary's
    weights add little to what travels to the GPU machine."""
    from array import array
    rng = random.Random(46)

    def block(mean, std):
        return array("f", [mean + rng.gauss(0.0, std)
                           for _ in range(1021)]).tobytes()

    shapes = {"wte.weight": [vocab, width], "wpe.weight": [positions, width]}
    for i in range(layers):
        p = f"h.{i}."
        shapes.update({
            p + "ln_1.weight": [width], p + "ln_1.bias": [width],
            p + "attn.c_attn.weight": [width, 3 * width],
            p + "attn.c_attn.bias": [3 * width],
            p + "attn.c_proj.weight": [width, width],
            p + "attn.c_proj.bias": [width],
            p + "ln_2.weight": [width], p + "ln_2.bias": [width],
            p + "mlp.c_fc.weight": [width, 4 * width],
            p + "mlp.c_fc.bias": [4 * width],
            p + "mlp.c_proj.weight": [4 * width, width],
            p + "mlp.c_proj.bias": [width]})
    shapes.update({"ln_f.weight": [width], "ln_f.bias": [width]})
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "F32", "shape": shape,
                        "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in shapes.items():
            is_norm = ".ln_" in name or name.startswith("ln_")
            pattern = block(1.0 if is_norm and name.endswith("weight")
                            else 0.0, 0.1 if is_norm else 0.02)
            size = header[name]["data_offsets"][1] - \
                header[name]["data_offsets"][0]
            whole, rest = divmod(size, len(pattern))
            f.write(pattern * whole + pattern[:rest])


def store_cpu_logits(prep, text):
    """The CPU binary's --print-logits output as the reference: labels and
    argmaxes in JSON, the values as raw f32."""
    from array import array
    lines = gpu_check.parse_logits(text)
    if not lines:
        sys.exit("gpu-check --prepare: error: the CPU export printed no "
                 "logits")
    values = array("f")
    for argmax, row in lines.values():
        values.extend(row)
    with open(prep.path("inputs/export-logits.f32"), "wb") as f:
        values.tofile(f)
    vocab = len(next(iter(lines.values()))[1])
    with open(prep.path("inputs/export-logits.json"), "w") as f:
        json.dump({"prompt": PROMPT, "vocab": vocab,
                   "values": "inputs/export-logits.f32",
                   "lines": [[label, argmax] for label, (argmax, _)
                             in lines.items()]}, f)


def export_binaries(prep):
    """The model exported for the CPU (its logits, the reference) and for
    CUDA at batch 1 and 8 (compressed); returns the checks."""
    scratch = prep.path("scratch")
    os.makedirs(scratch, exist_ok=True)
    model, context = (TINY, 64) if prep.short else ("gpt2", 256)
    artifact = os.path.join(scratch, "export-model.llmc")
    prep.run([prep.tool("llmc"), "compile", model, "--batch", "1", "-o",
              artifact])
    weights = []
    if not prep.short:
        path = os.path.join(scratch, "weights.safetensors")
        patterned_gpt2_weights(path)
        weights = ["--weights", path]
    common = weights + ["--max-context", str(context)]
    cpu = os.path.join(scratch, "export-cpu")
    prep.run([prep.tool("llmc"), "export", artifact, "-o", cpu] + common)
    store_cpu_logits(prep, prep.run([cpu, "--print-logits", "--prompt",
                                     PROMPT]))
    for batch in (1, 8):
        binary = os.path.join(scratch, f"export-cuda-b{batch}")
        prep.run([prep.tool("llmc"), "export", artifact, "--target", "cuda",
                  "--batch", str(batch), "-o", binary] + common)
        with open(binary, "rb") as src, \
                gzip.open(prep.path(f"bin/export-cuda-b{batch}.gz"), "wb",
                          compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
    shutil.rmtree(scratch)
    name = "tiny" if prep.short else "gpt2"
    prompt = "Once upon a time" if prep.short else BENCH_PROMPT
    checks = [dict(
        name=f"export-cuda-logits-{name}", group="correctness",
        kind="export-logits", budget_s=22, binary="bin/export-cuda-b1.gz",
        reference="inputs/export-logits.json", prompt=PROMPT,
        what=f"llmc export --target cuda ({name} fp32): prefill and decode "
             "logits vs the CPU binary's")]
    for batch in (1, 8):
        checks.append(dict(
            name=f"decode-cuda-{name}-b{batch}", group="speed", kind="decode",
            budget_s=18, binary=f"bin/export-cuda-b{batch}.gz", prompt=prompt,
            max_tokens=64,
            what=f"the --target cuda binary's --bench at batch {batch}: "
                 "prefill and decode tokens/s"))
    return checks


def speed_checks(prep):
    """The timed training runs of llmc and of torch.compile on the same
    models, shapes and precision, the memory they took against `llmc
    plan`, and the issue's goals."""
    if prep.short:
        models = [("tiny", TINY, 4, 64, 20, 20)]
    else:
        models = [("gpt2", "gpt2", SPEED_BATCH, SPEED_SEQ, 40, 75),
                  ("gpt2-medium", "gpt2-medium", SPEED_BATCH, SPEED_SEQ, 50,
                   85)]
    checks, memory = [], []
    for name, model, batch, seq, budget, torch_budget in models:
        prefix = f"inputs/speed-{name}"
        cast = training_programs(prep, prefix, model, "bf16", batch, seq, 1,
                                 1e-4, inputs_only=True)
        plan = f"inputs/plan-{name}.json"
        text = prep.run([prep.tool("llmc"), "plan", model,
                         "--micro-batch-size", str(batch),
                         "--global-batch-size", str(batch),
                         "--seq-len", str(seq), "--precision", "bf16",
                         "--gpu", "h100-sxm", "--gpus-per-node", "1",
                         "--json"])
        with open(prep.path(plan), "w") as f:
            f.write(text)
        flops = json.loads(text)["compute"]["flops_per_token"]["value"]
        shape = f"B={batch} T={seq} bf16, 20 steps"
        checks.append(dict(
            name=f"speed-llmc-{name}", group="speed", kind="speed-llmc",
            budget_s=budget, prefix=prefix, cast=cast, precision="bf16",
            steps=1, timed_steps=20, batch=batch, seq=seq,
            flops_per_token=flops,
            what=f"llmc-cuda-run {name} {shape}: ms/step, tokens/s, MFU; "
                 "peak device memory"))
        checks.append(dict(
            name=f"speed-torch-{name}", group="speed", kind="speed-torch",
            budget_s=torch_budget, model=name, batch=batch, seq=seq,
            timed_steps=20, flops_per_token=flops,
            what=f"PyTorch torch.compile {name} {shape}, bf16 autocast, "
                 "fused AdamW"))
        memory.append(dict(
            name=f"memory-{name}", group="memory", kind="memory", budget_s=0,
            source=f"speed-llmc-{name}", plan=plan, allowed=0.10,
            what=f"speed-llmc-{name}'s measured peak vs llmc plan's total"))
    first = models[0][0]
    goals = [dict(name=f"goal-mfu-{first}", group="goal", kind="goal",
                  budget_s=0, source=f"speed-llmc-{first}",
                  mfu_at_least=0.45, what="the issue's goal: MFU >= 45%"),
             dict(name=f"goal-vs-torch-{first}", group="goal", kind="goal",
                  budget_s=0, source=f"speed-llmc-{first}",
                  peer=f"speed-torch-{first}",
                  what="the issue's goal: tokens/s >= torch.compile's")]
    return checks, memory + goals


def copy_binaries(prep):
    os.makedirs(prep.path("bin"), exist_ok=True)
    for name in BINARIES:
        source = prep.tool(name)
        if not os.path.isfile(source):
            sys.exit(f"gpu-check --prepare: error: {source} is missing: "
                     f"cmake --build {prep.build} --target {name}")
        shutil.copy2(source, prep.path(f"bin/{name}"))


def describe_source():
    def git(*args):
        out = subprocess.run(["git", "-C", ROOT] + list(args),
                             capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else "?"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return git("rev-parse", "--short", "HEAD") + (" (modified)" if dirty
                                                  else "")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--prepared", default=os.path.join(ROOT, "build-gpu"))
    parser.add_argument("--short", action="store_true",
                        help="the tiny model only (the test's preparation)")
    args = parser.parse_args()
    prep = Prep(args)
    for name in ["llmc", "llmc-cpu-reference"] + BINARIES:
        if not os.path.isfile(prep.tool(name)):
            sys.exit(f"gpu-check --prepare: error: {prep.tool(name)} is "
                     f"missing: cmake --build {prep.build} --target {name}")
    if os.path.exists(prep.out):
        shutil.rmtree(prep.out)
    os.makedirs(prep.path("inputs"))
    os.makedirs(prep.path("cache"))
    with open(prep.path("prepare.log"), "w") as prep.log:
        copy_binaries(prep)
        correctness = train_checks(prep)
        exports = export_binaries(prep)
        speed, derived = speed_checks(prep)
    checks = correctness + exports[:1] + speed + exports[1:] + derived
    about = {"commit": describe_source(), "date": datetime.datetime.now(
        datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    with open(prep.path("prepared.json"), "w") as f:
        json.dump({"about": about, "short": args.short, "checks": checks}, f,
                  indent=1)
    print(f"prepared {len(checks)} checks in {prep.out}; the dry run "
          "(it fills the kernel cache):", flush=True)
    return gpu_check.main(["--dry-run", "--prepared", prep.out]
                          + (["--quick"] if args.short else []))


if __name__ == "__main__":
    sys.exit(main())
