"""What the training benchmarks' reports (dp.sh, mesh.sh) share: the machine
lines and one llmc run's step times, read from the files bench_machine_facts
(bench/common.sh) and the runs left in the work directory."""
import json
import os
import re
import statistics


def read(work, name, default=""):
    """The stripped text of work/name, or `default` when it cannot be read."""
    try:
        with open(os.path.join(work, name)) as f:
            return f.read().strip()
    except OSError:
        return default


def print_machine(work, cores, coretype):
    """cpu:, kernels: and blas: lines from bench_machine_facts' files."""
    flags = set(read(work, "flags.txt").split())
    host = read(work, "hostcpu.txt", "unknown")
    width = 16 if "avx512f" in flags else 8 if "avx" in flags else 4
    isa = ", ".join(f"{f} {'yes' if f in flags else 'no'}"
                    for f in ("avx2", "fma", "avx512f"))
    print(f"cpu: {read(work, 'cpu.txt', 'unknown')}, {cores} logical CPUs")
    print(f"kernels: LLVM JIT for the host CPU {host}, {width}-wide f32 vectors ({isa})")
    blas = read(work, "blas.txt")
    if "|" in blas:
        config, core = (s.strip() for s in blas.split("|", 1))
        print(f"blas: {config}; core {core} (OPENBLAS_CORETYPE={coretype})")
    else:
        print(f"blas: unknown (OPENBLAS_CORETYPE={coretype})")


def training_run(work, name, warm):
    """llmc run `name` (its log work/name.log, its out dir work/name): the
    step time as the median of the steps after `warm` warm-up steps (from
    metrics.jsonl's elapsed_s; min, max and the deltas too), tokens per
    step, the final checkpoint's seconds (the `done:` line after the last
    step), and the model's name and parameter count from the log."""
    log = read(work, f"{name}.log")
    metrics = [json.loads(l) for l in read(work, f"{name}/metrics.jsonl").splitlines()
               if l.strip()]
    metrics = [m for m in metrics if "elapsed_s" in m and "tokens_per_s" in m]
    r = {"log": log, "metrics": metrics}
    if len(metrics) > warm:
        e = [m["elapsed_s"] for m in metrics]
        deltas = [b - a for a, b in zip(e[warm - 1:], e[warm:])]  # after the warm-up
        r["step"] = statistics.median(deltas)
        r["min"], r["max"] = min(deltas), max(deltas)
        r["tokens"] = metrics[-1]["batch_size"] * metrics[-1]["seq_len"]
        r["deltas"] = deltas
        m = re.search(r"^done: .* in ([0-9.]+)s$|^done: .* in ([0-9]+)m([0-9]+)s$", log, re.M)
        if m:
            done = float(m.group(1)) if m.group(1) else 60 * int(m.group(2)) + int(m.group(3))
            r["checkpoint"] = max(done - e[-1], 0.0)
    m = re.search(r"model (\S+): ([0-9]+) parameters", log)
    if m:
        r["model"], r["params"] = m.group(1), int(m.group(2))
    return r


def print_model_line(run, model, glob, seq, micro, warm):
    """The model line of a training bench: the model run (a) trained (its
    name and parameter count from the log, else `model`), the batch and the
    steps measured."""
    name = run.get("model", model)
    params = f"{run['params']:,} parameters" if "params" in run else "parameters unknown"
    print(f"model: {name} ({params}), fp32 AdamW, global batch {glob} x {seq} tokens in "
          f"micro-batches of {micro}; {warm} warm-up step{'s' if warm != 1 else ''}, "
          f"{len(run.get('deltas', [])) or '?'} measured")


def step_cells(run, base, range_width):
    """A run's step-time columns: the median step ms, min-max ms (each
    `range_width` wide), tokens/s and the speed against `base`; None when
    the run left no metrics."""
    if "step" not in run:
        return None
    speed = base["step"] / run["step"] if "step" in base else float("nan")
    w = range_width
    return (f"{run['step'] * 1e3:>9.1f} {run['min'] * 1e3:>{w}.1f}-{run['max'] * 1e3:<{w}.1f} "
            f"{run['tokens'] / run['step']:>9.0f} {speed:>6.2f}x")

