#!/usr/bin/env python3
"""The GPU acceptance run (scripts/gpu-check.sh): runs or dry-runs the checks
that scripts/gpu_check_prepare.py listed in PREPARED/prepared.json.

  gpu_check.py RESULTS_DIR [--prepared build-gpu] [--only NAME,...]
  gpu_check.py --dry-run [--prepared build-gpu]

A run executes every check in the prepared order (correctness, then speed,
then memory), each under a hard timeout (its budget), never stopping at a
failure; a check whose budget no longer fits the run's time limit is
skipped with that reason. It writes RESULTS_DIR/gpu-results.json (every
check: status pass/fail/skip, reason, measured values), gpu-results.md (the
summary for bench/README.md) and gpu-check.log (every command's output).

The dry run needs no GPU: every binary and input the checks name exists
(the binaries link no LLVM/MLIR shared library, the compressed exports
decompress), every CUDA program compiles with NVRTC (llmc-cuda-run
--compile-only, into the kernel cache, then packed into the cache.tar.gz
that travels), the torch peer parses, the
prepared folder fits what a GPU call carries; then it prints the plan of
checks with their budgets and their total, which must stay under 8 minutes.
Exit status 0 when all of that holds, 1 otherwise.
"""
import argparse
import datetime
import json
import os
import py_compile
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The run's time limit: the 8 minutes less a margin for the
# script's own start and the results' writing.
TIME_LIMIT_S = 470
# What one device call carries (working tree plus carried paths).
CARRY_LIMIT_BYTES = 64 << 20
# The tolerances of the emulated tests (test/unit/codegen/KernelToCuda/
# CudaProgramTest.cpp, kPrograms): end to end, relative to the largest
# |value| of a result: f32 1e-4, bf16 2^-7 (one bf16 unit: the cuBLASLt
# epilogues' rounding), fp16 2e-3.
TOLERANCE = {"fp32": 1e-4, "bf16": 2.0 ** -7, "fp16": 2e-3,
             "f16": 2e-3}
# The 2:4 GEMM against cuBLASLt's dense product of the same bf16 operands,
# both accumulating in f32: only the order of the sums differs, so a wrong
# index or metadata word (an error of the order of the values) is what
# this catches.
SPARSE_TOLERANCE = 1e-3
# The training programs' kernels are compiled for the lent GPUs' SM alone
# (H100 and H200 are sm_90): a third of the NVRTC work and of the carried
# kernel cache. The dry run compiles with the same flag, so the run reads
# every module from the cache.
CUDA_ARCH = ["--cuda-arch", "90"]
# Of a command's output, gpu-check.log keeps the first and the last this
# many characters (a file that comes back from the device is capped).
LOG_KEEP_CHARS = 40000
# Dense bf16 peaks by GPU name (examples/hardware.yaml), for MFU.
PEAKS = [("H100 PCIe", 756.5e12), ("H100", 989.5e12), ("H200", 989.5e12),
         ("A100", 312e12)]


def unpack_cache(prepared):
    """cache.tar.gz (what travels: cubins compress well) into cache/,
    where the binaries read it through LLMC_CACHE_DIR."""
    packed = os.path.join(prepared, "cache.tar.gz")
    if os.path.exists(packed) and not os.path.isdir(
            os.path.join(prepared, "cache")):
        with tarfile.open(packed) as tar:
            tar.extractall(prepared, filter="data") if hasattr(
                tarfile, "data_filter") else tar.extractall(prepared)
        return True
    return False


def pack_cache(prepared):
    """cache/ into cache.tar.gz, and cache/ removed: the folder that
    travels holds the compressed form only."""
    folder = os.path.join(prepared, "cache")
    packed = os.path.join(prepared, "cache.tar.gz")
    with tarfile.open(packed + ".part", "w:gz") as tar:
        tar.add(folder, arcname="cache")
    os.replace(packed + ".part", packed)
    shutil.rmtree(folder)


def load_prepared(prepared):
    path = os.path.join(prepared, "prepared.json")
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as error:
        sys.exit(f"gpu-check: error: {path}: {error}; run "
                 "scripts/gpu-check.sh --prepare first")


# --- running one command -------------------------------------------------

