#!/usr/bin/env bash
# bench-mesh: tensor, pipeline and data parallelism on one machine's cores,
# and what each moves per step against `llmc plan` (bench/README.md).
#
#   bash bench/mesh.sh [--short] [--build DIR] [--work DIR]
#
# Trains GPT-2 124M with `llmc run` on the bundled corpus, the same global
# batch and micro-batches every time, as (a) one process on every core and
# as two ranks under mpirun with one thread each: (b) dp=2 (DDP), (c) tp=2,
# (d) pp=2 (1F1B over the step's micro-batches) and (e) tp=2 with sequence
# parallelism (--sp); and prints:
#   - the step time of each (median of the measured steps after a warm-up
#     step, from OUT/metrics.jsonl's elapsed_s), tokens/s and the speed
#     against (a); for pp the micro-batches and the bubble llmc run prints;
#   - per run and mesh axis, what rank 0's steps moved (llmc run's `mesh
#     traffic` line: the communicators' counts of the calls, collectives at
#     a ring's per-rank volume, pipeline sends and receives) against the
#     bytes `llmc plan --json` gives for the same model, batch and layout
#     (its `traffic` section: the planner's formulas, the ones its step
#     time prices), and their ratio; what the planner does not model (the
#     loss's and the vocabulary-parallel embedding's all-reduces under tp,
#     the tied embedding's gradient between the first and last stage) is
#     the difference, itemized below the table from the model's sizes;
#   - the CPU, the ISA the JIT kernels target, the BLAS core, Open MPI and
#     the load average before and after (the machine may be shared).
# Full mode: seq_len 64, global batch 8 in micro-batches of 2 (4 per step,
# so pp=2 runs 4 micro-batches), 1 warm-up and 3 measured steps; about 10
# minutes on 2 cores.
# --short: the tiny GPT (examples/tiny.yaml), global batch 32 in micro-
# batches of 8, 1 + 2 steps; under a minute (test/bench/bench-mesh.test
# checks every line, the byte counts exactly).
#
# OPENBLAS_CORETYPE and the rest of the environment are passed on as they
# are. Timings on a shared machine move by tens of percent between runs.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
bench_parse bench-mesh "$@"

if [[ ! -d $build ]]; then
  echo "bench-mesh: build directory '$build' not found (--build DIR)" >&2
  exit 1
fi
build=$(cd "$build" && pwd)
llmc=$build/bin/llmc
mpirun=(bash "$src/scripts/mpirun.sh")
if [[ ! -x $llmc ]]; then
  echo "bench-mesh: $llmc not found (build it: ninja -C $build llmc)" >&2
  exit 1
fi
bench_require_mpi bench-mesh

bench_workdir bench-mesh

cores=$(nproc)
ranks=2
threads=$((cores / ranks > 0 ? cores / ranks : 1))

# The training run: the bundled corpus through examples/train-tiny.yaml, its
# model replaced in the full mode. No evaluation, no samples; a checkpoint
# only at the end.
config=$src/examples/train-tiny.yaml
if ((short)); then
  model=$src/examples/tiny.yaml
  seq=64 micro=8 global=32 warm=1 measured=2
else
  model=gpt2
  seq=64 micro=2 global=8 warm=1 measured=3
fi
steps=$((warm + measured))
common=(--model "$model" --seq-len "$seq" --micro-batch-size "$micro"
        --global-batch-size "$global" --max-steps "$steps" --log-interval 1
        --eval-steps 0 --sample-tokens 0 --checkpoint-interval 0
        --keep-checkpoints 1 --warmup-steps 0)

fail() {
  echo "bench-mesh: $1 failed; the end of its output ($2):" >&2
  tail -n 30 "$2" >&2
  exit 1
}