def run_command(argv, timeout, log, env=None, cwd=None):
    """Runs argv in a session of its own; killed (the whole group) after
    `timeout` s. Returns (exit status or None on timeout, output, seconds)."""
    start = time.monotonic()
    log.write(f"\n$ {' '.join(argv)}\n")
    log.flush()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=True, text=True,
                                errors="replace")
    except OSError as error:
        log.write(f"cannot start: {error}\n")
        return 127, str(error), 0.0
    try:
        out, _ = proc.communicate(timeout=timeout)
        status = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        status = None
    seconds = time.monotonic() - start
    if len(out) > 2 * LOG_KEEP_CHARS:  # --print-logits prints megabytes
        left_out = len(out) - 2 * LOG_KEEP_CHARS
        out_logged = (out[:LOG_KEEP_CHARS] +
                      f"\n[... {left_out} characters left out ...]\n" +
                      out[-LOG_KEEP_CHARS:])
    else:
        out_logged = out
    log.write(out_logged)
    log.write(f"[exit {status}, {seconds:.1f} s]\n")
    log.flush()
    return status, out, seconds


class MemorySampler:
    """nvidia-smi's memory.used every 100 ms while a command runs: the
    device's peak, less what was in use before it started."""

    def __init__(self):
        self.before = gpu_memory_used()
        self.peak = self.before
        self.proc = None

    def __enter__(self):
        try:
            self.proc = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=memory.used",
                 "--format=csv,noheader,nounits", "-lms", "100"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            return self
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.peak = max(self.peak, float(line.split()[0]))
            except (ValueError, IndexError):
                pass

    def __exit__(self, *exc):
        if self.proc:
            self.proc.terminate()
            self.proc.wait()

    def peak_bytes(self):
        if self.before is None or self.peak is None:
            return None
        return (self.peak - self.before) * (1 << 20)


def gpu_memory_used():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used",
                              "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20)
        return float(out.stdout.split()[0])
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def gpu_facts():
    """The GPU, driver and CUDA version, from nvidia-smi."""
    facts = {"gpu": "unknown", "driver": "unknown", "cuda": "unknown",
             "memory_mib": None}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
             "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30).stdout
        name, driver, memory = [x.strip() for x in out.splitlines()[0]
                                .split(",")]
        facts.update(gpu=name, driver=driver, memory_mib=float(memory))
        header = subprocess.run(["nvidia-smi"], capture_output=True,
                                text=True, timeout=30).stdout
        found = re.search(r"CUDA Version:\s*([\d.]+)", header)
        if found:
            facts["cuda"] = found.group(1)
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        pass
    facts["peak_bf16_flops"] = next(
        (peak for key, peak in PEAKS if key in facts["gpu"]), None)
    return facts


# --- parsing what the binaries print -------------------------------------

FLOAT = r"([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf|-nan|-inf))"


def parse_train(out):
    """llmc-cuda-run --update: per-step losses and grad norms (gpu, cpu),
    the compared final tensors, the timed steps."""
    steps = [tuple(float(x) for x in m.groups()) for m in re.finditer(
        r"train step \d+: loss gpu " + FLOAT + " cpu " + FLOAT +
        r" diff \S+ \| grad_norm gpu " + FLOAT + " cpu " + FLOAT, out)]
    tensors = {}
    for m in re.finditer(r"compare (\S+): \d+ elements[^:]*: max abs diff " +
                         FLOAT + r" .*?max \|ref\| " + FLOAT +
                         r", non-finite (\d+)", out):
        tensors[m.group(1)] = (float(m.group(2)), float(m.group(3)),
                               int(m.group(4)))
    device = re.search(r"grad \+ update \+ read-back device: mean " + FLOAT +
                       " ms, median " + FLOAT, out)
    wall = re.search(r"wall per step, steps 1\.\.\d+ [^:]*: " + FLOAT + " ms",
                     out)
    name = re.search(r"^device: (.*)$", out, re.M)
    return dict(steps=steps, tensors=tensors,
                device_median_ms=float(device.group(2)) if device else None,
                wall_ms=float(wall.group(1)) if wall else None,
                device=name.group(1) if name else None)


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def judge_train(check, out):
    """Every step's loss and grad norm within the precision's tolerance of
    the CPU's (relative); with `tensors`, those final tensors too (relative
    to each one's largest |value|)."""
    parsed = parse_train(out)
    tol = TOLERANCE[check["precision"]]
    steps = parsed["steps"]
    metrics = {"steps": len(steps), "tolerance": tol}
    if len(steps) != check["steps"]:
        return "fail", (f"{len(steps)} of {check['steps']} steps compared"), \
            metrics
    loss_rel = max(relative(g, c) for g, c, _, _ in steps)
    norm_rel = max(relative(g, c) for _, _, g, c in steps)
    metrics.update(max_loss_rel_diff=loss_rel, max_grad_norm_rel_diff=norm_rel,
                   losses_gpu=[s[0] for s in steps],
                   losses_cpu=[s[1] for s in steps])
    bad = []
    if not loss_rel <= tol:
        bad.append(f"loss differs by {loss_rel:.3g} (relative)")
    if not norm_rel <= tol:
        bad.append(f"grad norm differs by {norm_rel:.3g} (relative)")
    pattern = check.get("tensors")
    if pattern:
        chosen = {k: v for k, v in parsed["tensors"].items()
                  if re.search(pattern, k)}
        if not chosen:
            bad.append(f"no compared tensor matches {pattern}")
        worst = 0.0
        for name, (diff, largest, nonfinite) in sorted(chosen.items()):
            error = diff / max(largest, 1e-30) if nonfinite == 0 else 1e30
            worst = max(worst, error)
            if not error <= tol:
                bad.append(f"{name}: {error:.3g} of its largest |value|")
        metrics.update(tensors_compared=len(chosen),
                       max_tensor_rel_error=worst)
    if bad:
        return "fail", f"tolerance {tol:.3g}: " + "; ".join(bad), metrics
    return "pass", (f"{len(steps)} steps: loss within {loss_rel:.2g}, grad "
                    f"norm within {norm_rel:.2g} (relative; allowed "
                    f"{tol:.3g})"), metrics


def parse_table_errors(out, row):
    """The last column (max err) of each table row matching `row`."""
    return [(m.group(1), float(m.group(2))) for m in re.finditer(row, out, re.M)]


def judge_attention_tc(check, out):
    rows = parse_table_errors(
        out, r"^\s+(?:gpt2 124M|gpt-350M|d128 T2k|d128)\s+(bf16|f16)\s.*\s" +
        FLOAT + r"\s*$")
    if not rows:
        return "fail", "no result rows (see the log)", {}
    bad = [f"{t} {e:.3g}" for t, e in rows if not e <= TOLERANCE[t]]
    metrics = {"rows": len(rows), "max_err": max(e for _, e in rows)}
    if bad:
        return "fail", "tensor cores vs CUDA cores beyond tolerance: " + \
            ", ".join(bad), metrics
    return "pass", (f"{len(rows)} shapes: tensor-core out/dq/dk/dv within "
                    f"{metrics['max_err']:.2g} of the CUDA-core kernels' "
                    "(of the largest |value|)"), metrics


def judge_sparse(check, out):
    rows = parse_table_errors(
        out, r"^\s+(attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\s.*\s" +
        FLOAT + r"\s*$")
    if not rows:
        return "fail", "no result rows (see the log)", {}
    worst = max(e for _, e in rows)
    metrics = {"rows": len(rows), "max_err": worst}
    if not worst <= SPARSE_TOLERANCE:
        return "fail", (f"2:4 vs dense: {worst:.3g} of the largest |y| "
                        f"(allowed {SPARSE_TOLERANCE})"), metrics
    return "pass", (f"{len(rows)} shapes: 2:4 GEMM within {worst:.2g} of "
                    "cuBLASLt's dense (of the largest |y|)"), metrics


def parse_logits(out):
    """--print-logits lines: label -> (argmax, values)."""
    lines = {}
    for line in out.splitlines():
        m = re.match(r"logits (\S+) argmax (\d+):(.*)$", line)
        if m:
            lines[m.group(1)] = (int(m.group(2)),
                                 [float(x) for x in m.group(3).split()])
    return lines


def read_cpu_logits(prepared, check):
    """The CPU binary's logits that prepare stored: label -> (argmax,
    values), from export-logits.json and its .f32 file."""
    from array import array
    with open(os.path.join(prepared, check["reference"])) as f:
        meta = json.load(f)
    values = array("f")
    with open(os.path.join(prepared, meta["values"]), "rb") as f:
        values.frombytes(f.read())
    vocab = meta["vocab"]
    return {label: (argmax, values[i * vocab:(i + 1) * vocab])
            for i, (label, argmax) in enumerate(meta["lines"])}