# run NAME [MESH FLAGS...]: one training run; without flags one process on
# every core, with them two ranks of one thread.
run() {
  local name=$1 out=$work/$1
  shift
  rm -rf "$out"
  if (($# == 0)); then
    "$llmc" run "$config" "${common[@]}" --threads "$cores" --out "$out" \
      >"$work/$name.log" 2>&1 || fail "llmc run ($name)" "$work/$name.log"
  else
    "${mpirun[@]}" -np "$ranks" "$llmc" run "$config" "${common[@]}" "$@" \
      --threads "$threads" --out "$out" \
      >"$work/$name.log" 2>&1 || fail "mpirun llmc run $* ($name)" "$work/$name.log"
  fi
  rm -rf "$out/checkpoints" # GPT-2's are 1.5 GB each
}

# plan NAME [LAYOUT FLAGS...]: llmc plan's report of the same model, batch
# and layout on $ranks devices, as JSON (its traffic section).
plan() {
  local name=$1
  shift
  "$llmc" plan "$config" --model "$model" --gpus-per-node "$ranks" \
    --micro-batch-size "$micro" --global-batch-size "$global" --seq-len "$seq" \
    --step-memory formula --json "$@" >"$work/plan-$name.json" 2>"$work/plan-$name.err" ||
    fail "llmc plan $*" "$work/plan-$name.err"
}

bench_machine_facts
mpirun --version 2>/dev/null | head -n1 >"$work/mpi.txt" || true
cat /proc/loadavg >"$work/load-before.txt" 2>/dev/null || true

run a                 # (a) one process, every core
run b --dp 2          # (b) data parallel, DDP
run c --tp 2          # (c) tensor parallel
run d --pp 2          # (d) pipeline parallel
run e --tp 2 --sp     # (e) tensor and sequence parallel
cat /proc/loadavg >"$work/load-after.txt" 2>/dev/null || true

plan b --zero 0
plan c --tp 2
plan d --pp 2
plan e --tp 2 --sp

PYTHONPATH=$src/bench "$python" - "$work" "$short" "$model" "$seq" "$micro" \
  "$global" "$warm" "$cores" "$ranks" "$threads" "${OPENBLAS_CORETYPE-unset}" <<'EOF'
import json, re, sys
import common

work, short, model, seq, micro, glob, warm, cores, ranks, threads, coretype = sys.argv[1:]
seq, micro, glob, warm, cores, ranks, threads = map(
    int, (seq, micro, glob, warm, cores, ranks, threads))

def read(name, default=""):
    return common.read(work, name, default)

print("bench-mesh: tensor, pipeline and data parallelism of llmc run on the CPU"
      + (" (--short)" if short == "1" else ""))
common.print_machine(work, cores, coretype)
print(f"mpi: {read('mpi.txt', 'unknown')}, {ranks} ranks on this machine "
      "(scripts/mpirun.sh: shared memory)")

def load(name):
    parts = read(name).split()
    return " ".join(parts[:3]) if len(parts) >= 3 else "unknown"
print(f"load average (1, 5, 15 min): {load('load-before.txt')} before, "
      f"{load('load-after.txt')} after")

# --- runs ---
runs = {k: common.training_run(work, k, warm) for k in "abcde"}
a = runs["a"]
common.print_model_line(a, model, glob, seq, micro, warm)

labels = {
    "a": ("(a) 1 process", f"1 x {cores}"),
    "b": (f"(b) dp={ranks} (DDP)", f"{ranks} x {threads}"),
    "c": (f"(c) tp={ranks}", f"{ranks} x {threads}"),
    "d": (f"(d) pp={ranks}", f"{ranks} x {threads}"),
    "e": (f"(e) tp={ranks} --sp", f"{ranks} x {threads}"),
}
print()
print("step time (median of the measured steps; min-max):")
print(f"  {'config':<18} {'procs x threads':>15} {'step ms':>9} {'min-max ms':>15} "
      f"{'tokens/s':>9} {'vs (a)':>7}")
for k in "abcde":
    (label, layout), cells = labels[k], common.step_cells(runs[k], a, 7)
    if cells is None:
        print(f"  {label:<18} {layout:>15} {'no metrics':>9}")
        continue
    print(f"  {label:<18} {layout:>15} {cells}")
m = re.search(r"pipeline of ([0-9]+) stages, 1F1B over ([0-9]+) micro-batches per step: "
              r"bubble \(p-1\)/\(m\+p-1\) = ([0-9.]+)", runs["d"]["log"])
if m:
    print(f"  (d): {m.group(2)} micro-batches per step through {m.group(1)} stages, "
          f"bubble (p-1)/(m+p-1) = {m.group(3)}; each stage's forward runs twice "
          "(recomputed for the backward)")

# --- communication per axis ---
def traffic(r):
    """llmc run's `mesh traffic` line: {axis: {collectives, bytes, sends, ...}}."""
    # (after the console's status line where the log is a terminal's)
    m = re.search(r"mesh traffic per step and rank: (.*)$", r["log"], re.M)
    axes = {}
    for part in (m.group(1).split("; ") if m else []):
        t = re.fullmatch(r"(\w+) ([0-9.]+) collectives ([0-9]+) B"
                         r"(?:, ([0-9.]+) sends ([0-9]+) B, ([0-9.]+) receives ([0-9]+) B)?", part)
        if t:
            axes[t.group(1)] = {
                "collectives": float(t.group(2)), "bytes": int(t.group(3)),
                "sends": float(t.group(4) or 0), "send_bytes": int(t.group(5) or 0),
                "recvs": float(t.group(6) or 0), "recv_bytes": int(t.group(7) or 0)}
    return axes

def planned(k):
    try:
        report = json.loads(read(f"plan-{k}.json", "{}"))
    except ValueError:
        return {}
    return {key: q["value"] for key, q in report.get("traffic", {}).items()}

print()
print("communication per step, rank 0 (measured: llmc run's mesh traffic line; "
      "plan: llmc plan --json):")
print(f"  {'config':<18} {'axis':<4} {'what':<34} {'calls':>6} {'measured B':>12} "
      f"{'plan B':>12} {'ratio':>7}")

def row(k, axis, what, calls, measured, plan):
    ratio = f"{measured / plan:.4f}" if plan else "-"
    plan_text = f"{plan:.0f}" if plan else "not modelled"
    print(f"  {labels[k][0]:<18} {axis:<4} {what:<34} {calls:>6.1f} {measured:>12} "
          f"{plan_text:>12} {ratio:>7}")

measured = {k: traffic(runs[k]) for k in "bcde"}
plans = {k: planned(k) for k in "bcde"}
for k, axis in (("b", "dp"), ("c", "tp"), ("d", "pp"), ("e", "tp")):
    t, p = measured[k].get(axis), plans[k]
    if t is None:
        print(f"  {labels[k][0]:<18} {axis:<4} no mesh traffic line")
    elif axis == "dp":
        row(k, axis, "gradient all-reduce, loss gather", t["collectives"], t["bytes"],
            p.get("step_dp_gradient_bytes", 0) + p.get("step_dp_weight_bytes", 0))
    elif axis == "tp":
        row(k, axis, "all-reduces" if k == "c" else "reduce-scatters, all-gathers, ...",
            t["collectives"], t["bytes"], p.get("step_tp_bytes", 0))
    else:
        row(k, axis, "activations, gradients (send+recv)", t["sends"] + t["recvs"],
            t["send_bytes"] + t["recv_bytes"], p.get("step_pp_bytes", 0))
        row(k, axis, "collectives (tied wte, loss, norm)", t["collectives"], t["bytes"],
            p.get("step_pp_tied_bytes", 0))
for k in "bcde":  # anything else the runs moved
    for axis, t in sorted(measured[k].items()):
        known = {"b": "dp", "c": "tp", "d": "pp", "e": "tp"}[k]
        if axis != known:
            row(k, axis, "collectives", t["collectives"], t["bytes"], 0)

EOF