def judge_export_logits(check, out, prepared):
    got = parse_logits(out)
    want = read_cpu_logits(prepared, check)
    if set(got) != set(want):
        return "fail", (f"{len(got)} logits lines, the CPU binary printed "
                        f"{len(want)}"), {}
    largest = max(max(abs(v) for v in values) for _, values in want.values())
    worst, argmax_same = 0.0, 0
    for label, (argmax, values) in want.items():
        g_argmax, g_values = got[label]
        argmax_same += g_argmax == argmax
        worst = max(worst, max(abs(a - b) for a, b in zip(g_values, values)))
    tol = TOLERANCE["fp32"]
    metrics = {"positions": len(want), "max_abs_diff": worst,
               "largest_logit": largest, "argmax_equal": argmax_same}
    reason = (f"{len(want)} prefill/decode positions: logits within "
              f"{worst:.3g} (largest |logit| {largest:.3g}; allowed "
              f"{tol} of it), argmax equal at {argmax_same}")
    return ("pass" if worst <= tol * largest else "fail"), reason, metrics


def speed_metrics(check, facts, ms):
    tokens = check["batch"] * check["seq"]
    metrics = {"ms_per_step": ms, "tokens_per_s": tokens / ms * 1e3,
               "flops_per_token": check["flops_per_token"]}
    peak = facts.get("peak_bf16_flops")
    if peak:
        metrics["mfu"] = check["flops_per_token"] * metrics["tokens_per_s"] \
            / peak
    return metrics


def describe_speed(metrics):
    text = (f"{metrics['ms_per_step']:.1f} ms a step, "
            f"{metrics['tokens_per_s']:,.0f} tokens/s")
    if "mfu" in metrics:
        text += f", MFU {100 * metrics['mfu']:.1f}%"
    return text


def judge_speed_llmc(check, out, facts):
    parsed = parse_train(out)
    if parsed["device_median_ms"] is None:
        return "fail", "no timed steps (see the log)", {}
    metrics = speed_metrics(check, facts, parsed["device_median_ms"])
    metrics["wall_ms_per_step"] = parsed["wall_ms"]
    return "pass", describe_speed(metrics) + \
        " (device time, median of the graph replays)", metrics


def judge_speed_torch(check, out, facts):
    line = next((l for l in out.splitlines() if l.startswith("{")), None)
    if line is None:
        skipped = re.search(r"^skipped: (.*)$", out, re.M)
        if skipped:
            return "skip", skipped.group(1), {}
        return "fail", "no result line (see the log)", {}
    result = json.loads(line)
    metrics = speed_metrics(check, facts, result["ms_per_step"])
    metrics.update({k: result[k] for k in
                    ("framework", "compile_s", "peak_allocated_bytes",
                     "peak_reserved_bytes") if k in result})
    return "pass", describe_speed(metrics) + f" ({result['framework']})", \
        metrics


def judge_decode(check, out):
    decode = re.search(r"decode: \d+ steps x (\d+) sequences, " + FLOAT +
                       r" tokens/s \(" + FLOAT + " ms a step\)", out)
    prefill = re.search(r"prefill: .*, " + FLOAT + " tokens/s", out)
    if not decode:
        return "fail", "no decode line (see the log)", {}
    metrics = {"batch": int(decode.group(1)),
               "decode_tokens_per_s": float(decode.group(2)),
               "decode_ms_per_step": float(decode.group(3)),
               "prefill_tokens_per_s":
                   float(prefill.group(1)) if prefill else None}
    return "pass", (f"batch {metrics['batch']}: decode "
                    f"{metrics['decode_tokens_per_s']:,.0f} tokens/s "
                    f"({metrics['decode_ms_per_step']:.2f} ms a step)"), \
        metrics


# --- the checks' commands ------------------------------------------------

def library_path():
    """LD_LIBRARY_PATH with, after what it holds, the CUDA libraries of
    this Python's pip packages (nvidia-cuda-nvrtc, nvidia-cublas: PyTorch's)
    and the toolkit's usual folder: where the binaries' dlopen of NVRTC and
    cuBLASLt looks last, should the machine's own loader paths lack them."""
    import glob
    folders = [f for f in os.environ.get("LD_LIBRARY_PATH", "").split(":")
               if f]
    for entry in sys.path:
        folders += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "lib")))
    folders.append("/usr/local/cuda/lib64")
    return ":".join(dict.fromkeys(folders))


class Context:
    def __init__(self, prepared, log, facts):
        self.prepared, self.log, self.facts = prepared, log, facts
        self.results = {}
        self.env = dict(os.environ,
                        LLMC_CACHE_DIR=os.path.join(prepared, "cache"),
                        LD_LIBRARY_PATH=library_path())
        self.scratch = os.path.join(prepared, "scratch")

    def path(self, relative):
        return os.path.join(self.prepared, relative)

    def run(self, argv, budget):
        return run_command(argv, budget, self.log, env=self.env)


def training_argv(ctx, check, timing_steps=0):
    prefix = ctx.path(check["prefix"])
    argv = [ctx.path("bin/llmc-cuda-run"), prefix + "-grad.llmc",
            "--update", prefix + "-update.llmc",
            "--inputs", prefix + "-in.safetensors",
            "--train-steps", str(check["steps"])] + CUDA_ARCH
    if check.get("cast"):
        argv += ["--cast", prefix + "-cast.llmc"]
    if timing_steps:
        argv += ["--timing-steps", str(timing_steps)]
    else:
        argv += ["--reference", prefix + "-ref.safetensors"]
    return argv


def finish(status, out, budget, judge):
    """The check's verdict: a timeout or a non-zero exit fails it, else the
    judge reads the output."""
    if status is None:
        return "fail", f"timed out after {budget} s (hard limit)", {}
    if status != 0:
        last = [l for l in out.strip().splitlines() if l.strip()][-1:]
        return "fail", f"exit {status}: " + (last[0][:300] if last else ""), {}
    return judge(out)


def run_train(check, ctx):
    status, out, _ = ctx.run(training_argv(ctx, check), check["budget_s"])
    return finish(status, out, check["budget_s"],
                  lambda o: judge_train(check, o))


def run_bench(check, ctx, binary, judge):
    status, out, _ = ctx.run([ctx.path(binary), "--reps", "5"],
                             check["budget_s"])
    if status == 0 and "no GPU here" in out:
        return "fail", out.strip().splitlines()[-1][:300], {}
    return finish(status, out, check["budget_s"], lambda o: judge(check, o))


def unpack(ctx, check, start):
    """The exported binary, decompressed into the scratch folder; returns
    (path or None, verdict on failure)."""
    os.makedirs(ctx.scratch, exist_ok=True)
    packed = ctx.path(check["binary"])
    target = os.path.join(ctx.scratch, os.path.basename(packed)[:-3])
    if os.path.exists(target):
        return target, None
    status, out, _ = ctx.run(
        ["sh", "-c", 'gzip -dc "$1" > "$2.part" && chmod +x "$2.part" && '
         'mv "$2.part" "$2"', "unpack", packed, target],
        max(1, check["budget_s"] - (time.monotonic() - start)))
    if status != 0:
        return None, finish(status, out, check["budget_s"], None)
    return target, None


def run_exported(check, ctx, extra, judge):
    start = time.monotonic()
    binary, failed = unpack(ctx, check, start)
    if failed:
        return failed
    left = max(1, int(check["budget_s"] - (time.monotonic() - start)))
    status, out, _ = ctx.run([binary, "--prompt", check["prompt"]] + extra,
                             left)
    return finish(status, out, left, judge)


def run_export_logits(check, ctx):
    return run_exported(check, ctx, ["--print-logits"],
                        lambda o: judge_export_logits(check, o, ctx.prepared))


def run_decode(check, ctx):
    return run_exported(check, ctx,
                        ["--bench", "--max-tokens", str(check["max_tokens"])],
                        lambda o: judge_decode(check, o))


def run_speed_llmc(check, ctx):
    argv = training_argv(ctx, check, timing_steps=check["timed_steps"])
    with MemorySampler() as memory:
        status, out, _ = ctx.run(argv, check["budget_s"])
    verdict = finish(status, out, check["budget_s"],
                     lambda o: judge_speed_llmc(check, o, ctx.facts))
    verdict[2]["peak_device_bytes"] = memory.peak_bytes()
    return verdict


def run_speed_torch(check, ctx):
    argv = [sys.executable, os.path.join(ROOT, "bench", "peers_train_gpu.py"),
            "--model", check["model"], "--batch", str(check["batch"]),
            "--seq", str(check["seq"]), "--steps", str(check["timed_steps"])]
    status, out, _ = ctx.run(argv, check["budget_s"])
    return finish(status, out, check["budget_s"],
                  lambda o: judge_speed_torch(check, o, ctx.facts))


def run_memory(check, ctx):
    source = ctx.results.get(check["source"])
    if not source or source["status"] != "pass":
        return "skip", f"{check['source']} did not pass", {}
    measured = source["metrics"].get("peak_device_bytes")
    if measured is None:
        return "skip", "no memory reading (nvidia-smi)", {}
    with open(ctx.path(check["plan"])) as f:
        predicted = json.load(f)["memory"]["total"]["value"]
    ratio = measured / predicted
    metrics = {"measured_bytes": measured, "planned_bytes": predicted,
               "ratio": ratio}
    reason = (f"peak {measured / 2**30:.2f} GiB measured (nvidia-smi, less "
              f"the idle reading) against {predicted / 2**30:.2f} GiB "
              f"planned: {ratio:.2f}x (allowed within "
              f"{check['allowed']:.0%})")
    return ("pass" if abs(ratio - 1) <= check["allowed"] else "fail"), \
        reason, metrics


def run_goal(check, ctx):
    llmc = ctx.results.get(check["source"])
    if not llmc or llmc["status"] != "pass":
        return "skip", f"{check['source']} did not pass", {}
    if "mfu_at_least" in check:
        mfu = llmc["metrics"].get("mfu")
        if mfu is None:
            return "skip", "the GPU's bf16 peak is unknown", {}
        return ("pass" if mfu >= check["mfu_at_least"] else "fail"), \
            (f"MFU {100 * mfu:.1f}% (goal {100 * check['mfu_at_least']:.0f}"
             "%)"), {"mfu": mfu}
    peer = ctx.results.get(check["peer"])
    if not peer or peer["status"] != "pass":
        return "skip", f"{check['peer']} did not pass", {}
    ours, theirs = (llmc["metrics"]["tokens_per_s"],
                    peer["metrics"]["tokens_per_s"])
    return ("pass" if ours >= theirs else "fail"), \
        (f"llmc {ours:,.0f} tokens/s, torch.compile {theirs:,.0f}: "
         f"{ours / theirs:.2f}x"), {"ratio": ours / theirs}


RUNNERS = {
    "train": run_train,
    "attention-tc": lambda c, x: run_bench(c, x, "bin/bench-attention-cuda",
                                           judge_attention_tc),
    "sparse": lambda c, x: run_bench(c, x, "bin/bench-sparse-cuda",
                                     judge_sparse),
    "export-logits": run_export_logits,
    "speed-llmc": run_speed_llmc,
    "speed-torch": run_speed_torch,
    "decode": run_decode,
    "memory": run_memory,
    "goal": run_goal,
}


# --- the run -------------------------------------------------------------

def write_results(results_dir, facts, prepared, results, done):
    report = {"facts": facts, "prepared": prepared.get("about", {}),
              "complete": done, "checks": list(results.values())}
    path = os.path.join(results_dir, "gpu-results.json")
    with open(path + ".part", "w") as f:
        json.dump(report, f, indent=1)
    os.replace(path + ".part", path)
    with open(os.path.join(results_dir, "gpu-results.md"), "w") as f:
        f.write(markdown(facts, prepared, results))


def markdown(facts, prepared, results):
    lines = [f"GPU acceptance run (`scripts/gpu-check.sh`), {facts['date']}: "
             f"{facts['gpu']}, driver {facts['driver']}, CUDA "
             f"{facts['cuda']}; prepared at llmc "
             f"{prepared.get('about', {}).get('commit', '?')}"
             + (" (--short: small models only)" if prepared.get("short")
                else "") + ".", "",
             "| check | group | status | result | seconds |",
             "| --- | --- | --- | --- | --- |"]
    for r in results.values():
        lines.append(f"| {r['name']} | {r['group']} | {r['status']} | "
                     f"{r['reason'].replace('|', '/')} | {r['seconds']:.1f} |")
    speed = [r for r in results.values()
             if r["kind"] in ("speed-llmc", "speed-torch")
             and r["status"] == "pass"]
    if speed:
        lines += ["", "| run | ms a step | tokens/s | MFU (bf16 dense peak) |",
                  "| --- | --- | --- | --- |"]
        for r in speed:
            m = r["metrics"]
            mfu = f"{100 * m['mfu']:.1f}%" if "mfu" in m else "peak unknown"
            lines.append(f"| {r['name']} | {m['ms_per_step']:.1f} | "
                         f"{m['tokens_per_s']:,.0f} | {mfu} |")
    counts = {s: sum(r["status"] == s for r in results.values())
              for s in ("pass", "fail", "skip")}
    lines += ["", f"{counts['pass']} passed, {counts['fail']} failed, "
              f"{counts['skip']} skipped."]
    return "\n".join(lines) + "\n"


def run_checks(args):
    prepared = load_prepared(args.prepared)
    os.makedirs(args.results_dir, exist_ok=True)
    facts = gpu_facts()
    facts["date"] = datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC")
    only = set(args.only.split(",")) if args.only else None
    log = open(os.path.join(args.results_dir, "gpu-check.log"), "w")
    log.write(json.dumps(facts) + "\n")
    unpacked = unpack_cache(args.prepared)
    ctx = Context(os.path.abspath(args.prepared), log, facts)
    start = time.monotonic()
    for check in prepared["checks"]:
        t0 = time.monotonic()
        left = args.time_limit - (t0 - start)
        if only is not None and check["name"] not in only:
            verdict = ("skip", "not selected (--only)", {})
        elif check["budget_s"] > left:
            verdict = ("skip", f"out of time: its budget {check['budget_s']} "
                       f"s, {left:.0f} s left of the run's "
                       f"{args.time_limit} s", {})
        else:
            log.write(f"\n=== {check['name']} (budget {check['budget_s']} "
                      "s)\n")
            try:
                verdict = RUNNERS[check["kind"]](check, ctx)
            except Exception as error:  # a check's own bug fails it alone
                verdict = ("fail", f"the check failed to run: {error!r}", {})
        status, reason, metrics = verdict
        ctx.results[check["name"]] = dict(
            name=check["name"], group=check["group"], kind=check["kind"],
            status=status, reason=reason, metrics=metrics,
            budget_s=check["budget_s"], seconds=time.monotonic() - t0)
        print(f"{status:4}  {check['name']}: {reason}", flush=True)
        write_results(args.results_dir, facts, prepared, ctx.results, False)
    write_results(args.results_dir, facts, prepared, ctx.results, True)
    shutil.rmtree(ctx.scratch, ignore_errors=True)
    if unpacked:  # the folder stays as it travels
        shutil.rmtree(os.path.join(args.prepared, "cache"), ignore_errors=True)
    failed = sum(r["status"] == "fail" for r in ctx.results.values())
    print(f"gpu-check: {len(ctx.results)} checks, {failed} failed, "
          f"{time.monotonic() - start:.0f} s; results in "
          f"{args.results_dir}/gpu-results.json and gpu-results.md")
    return 1 if failed else 0


# --- the dry run ---------------------------------------------------------

def needed_files(check):
    kind = check["kind"]
    if kind in ("train", "speed-llmc"):
        files = ["bin/llmc-cuda-run"] + [
            check["prefix"] + suffix for suffix in
            ["-grad.llmc", "-update.llmc", "-in.safetensors"]
            + (["-ref.safetensors"] if kind == "train" else [])
            + (["-cast.llmc"] if check.get("cast") else [])]
        return files
    return {"attention-tc": ["bin/bench-attention-cuda"],
            "sparse": ["bin/bench-sparse-cuda"],
            "export-logits": [check.get("binary"), check.get("reference")],
            "decode": [check.get("binary")],
            "memory": [check.get("plan")]}.get(kind, [])


def folder_bytes(path):
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(folder, name))
    return total


def tree_bytes():
    """What a device call sends besides the carried paths: tracked files
    and untracked ones git does not ignore."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached",
                              "--others", "--exclude-standard"],
                             capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    total = 0
    for name in out.decode().split("\0"):
        path = os.path.join(ROOT, name)
        if name and os.path.isfile(path):
            total += os.path.getsize(path)
    return total


def check_binary(path):
    """None, or why the binary would not run on the GPU machine."""
    if not os.access(path, os.X_OK):
        return "not executable"
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    shared = [l.split()[0] for l in out.splitlines()
              if re.search(r"libLLVM|libMLIR|libstdc\+\+|libcuda|libnvrtc|"
                           r"libcublas", l)]
    return f"links {', '.join(shared)}" if shared else None


def dry_run_files(prepared, checks, problems):
    seen = set()
    for check in checks:
        for name in needed_files(check):
            if name in seen:
                continue
            seen.add(name)
            path = os.path.join(prepared, name)
            if not os.path.isfile(path):
                problems.append(f"{check['name']}: missing {path}")
            elif name.startswith("bin/") and not name.endswith(".gz"):
                why = check_binary(path)
                if why:
                    problems.append(f"{path}: {why}")
            elif name.endswith(".gz"):
                if subprocess.run(["gzip", "-t", path]).returncode != 0:
                    problems.append(f"{path}: does not decompress")
    peer = os.path.join(ROOT, "bench", "peers_train_gpu.py")
    try:
        py_compile.compile(peer, doraise=True,
                           cfile=os.path.join(prepared, "scratch.pyc"))
        os.remove(os.path.join(prepared, "scratch.pyc"))
    except (py_compile.PyCompileError, OSError) as error:
        problems.append(f"{peer}: {error}")
    print(f"files: {len(seen)} inputs and binaries of {len(checks)} checks "
          "checked")


def dry_run_nvrtc(prepared, checks, problems, quick):
    """Every training program's CUDA modules through NVRTC, as llmc-cuda-run
    compiles them on the GPU, into the carried kernel cache."""
    env = dict(os.environ, LLMC_CACHE_DIR=os.path.join(prepared, "cache"))
    done = set()
    for check in checks:
        if check["kind"] not in ("train", "speed-llmc") or \
                check["prefix"] in done:
            continue
        done.add(check["prefix"])
        prefix = os.path.join(prepared, check["prefix"])
        argv = [os.path.join(prepared, "bin/llmc-cuda-run"),
                prefix + "-grad.llmc", "--update", prefix + "-update.llmc",
                "--compile-only"] + CUDA_ARCH
        if check.get("cast"):
            argv += ["--cast", prefix + "-cast.llmc"]
        nvrtc_step(check["prefix"], argv, env, problems)
    for bench in ("bench-attention-cuda", "bench-sparse-cuda"):
        if quick:
            print(f"nvrtc: {bench}: not compiled (--quick; its module is "
                  "compiled by the unit tests, and a GPU run compiles it "
                  "when the cache lacks it)")
        elif any(c["kind"] in ("attention-tc", "sparse") for c in checks):
            nvrtc_step(bench, [os.path.join(prepared, "bin", bench),
                               "--compile-only"], env, problems)


def nvrtc_step(what, argv, env, problems):
    start = time.monotonic()
    out = subprocess.run(argv, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        problems.append(f"NVRTC: {what}: {out.stderr.strip()[-400:]}")
        return
    programs = [l for l in out.stdout.splitlines() if "compiled " in l]
    hits = sum("cache hit" in l for l in programs)
    print(f"nvrtc: {what}: {len(programs)} modules compiled"
          + (f" ({hits} programs' kernels from the cache)" if hits else "")
          + f" in {time.monotonic() - start:.1f} s")


def dry_run(args):
    prepared = load_prepared(args.prepared)
    checks = prepared["checks"]
    problems = []
    dry_run_files(args.prepared, checks, problems)
    unpack_cache(args.prepared)
    if not any("llmc-cuda-run" in p for p in problems):
        dry_run_nvrtc(args.prepared, checks, problems, args.quick)
    if os.path.isdir(os.path.join(args.prepared, "cache")):
        pack_cache(args.prepared)
    carried = folder_bytes(args.prepared)
    tree = tree_bytes()
    print(f"size: {args.prepared} {carried / 2**20:.1f} MiB, working tree "
          + (f"{tree / 2**20:.1f} MiB" if tree is not None else "unknown")
          + f" (a device call carries at most {CARRY_LIMIT_BYTES >> 20} "
          "MiB)")
    if carried + (tree or 0) > CARRY_LIMIT_BYTES:
        problems.append("the prepared folder and the working tree exceed "
                        "what a device call carries")
    about = prepared.get("about", {})
    print(f"\nplan of the run (prepared {about.get('date', '?')} at llmc "
          f"{about.get('commit', '?')}"
          + (", --short" if prepared.get("short") else "") + "):")
    print(f"  {'#':>2}  {'group':11} {'check':28} {'budget':>7}  what")
    total = 0
    for i, check in enumerate(checks, 1):
        total += check["budget_s"]
        print(f"  {i:2}  {check['group']:11} {check['name']:28} "
              f"{check['budget_s']:5d} s  {check['what']}")
    print(f"  total budget {total} s ({total / 60:.1f} min; the run's limit "
          f"{args.time_limit} s, the issue's 480 s)")
    if total > args.time_limit:
        problems.append(f"the budgets add up to {total} s, over the run's "
                        f"{args.time_limit} s")
    for problem in problems:
        print(f"problem: {problem}")
    print("dry run: " + ("ready" if not problems else
                         f"{len(problems)} problems"))
    return 1 if problems else 0


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        usage="gpu-check.sh RESULTS_DIR | --dry-run [--prepared DIR]")
    parser.add_argument("results_dir", nargs="?")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--prepared", default=os.path.join(ROOT, "build-gpu"))
    parser.add_argument("--only", help="comma-separated check names")
    parser.add_argument("--quick", action="store_true",
                        help="dry run: leave the benches' attention and 2:4 "
                             "modules to the unit tests' NVRTC (the test's "
                             "dry run; a minute less on 2 cores)")
    parser.add_argument("--time-limit", type=int, default=TIME_LIMIT_S)
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    if not args.results_dir:
        parser.error("name the results directory (or --dry-run)")
    return run_checks(args)


if __name__ == "__main__":
    sys.exit(main())
